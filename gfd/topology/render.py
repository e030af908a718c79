"""Rendering a topology: the ``nvidia-smi topo -m`` table, plain JSON, a node annotation.

This module owns the three output forms of a :class:`~gfd.topology.model.Topology`:

- :func:`render_table`: the layout and legend of ``nvidia-smi topo -m`` (GPU columns,
  ``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``), tab-separated like the original;
- :func:`topology_to_json`: plain data (matrix, domains, NVLinks per GPU to GPUs outside
  the node, summary) for ``gfd topo
  --format json`` and the facts output;
- :func:`to_annotation`: compact JSON for a node annotation, each matrix row run-length
  encoded (``"NV12 X NV12*6"``), decoded again by :func:`matrix_from_annotation`.

The matrix cells of all three (N² of them) are made by the C extension
(``matrix_rows``, ``run_length_rows`` in ``_cells.c``) or by the Python twins here
(:meth:`Topology.matrix`, :func:`_python_run_length_rows`), as ``implementation``
says; the rest of each document is the same Python code for both.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from gfd.base.errors import TopologyError
from gfd.facts import NodeFacts
from gfd.topology.extension import Implementation, c_extension, check_implementation
from gfd.topology.model import Topology

#: Suggested node annotation key for :func:`to_annotation`.
ANNOTATION_KEY = "nvidia.com/gpu.topology"
#: Version of the annotation format, written as ``"v"``.
ANNOTATION_VERSION = 1
#: Largest annotation :func:`to_annotation` writes with the matrix: a quarter of the
#: 256 KiB that all annotations of a Node share. Beyond it the matrix is left out.
ANNOTATION_LIMIT = 64 * 1024

LEGEND = (
    ("X", "Self"),
    (
        "SYS",
        "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
        "(e.g., QPI/UPI)",
    ),
    (
        "NODE",
        "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
        "within a NUMA node",
    ),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    (
        "PXB",
        "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    ),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)
#: Legend line for pairs NVML gave no common ancestor for (shown only when present).
UNKNOWN_LEGEND = ("N/A", "Connection level not reported by NVML")
#: Line under the legend naming GPUs with active NVLinks to GPUs that are not on the node.
OUTSIDE_NOTE = "NVLinks to GPUs outside this node"


def render_table(
    topology: Topology, facts: NodeFacts, *, implementation: Implementation = "c"
) -> str:
    """The matrix in the layout of ``nvidia-smi topo -m``, legend included."""
    n = topology.gpu_count
    if len(facts.gpus) != n:
        raise TopologyError(
            f"cannot render a {n}-GPU topology with facts of {len(facts.gpus)} GPUs"
        )
    matrix = matrix_rows(topology, implementation=implementation)
    header = ["", *(f"GPU{index}" for index in range(n))]
    header += ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t".join(header)]
    for a, gpu in enumerate(facts.gpus):
        cells = [" X " if a == b else cell for b, cell in enumerate(matrix[a])]
        affinity = gpu.cpu_affinity or "N/A"
        numa = "N/A" if gpu.numa_node is None or gpu.numa_node < 0 else str(gpu.numa_node)
        # The GPU's own memory NUMA node exists only on coherent CPU-GPU systems
        # (Grace Hopper/Blackwell); elsewhere NVML does not report it and nvidia-smi says N/A.
        gpu_numa = "N/A" if gpu.gpu_numa_id is None else str(gpu.gpu_numa_id)
        lines.append("\t".join([f"GPU{a}", *cells, affinity, numa, gpu_numa]))
    legend = list(LEGEND)
    if topology.has_unknown_levels():
        legend.append(UNKNOWN_LEGEND)
    lines += ["", "Legend:", ""]
    lines += [f"  {code:<4} = {meaning}" for code, meaning in legend]
    outside = [f"GPU{gpu} {count}" for gpu, count in enumerate(topology.outside_nvlinks) if count]
    if outside:
        # No matrix cell can show a link to a GPU that is not on the node (a VM given one
        # GPU of an NVLink-bridged pair): nvidia-smi has no code for it either.
        lines += ["", f"{OUTSIDE_NOTE}: {', '.join(outside)}"]
    return "\n".join(lines) + "\n"


def topology_to_json(topology: Topology, *, implementation: Implementation = "c") -> dict[str, Any]:
    """Plain data: the matrix as rows of cell strings, the domains and the summary."""
    summary = topology.summary
    return {
        "gpu_count": topology.gpu_count,
        "matrix": matrix_rows(topology, implementation=implementation),
        "domains": [
            {
                "gpus": list(domain.gpus),
                "all_to_all": domain.all_to_all,
                "nvswitch": domain.nvswitch,
            }
            for domain in topology.domains
        ],
        "outside_nvlinks": list(topology.outside_nvlinks),
        "summary": {
            "interconnect": summary.interconnect,
            "weakest_link": summary.weakest_link,
            "min_nvlinks": summary.min_nvlinks,
            "pcie_worst": summary.pcie_worst,
            "numa_nodes": list(summary.numa_nodes),
            "gpus_per_numa_node": {str(node): count for node, count in summary.gpus_per_numa_node},
        },
    }


def render_topology(
    topology: Topology,
    facts: NodeFacts,
    *,
    fmt: Literal["table", "json"] = "table",
    implementation: Implementation = "c",
) -> str:
    """What ``gfd topo --format table|json`` prints."""
    if fmt == "table":
        return render_table(topology, facts, implementation=implementation)
    if fmt == "json":
        document = topology_to_json(topology, implementation=implementation)
        return json.dumps(document, indent=2) + "\n"
    raise ValueError(f"unknown topology format {fmt!r}: use 'table' or 'json'")


def to_annotation(
    topology: Topology,
    *,
    max_bytes: int = ANNOTATION_LIMIT,
    implementation: Implementation = "c",
) -> str:
    """Compact JSON for a node annotation.

    Keys: ``v`` (format version), ``gpus``, ``interconnect``, ``domains`` (lists of GPU
    indices), ``matrix`` (one run-length encoded string per row). When the text would
    exceed ``max_bytes``, ``matrix`` is null and ``matrix_bytes`` says how large it was.
    """
    document: dict[str, Any] = {
        "v": ANNOTATION_VERSION,
        "gpus": topology.gpu_count,
        "interconnect": topology.summary.interconnect,
        "domains": [list(domain.gpus) for domain in topology.domains],
        "matrix": run_length_rows(topology, implementation=implementation),
    }
    text = _compact_json(document)
    if len(text.encode()) > max_bytes:
        document["matrix"] = None
        document["matrix_bytes"] = len(text.encode())
        text = _compact_json(document)
    return text


def matrix_from_annotation(text: str) -> list[list[str]] | None:
    """The matrix of an annotation written by :func:`to_annotation` (None if left out)."""
    document = json.loads(text)
    if not isinstance(document, dict) or document.get("v") != ANNOTATION_VERSION:
        raise TopologyError(f"not a version {ANNOTATION_VERSION} topology annotation")
    rows = document.get("matrix")
    if rows is None:
        return None
    matrix: list[list[str]] = []
    for row in rows:
        cells: list[str] = []
        for token in row.split(" "):
            cell, star, count = token.partition("*")
            cells.extend([cell] * (int(count) if star else 1))
        matrix.append(cells)
    return matrix


def matrix_rows(topology: Topology, *, implementation: Implementation = "c") -> list[list[str]]:
    """Every cell as rows of strings: :meth:`Topology.matrix`, made in C or in Python."""
    check_implementation(implementation)
    if implementation == "c":
        rows: list[list[str]] = c_extension().matrix_rows(
            topology.gpu_count, topology.levels, topology.nvlinks
        )
        return rows
    return topology.matrix()


def run_length_rows(topology: Topology, *, implementation: Implementation = "c") -> list[str]:
    """The annotation's rows: each matrix row with runs of equal cells as ``cell*count``."""
    check_implementation(implementation)
    if implementation == "c":
        rows: list[str] = c_extension().run_length_rows(
            topology.gpu_count, topology.levels, topology.nvlinks
        )
        return rows
    return _python_run_length_rows(topology)


def _python_run_length_rows(topology: Topology) -> list[str]:
    return [_run_length(topology.row(a)) for a in range(topology.gpu_count)]


def _run_length(cells: list[str]) -> str:
    tokens: list[str] = []
    start = 0
    while start < len(cells):
        end = start
        while end < len(cells) and cells[end] == cells[start]:
            end += 1
        run = end - start
        tokens.append(cells[start] if run == 1 else f"{cells[start]}*{run}")
        start = end
    return " ".join(tokens)


def _compact_json(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"))
