"""Tests of the file sinks (gfd.sinks.featurefile) and the NFD model they are held to."""
