"""The facts: everything gfd reads from a node, and their YAML/JSON form.

This package owns the facts model and its serialised form, one concern a module:

- :mod:`gfd.facts.model`: the frozen dataclasses (:class:`NodeFacts` and its parts) and
  the NVML enumerations they name by text;
- :mod:`gfd.facts.serialise`: facts written as YAML or JSON, files read with bounds and
  parsed;
- :mod:`gfd.facts.validate`: facts built from parsed data, every field checked;
- :mod:`gfd.facts.cpulist`: the canonical Linux cpulist.

Every name the rest of gfd uses is importable from here. ``dump_facts`` and
``facts_from_dict(parse_document(...))`` round-trip losslessly.
"""

# The error belongs to the facts model; it is defined in gfd.base.errors so that gfd.base.errors
# imports nothing of gfd (no import circle).
from gfd.base.errors import FactsError as FactsError
from gfd.facts.cpulist import cpulist_from_ids as cpulist_from_ids
from gfd.facts.model import FABRIC_STATES as FABRIC_STATES
from gfd.facts.model import GI_PROFILE_VARIANTS as GI_PROFILE_VARIANTS
from gfd.facts.model import GPU_VIRTUALIZATION_MODES as GPU_VIRTUALIZATION_MODES
from gfd.facts.model import NVLINK_REMOTE_TYPES as NVLINK_REMOTE_TYPES
from gfd.facts.model import P2P_STATUSES as P2P_STATUSES
from gfd.facts.model import PCI_LEVELS as PCI_LEVELS
from gfd.facts.model import SERIAL_PATTERN as SERIAL_PATTERN
from gfd.facts.model import FabricInfo as FabricInfo
from gfd.facts.model import Gpu as Gpu
from gfd.facts.model import MemoryHealth as MemoryHealth
from gfd.facts.model import MigDevice as MigDevice
from gfd.facts.model import NodeFacts as NodeFacts
from gfd.facts.model import NvLink as NvLink
from gfd.facts.model import NvLinkP2P as NvLinkP2P
from gfd.facts.model import NvLinkRemoteType as NvLinkRemoteType
from gfd.facts.model import P2PStatus as P2PStatus
from gfd.facts.model import PcieLink as PcieLink
from gfd.facts.model import PciLevel as PciLevel
from gfd.facts.model import PciPair as PciPair
from gfd.facts.model import RemappedRows as RemappedRows
from gfd.facts.model import RetiredPages as RetiredPages
from gfd.facts.model import VgpuInfo as VgpuInfo
from gfd.facts.serialise import DERIVED_KEY as DERIVED_KEY
from gfd.facts.serialise import dump_facts as dump_facts
from gfd.facts.serialise import facts_to_dict as facts_to_dict
from gfd.facts.serialise import parse_document as parse_document
from gfd.facts.serialise import read_facts_text as read_facts_text
from gfd.facts.serialise import save_facts_text as save_facts_text
from gfd.facts.validate import facts_from_dict as facts_from_dict
