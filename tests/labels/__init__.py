"""Tests of the labels (gfd.labels): each family, their composition, what a sink may delete."""
