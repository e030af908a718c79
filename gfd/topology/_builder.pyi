"""Type stub of the C topology builder (``_builder.c``)."""

from gfd.topology.model import RawTopology

MAX_GPUS: int
MAX_ACTIVE_LINKS: int

def build(
    gpu_count: int,
    bus_keys: bytes,
    numa_nodes: bytes,
    levels: bytes,
    links: bytes,
    p2p: bytes = b"",
    /,
) -> RawTopology: ...
