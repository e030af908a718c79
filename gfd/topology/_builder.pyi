"""Type stub of the C topology extension (``_builder.c``, ``_encode.c``, ``_cells.c``)."""

from collections.abc import Mapping, Sequence

from gfd.facts import Gpu, PciPair
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
def encode(
    gpus: Sequence[Gpu],
    pci_pairs: Sequence[PciPair],
    pci_levels: Mapping[str, int],
    remote_codes: Mapping[str | None, int],
    /,
) -> tuple[bytes, bytes, bytes, bytes] | None: ...
def matrix_rows(gpu_count: int, levels: bytes, nvlinks: bytes, /) -> list[list[str]]: ...
def run_length_rows(gpu_count: int, levels: bytes, nvlinks: bytes, /) -> list[str]: ...
