"""How a gfd process ends: its exit statuses, and the one line that says why it failed."""

from __future__ import annotations

from gfd.errors import shorten

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: The longest error line gfd prints; whatever a message echoes, it stays readable.
ERROR_LINE_LIMIT = 1000


def error_line(exc: BaseException | str) -> str:
    """``gfd: error: <reason>`` on one line, however the reason was built."""
    reason = " ".join(str(exc).splitlines())
    return f"gfd: error: {shorten(reason, ERROR_LINE_LIMIT)}"
