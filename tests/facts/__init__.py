"""Tests of the facts model (gfd.facts): its file forms, and the errors of bad facts."""
