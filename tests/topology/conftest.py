"""Every topology test runs against both builders: the C extension and its Python twin.

The ``build`` fixture is parametrised over the two implementations, so a test that
asks for it runs twice. ``kit`` makes facts by hand: GPUs, NVLinks to peers and to
switches, PCIe levels, and the published machines the issue names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import pytest

from gfd.facts import PCI_LEVELS, Gpu, NodeFacts, NvLink, NvLinkRemoteType, PciLevel, PciPair
from gfd.topology import Implementation, Topology, build_topology
from gfd.topology.compact import _REMOTE_CODES
from gfd.topology.extension import c_extension

Build = Callable[[NodeFacts], Topology]


@pytest.fixture(params=["c", "python"])
def implementation(request: pytest.FixtureRequest) -> Implementation:
    value: Implementation = request.param
    return value


@pytest.fixture
def build(implementation: Implementation) -> Build:
    def build_with(facts: NodeFacts) -> Topology:
        return build_topology(facts, implementation=implementation)

    return build_with


def c_encodes(facts: NodeFacts) -> bool:
    """Whether the C encoder encoded ``facts`` itself (None: it left them to Python).

    Tests that compare the two encoders check it, so that a C encoder that gave up on
    everything cannot pass them by always handing over to the Python one.
    """
    encoded = c_extension().encode(facts.gpus, facts.pci_pairs, PCI_LEVELS, _REMOTE_CODES)
    return encoded is not None


class MachineKit:
    """Hand-made facts: small helpers and the machines with a published matrix."""

    @staticmethod
    def bus(gpu: int) -> str:
        return f"00000000:{gpu + 0x10:02X}:00.0"

    @staticmethod
    def link(
        index: int,
        remote: str | None,
        remote_type: NvLinkRemoteType | None = "gpu",
        *,
        active: bool = True,
    ) -> NvLink:
        return NvLink(index=index, active=active, remote_bus_id=remote, remote_type=remote_type)

    @classmethod
    def peer_links(cls, wiring: Mapping[tuple[int, int], int], n: int) -> list[list[NvLink]]:
        """Links of ``n`` GPUs from ``{(a, b): links}``, entered on both ends."""
        links: list[list[NvLink]] = [[] for _ in range(n)]
        for (a, b), count in wiring.items():
            for _ in range(count):
                for near, far in ((a, b), (b, a)):
                    links[near].append(cls.link(len(links[near]), cls.bus(far)))
        return links

    @classmethod
    def switch_links(cls, count: int, switches: list[str]) -> list[NvLink]:
        """``count`` links spread round-robin over the switches with these bus ids."""
        return [cls.link(k, switches[k % len(switches)], "switch") for k in range(count)]

    @classmethod
    def gpu(
        cls,
        index: int,
        links: Iterable[NvLink] = (),
        *,
        numa: int | None = None,
        affinity: str | None = None,
        bus_id: str | None = None,
    ) -> Gpu:
        return Gpu(
            index=index,
            name="Test GPU",
            uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000",
            bus_id=bus_id or cls.bus(index),
            numa_node=numa,
            cpu_affinity=affinity,
            nvlinks=tuple(links),
        )

    @staticmethod
    def node(
        gpus: Iterable[Gpu],
        level: Callable[[int, int], PciLevel | None] = lambda a, b: "system",
    ) -> NodeFacts:
        """Facts of ``gpus``; ``level(a, b)`` gives each pair's level (None: not reported)."""
        gpus = tuple(gpus)
        pairs = []
        for a in range(len(gpus)):
            for b in range(a + 1, len(gpus)):
                value = level(a, b)
                if value is not None:
                    pairs.append(PciPair(a=a, b=b, level=value))
        return NodeFacts(driver_version="550.54.15", gpus=gpus, pci_pairs=tuple(pairs))

    # --- machines with a published `nvidia-smi topo -m` ------------------------

    def dgx_a100(self) -> NodeFacts:
        """8x A100 SXM4, 12 links each to 6 NVSwitches; NUMA 3,3,1,1,7,7,5,5."""
        switches = [f"00000000:{0xC4 + k:02X}:00.0" for k in range(6)]
        numa = [3, 3, 1, 1, 7, 7, 5, 5]
        affinity = {
            3: "48-63,176-191",
            1: "16-31,144-159",
            7: "112-127,240-255",
            5: "80-95,208-223",
        }
        gpus = [
            self.gpu(i, self.switch_links(12, switches), numa=numa[i], affinity=affinity[numa[i]])
            for i in range(8)
        ]
        return self.node(gpus, lambda a, b: "multiple" if numa[a] == numa[b] else "system")

    def hgx_h100(self) -> NodeFacts:
        """8x H100 SXM5, 18 links each to 4 NVSwitches; GPU0-3 on NUMA 0, GPU4-7 on 1."""
        buses = [0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF]
        switches = [f"00000000:{0x05 + k:02X}:00.0" for k in range(4)]
        gpus = [
            self.gpu(
                i,
                self.switch_links(18, switches),
                numa=i // 4,
                affinity="0-47,96-143" if i < 4 else "48-95,144-191",
                bus_id=f"00000000:{buses[i]:02X}:00.0",
            )
            for i in range(8)
        ]
        return self.node(gpus, lambda a, b: "node" if a // 4 == b // 4 else "system")

    #: DGX-1V hybrid cube mesh: (GPU, GPU) → links.
    CUBE_MESH: Mapping[tuple[int, int], int] = {
        (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
        (1, 2): 2, (1, 3): 1, (1, 5): 2,
        (2, 3): 2, (2, 6): 1,
        (3, 7): 1,
        (4, 5): 1, (4, 6): 1, (4, 7): 2,
        (5, 6): 2, (5, 7): 1,
        (6, 7): 2,
    }  # fmt: skip

    def dgx1_v100(self) -> NodeFacts:
        links = self.peer_links(self.CUBE_MESH, 8)
        gpus = [self.gpu(i, links[i], numa=i // 4) for i in range(8)]

        def level(a: int, b: int) -> PciLevel:
            if a // 2 == b // 2:
                return "single"
            return "node" if a // 4 == b // 4 else "system"

        return self.node(gpus, level)

    def k80_pcie_tree(self) -> NodeFacts:
        """8 GPUs on PCIe: boards of two behind a bridge; GPU2-7 share a socket."""

        def level(a: int, b: int) -> PciLevel:
            if a // 2 == b // 2:
                return "single"
            if a < 2:
                return "system"
            if a < 4:
                return "hostbridge"
            return "multiple"

        numa = [0, 0, 1, 1, 1, 1, 1, 1]
        return self.node([self.gpu(i, numa=numa[i]) for i in range(8)], level)

    def rtx4090x8(self) -> NodeFacts:
        return self.node([self.gpu(i, numa=i // 4) for i in range(8)], lambda a, b: "system")

    def t4_single(self) -> NodeFacts:
        return self.node([self.gpu(0, numa=0, affinity="0-15")])

    def gb200_tray(self) -> NodeFacts:
        """4 GB200 GPUs: every link reports the same remote PCI FFFFFFFF:FF:FF.0."""
        shared = ["FFFFFFFF:FF:FF.0"]
        gpus = [self.gpu(i, self.switch_links(18, shared), numa=i // 2) for i in range(4)]
        return self.node(gpus, lambda a, b: "system")


@pytest.fixture
def kit() -> MachineKit:
    return MachineKit()
