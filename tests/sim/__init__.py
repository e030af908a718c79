"""Tests of the NVML simulator (gfd.sim)."""
