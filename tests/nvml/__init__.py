"""Tests of the NVML reader (gfd.nvml) against the simulator, and its page in the docs."""
