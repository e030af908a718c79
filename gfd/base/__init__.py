"""What every other part of gfd stands on, and nothing else.

The one error hierarchy (``errors``) and how a record is declared (``frozen``); bounded
reads of every file gfd reads (``inputs``); the garbage collector's pause while a process
starts (``startup_gc``); logging (``logs``). They import nothing of gfd's outside this
package, so every layer may use them; the import-layer test keeps their order inside it.
"""
