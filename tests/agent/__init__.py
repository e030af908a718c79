"""Tests of the agent (gfd.agent): one cycle, its faults, and the loop control."""
