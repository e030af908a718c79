"""Tests of what ships: the container image, the kustomize deployment, the admission policies."""
