"""gfd: GPU feature discovery for Kubernetes.

Reads NVIDIA GPUs through NVML (or the bundled simulator), turns what it read into
node labels compatible with NVIDIA's GPU Feature Discovery plus topology labels of
its own, and publishes them to a feature file, the Node, a NodeFeature or stdout.
"""

__version__ = "0.1.0"
