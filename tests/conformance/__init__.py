"""Conformance suites: gfd judged by third-party implementations (see tests/oracles.py)."""
