"""Tests of the assembly and the command (gfd.app, gfd.cli): sinks, signals, the process."""
