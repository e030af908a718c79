"""Recorded evidence: what third-party programs no package registry ships showed, kept as data.

One folder per program (``reference-gfd/``, ``config-manager/``, ...), each holding record
files written by a runner that takes the program's path; :mod:`tests.records.store` reads,
hashes and writes them. CI replays the records; nothing here builds or ships the programs.
"""
