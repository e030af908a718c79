"""Tests of the metrics endpoint and telemetry (gfd.metrics)."""
