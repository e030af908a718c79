"""Tests of gfd.topology and the topology labels, run against both builders."""
