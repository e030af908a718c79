"""NVIDIA's Xid catalog as data: for each Xid, what it is and what NVIDIA recommends doing.

This module owns the table (:data:`CATALOG`), where it comes from (:data:`SOURCE`,
:data:`CATALOG_DATE`) and the words gfd puts on each recommendation (:func:`advice`), which
the ``xid`` check's messages (so the ``GPUHealthy`` condition and its Event) and the
``action`` label of ``gfd_gpu_xid_errors_total`` carry.

The catalog gives each Xid two resolution buckets: the *immediate* action, "the action that
is immediately needed in order to recover the system and get it back into service" (what
:class:`XidAction` holds), and the *investigatory* action, to take when the Xid recurs or is
not expected (:class:`XidFollowUp`). The buckets are NVIDIA's names, kept as NVIDIA spells
them; the wording is gfd's short reading of the catalog's "Fault Resolution Buckets" sheet.

Xids 162 to 172 are in the catalog with no resolution bucket (a few carry free-text advice
in its trigger column instead): :data:`CATALOG` holds what they are, with no action, and
their counter label is ``unknown``, as for an Xid the catalog does not list. Nothing here
decides which Xids are fatal: that is ``--health-fatal-xids`` / ``--health-ignored-xids``.

Pure data, loaded once at import; of gfd it imports only :mod:`gfd.base.frozen`.
"""

from __future__ import annotations

import enum

from gfd.base.frozen import frozen_dataclass

#: Where the table comes from: NVIDIA's page, and what it was checked against.
SOURCE = (
    'NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (XID Errors), '
    "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html: its table "
    '"Xids", columns "Resolution Bucket (Immediate Action)" and "Resolution Bucket '
    '(Investigatory Action)". Immediate actions cross-checked against NVIDIA/NVSentinel '
    "distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv, an "
    "older copy of the catalog: it agrees on every immediate action but those of 108, 160 "
    "and 162 and of the Xids the page lists as unused (and 142), which it replaces with its "
    "own UNEXPECTED_ERR_REPORT_ISSUE; NVIDIA's page is followed"
)
#: When the catalog was read from NVIDIA's page (the page carries no date of its own); its
#: newest entries name driver R575 and CUDA 12.9 (:data:`CATALOG_DRIVER`).
CATALOG_DATE = "2026-12-07"
#: The newest driver branch the catalog's entries name.
CATALOG_DRIVER = "R575"


class XidAction(enum.Enum):
    """The catalog's immediate action (its "Resolution Bucket (Immediate Action)")."""

    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    RESTART_VM = "RESTART_VM"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    IGNORE = "IGNORE"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    CHECK_UVM = "CHECK_UVM"
    UPDATE_SWFW = "UPDATE_SWFW"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    XID_154 = "XID_154"

    @property
    def label(self) -> str:
        """The value of the counter's ``action`` label: the bucket in lower case."""
        return self.value.lower()


class XidFollowUp(enum.Enum):
    """The catalog's investigatory action, for an Xid that recurs or is not expected."""

    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    CHECK_APP_CUDA = "CHECK_APP/CUDA"
    INVESTIGATE_SW = "INVESTIGATE_SW"
    INVESTIGATE_SW_USER = "INVESTIGATE_SW_USER"
    INVESTIGATE_LINK_SI = "INVESTIGATE_LINK_SI"
    WORKFLOW_XID_13 = "WORKFLOW_XID_13"
    WORKFLOW_XID_31 = "WORKFLOW_XID_31"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    XID_137_FLOW = "XID_137_FLOW"
    IGNORE = "IGNORE"
    IGNORE_SYMPATHETIC = "IGNORE (sympathetic)"
    SYMPATHETIC_REPORT_SOLO = "SYMPATHETIC_REPORT_SOLO"
    UPDATE_SWFW = "UPDATE_SWFW"
    #: Xid 154: "Informational only regarding another Xid".
    INFORMATIONAL = "N/A"
    #: The catalog gives none (an Xid it lists as unused, and Xid 142).
    NONE = ""


#: What an operator does for each immediate action, in gfd's words.
ACTION_WORDS: dict[XidAction, str] = {
    XidAction.RESTART_APP: "restart the application",
    XidAction.RESET_GPU: "reset the GPU",
    XidAction.RESTART_BM: "reboot the node",
    XidAction.RESTART_VM: "restart the VM that owns the GPU",
    XidAction.CONTACT_SUPPORT: "contact support",
    XidAction.IGNORE: "none needed",
    XidAction.CHECK_MECHANICALS: "check the GPU's seating and connections",
    XidAction.CHECK_UVM: "reset the GPU if UVM or vGPU is in use, else none needed",
    XidAction.UPDATE_SWFW: "update the driver and firmware",
    XidAction.WORKFLOW_XID_45: "follow the Xids that came with it; alone, restart the fabric "
    "manager",
    XidAction.WORKFLOW_XID_48: "reset the GPU (drain it first if Xid 63 or 64 came with it)",
    XidAction.WORKFLOW_NVLINK_ERR: "reset the GPU or reboot the node (the Xid's NVLink "
    "registers tell the cause)",
    XidAction.WORKFLOW_NVLINK5_ERR: "decode the Xid's IntrInfo and error status (the catalog's "
    "Xid 144-150 decode) for the action",
    XidAction.XID_154: "follow the recovery action this Xid names",
}

#: What to do when the Xid recurs, in gfd's words; a follow-up without words adds nothing
#: to the immediate action.
FOLLOW_UP_WORDS: dict[XidFollowUp, str] = {
    XidFollowUp.CONTACT_SUPPORT: "contact support",
    XidFollowUp.CHECK_APP_CUDA: "check the application (the kernel log's line names its pid)",
    XidFollowUp.INVESTIGATE_SW: "investigate the application or driver",
    XidFollowUp.INVESTIGATE_SW_USER: "find the software or user that caused it",
    XidFollowUp.INVESTIGATE_LINK_SI: "investigate the link's signal integrity",
    XidFollowUp.WORKFLOW_XID_13: "run DCGM diagnostics on this GPU, or check the application "
    "if other GPUs get it too",
    XidFollowUp.WORKFLOW_XID_31: "run DCGM diagnostics on this GPU, or check the application "
    "if other GPUs get it too",
    XidFollowUp.WORKFLOW_XID_48: "run field diagnostics",
    XidFollowUp.XID_137_FLOW: "debug the application's NVLink peer access (cuda-gdb, Compute "
    "Sanitizer)",
    XidFollowUp.IGNORE_SYMPATHETIC: "resolve the Xids that came with it, else report it",
    XidFollowUp.SYMPATHETIC_REPORT_SOLO: "resolve the Xids that came with it, else report it",
}


@frozen_dataclass
class XidEntry:
    """One row of the catalog: the Xid, its mnemonic and description as NVIDIA gives them,
    and its two actions (None: the catalog gives no bucket)."""

    xid: int
    mnemonic: str
    description: str
    action: XidAction | None
    follow_up: XidFollowUp


# The catalog's "Xids" sheet: Xid | immediate action | investigatory action | mnemonic |
# description. "-" for a bucket the catalog leaves empty. Descriptions are NVIDIA's, but for
# 45 (its comment after the dash left out), 171 and 172 (shortened).
_ROWS = """
1|CONTACT_SUPPORT|-|ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD|Unused
2|CONTACT_SUPPORT|-|ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD|Unused
3|CONTACT_SUPPORT|-|ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD|Unused
4|CONTACT_SUPPORT|-|ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY|Unused
5|CONTACT_SUPPORT|-|ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW|Unused
6|CONTACT_SUPPORT|-|ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR|Unused
7|CONTACT_SUPPORT|-|ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR|Unused
8|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT|GPU stopped processing
9|CONTACT_SUPPORT|-|ROBUST_CHANNEL_GR_ERROR_INSTANCE|Unused
10|CONTACT_SUPPORT|-|ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP|Unused
11|RESTART_APP|CHECK_APP/CUDA|ROBUST_CHANNEL_GR_ERROR_MISSING_HW|Invalid or corrupted push buffer stream
12|CONTACT_SUPPORT|-|ROBUST_CHANNEL_GR_ERROR_SW_METHOD|Unused
13|RESTART_APP|WORKFLOW_XID_13|ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY|Graphics Engine Exception
14|IGNORE|CONTACT_SUPPORT|ROBUST_CHANNEL_FAKE_ERROR|Unused
15|CONTACT_SUPPORT|-|ROBUST_CHANNEL_SCANLINE_TIMEOUT|Unused
16|CONTACT_SUPPORT|CONTACT_SUPPORT|ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT|Unused
17|CONTACT_SUPPORT|-|ROBUST_CHANNEL_PARAMETER_ERROR|Unused
18|CONTACT_SUPPORT|-|ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR|Unused
19|CONTACT_SUPPORT|-|ROBUST_CHANNEL_DISP_MISSED_NOTIFIER|Unused
20|CONTACT_SUPPORT|-|ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD|Unused
21|CONTACT_SUPPORT|-|ROBUST_CHANNEL_ME_ERROR_SW_METHOD|Unused
22|CONTACT_SUPPORT|-|ROBUST_CHANNEL_VP_ERROR_SW_METHOD|Unused
23|CONTACT_SUPPORT|-|ROBUST_CHANNEL_RC_LOGGING_ENABLED|Unused
24|CONTACT_SUPPORT|-|ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT|Unused
25|RESTART_APP|CHECK_APP/CUDA|ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY|Invalid or illegal push buffer stream
26|CONTACT_SUPPORT|-|ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT|Unused
27|CONTACT_SUPPORT|-|ROBUST_CHANNEL_VP_ERROR|Unused
28|CONTACT_SUPPORT|-|ROBUST_CHANNEL_VP2_ERROR|Unused
29|CONTACT_SUPPORT|-|ROBUST_CHANNEL_BSP_ERROR|Unused
30|CONTACT_SUPPORT|-|ROBUST_CHANNEL_BAD_ADDR_ACCESS|Unused
31|RESTART_APP|WORKFLOW_XID_31|ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT|GPU memory page fault
32|RESTART_APP|CHECK_APP/CUDA|ROBUST_CHANNEL_PBDMA_ERROR|Invalid or corrupted push buffer stream
33|CONTACT_SUPPORT|-|ROBUST_CHANNEL_SEC_ERROR|Unused
34|CONTACT_SUPPORT|-|ROBUST_CHANNEL_MSVLD_ERROR|Unused
35|CONTACT_SUPPORT|-|ROBUST_CHANNEL_MSPDEC_ERROR|Unused
36|CONTACT_SUPPORT|-|ROBUST_CHANNEL_MSPPP_ERROR|Unused
37|IGNORE|CHECK_APP/CUDA|ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD|Driver firmware error
38|IGNORE|CONTACT_SUPPORT|ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT|Driver firmware error
39|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE0_ERROR|Copy Engine Exception
40|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE1_ERROR|Copy Engine Exception
41|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE2_ERROR|Copy Engine Exception
42|CONTACT_SUPPORT|-|ROBUST_CHANNEL_VIC_ERROR|Unused
43|IGNORE|CONTACT_SUPPORT|ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR|GPU stopped processing
44|IGNORE|CONTACT_SUPPORT|ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW|Graphics Engine fault during context switch
45|WORKFLOW_XID_45|WORKFLOW_XID_45|ROBUST_CHANNEL_PREEMPTIVE_REMOVAL|Preemptive cleanup, due to previous errors
46|RESET_GPU|CONTACT_SUPPORT|ROBUST_CHANNEL_GPU_TIMEOUT_ERROR|GPU stopped processing
47|CONTACT_SUPPORT|-|ROBUST_CHANNEL_NVENC0_ERROR|Unused
48|WORKFLOW_XID_48|WORKFLOW_XID_48|ROBUST_CHANNEL_GPU_ECC_DBE|Double Bit ECC Error
49|CONTACT_SUPPORT|-|SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY|Unused
50|CONTACT_SUPPORT|-|SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR|Unused
51|CONTACT_SUPPORT|-|SILENT_RUNNING_STRESS_TEST_FAILURE|Unused
52|CONTACT_SUPPORT|-|SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE|Unused
53|CONTACT_SUPPORT|-|SILENT_RUNNING_TEMP_REDUCED_CLOCKING|Unused
54|CHECK_MECHANICALS|CONTACT_SUPPORT|SILENT_RUNNING_PWR_REDUCED_CLOCKING|Auxiliary power is not connected to the GPU board
55|CONTACT_SUPPORT|-|SILENT_RUNNING_TEMPERATURE_READ_ERROR|Unused
56|CONTACT_SUPPORT|-|DISPLAY_CHANNEL_EXCEPTION|Unused
57|CONTACT_SUPPORT|-|FB_LINK_TRAINING_FAILURE_ERROR|Unused
58|CONTACT_SUPPORT|-|FB_MEMORY_ERROR|Unused
59|CONTACT_SUPPORT|-|PMU_ERROR|Unused
60|RESTART_APP|INVESTIGATE_SW|ROBUST_CHANNEL_SEC2_ERROR|Video processor exception
61|CONTACT_SUPPORT|-|PMU_BREAKPOINT|Unused
62|RESET_GPU|CONTACT_SUPPORT|PMU_HALT_ERROR|Internal micro-controller halt (newer drivers)
63|IGNORE|IGNORE|INFOROM_DRAM_RETIREMENT_EVENT|GPU memory remapping event
64|RESET_GPU|CONTACT_SUPPORT|INFOROM_DRAM_RETIREMENT_FAILURE|GPU memory remapping failure
65|CONTACT_SUPPORT|-|ROBUST_CHANNEL_NVENC1_ERROR|Unused
66|IGNORE|INVESTIGATE_SW|ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION|Illegal access by driver
67|IGNORE|CONTACT_SUPPORT|ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION|Illegal access by driver
68|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVDEC0_ERROR|NVDEC0 Exception
69|RESTART_APP|CHECK_APP/CUDA|ROBUST_CHANNEL_GR_CLASS_ERROR|Graphics Engine class error
70|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE3_ERROR|CE3: Unknown Error
71|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE4_ERROR|CE4: Unknown Error
72|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE5_ERROR|CE5: Unknown Error
73|CONTACT_SUPPORT|-|ROBUST_CHANNEL_NVENC2_ERROR|Unused
74|WORKFLOW_NVLINK_ERR|CONTACT_SUPPORT|NVLINK_ERROR|NVLINK Error
75|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE6_ERROR|CE6: Unknown Error
76|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE7_ERROR|CE7: Unknown Error
77|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE8_ERROR|CE8: Unknown Error
78|UPDATE_SWFW|UPDATE_SWFW|VGPU_START_ERROR|vGPU Start Error
79|RESTART_BM|CONTACT_SUPPORT|ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS|GPU has fallen off the bus
80|RESTART_APP|CHECK_APP/CUDA|PBDMA_PUSHBUFFER_CRC_MISMATCH|Corrupted data sent to GPU
81|CONTACT_SUPPORT|-|ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR|Unused
82|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVJPG0_ERROR|NVJPG0 Error
83|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVDEC1_ERROR|NVDEC1 Error
84|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVDEC2_ERROR|NVDEC2 Error
85|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE9_ERROR|CE9: Unknown Error
86|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_OFA0_ERROR|OFA Exception
87|CONTACT_SUPPORT|-|NVTELEMETRY_DRIVER_REPORT|Unused
88|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVDEC3_ERROR|NVDEC3 Error
89|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVDEC4_ERROR|NVDEC4 Error
90|CONTACT_SUPPORT|-|LTC_ERROR|Unused
91|CONTACT_SUPPORT|-|RESERVED_XID|Unused
92|IGNORE|CONTACT_SUPPORT|EXCESSIVE_SBE_INTERRUPTS|High single-bit ECC error rate
93|IGNORE|CONTACT_SUPPORT|INFOROM_ERASE_LIMIT_EXCEEDED|Non-fatal violation of provisioned InfoROM wear limit
94|RESTART_APP|IGNORE (sympathetic)|ROBUST_CHANNEL_CONTAINED_ERROR|Contained memory error
95|RESET_GPU|IGNORE (sympathetic)|ROBUST_CHANNEL_UNCONTAINED_ERROR|Uncontained memory error
96|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVDEC5_ERROR|NVDEC5 Error
97|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVDEC6_ERROR|NVDEC6 Error
98|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVDEC7_ERROR|NVDEC7 Error
99|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVJPG1_ERROR|NVJPG1 Error
100|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVJPG2_ERROR|NVJPG2 Error
101|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVJPG3_ERROR|NVJPG3 Error
102|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVJPG4_ERROR|NVJPG4 Error
103|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVJPG5_ERROR|NVJPG5 Error
104|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVJPG6_ERROR|NVJPG6 Error
105|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_NVJPG7_ERROR|NVJPG7 Error
106|IGNORE|IGNORE|SMBPBI_TEST_MESSAGE|SMBPBI Test Message
107|IGNORE|IGNORE|SMBPBI_TEST_MESSAGE_SILENT|SMBPBI Test Message Silent
108|IGNORE|XID_137_FLOW|NVLINK_REMOTE_TRANSLATION_ERROR|Unused
109|RESET_GPU|CONTACT_SUPPORT|ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR|Context Switch Timeout Error
110|RESET_GPU|INVESTIGATE_SW|SEC_FAULT_ERROR|Security Fault Error
111|CONTACT_SUPPORT|-|BUNDLE_ERROR_EVENT|Unused
112|CONTACT_SUPPORT|-|DISP_SUPERVISOR_ERROR|Unused
113|CONTACT_SUPPORT|-|DP_LT_FAILURE|Unused
114|CONTACT_SUPPORT|-|HEAD_RG_UNDERFLOW|Unused
115|CONTACT_SUPPORT|-|CORE_CHANNEL_REGS|Unused
116|CONTACT_SUPPORT|-|WINDOW_CHANNEL_REGS|Unused
117|CONTACT_SUPPORT|-|CURSOR_CHANNEL_REGS|Unused
118|CONTACT_SUPPORT|-|HEAD_REGS|Unused
119|RESET_GPU|INVESTIGATE_SW|GSP_RPC_TIMEOUT|GSP RPC Timeout
120|RESET_GPU|INVESTIGATE_SW|GSP_ERROR|GSP Error
121|IGNORE|CONTACT_SUPPORT|C2C_ERROR|C2C Error
122|CONTACT_SUPPORT|-|SPI_PMU_RPC_READ_FAIL|Unused
123|CONTACT_SUPPORT|-|SPI_PMU_RPC_WRITE_FAIL|Unused
124|CONTACT_SUPPORT|-|SPI_PMU_RPC_ERASE_FAIL|Unused
125|CONTACT_SUPPORT|-|INFOROM_FS_ERROR|Unused
126|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE10_ERROR|CE10: Unknown Error
127|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE11_ERROR|CE11: Unknown Error
128|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE12_ERROR|CE12: Unknown Error
129|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE13_ERROR|CE13: Unknown Error
130|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE14_ERROR|CE14: Unknown Error
131|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE15_ERROR|CE15: Unknown Error
132|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE16_ERROR|CE16: Unknown Error
133|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE17_ERROR|CE17: Unknown Error
134|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE18_ERROR|CE18: Unknown Error
135|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_CE19_ERROR|CE19: Unknown Error
136|RESET_GPU|INVESTIGATE_LINK_SI|ALI_TRAINING_FAIL|Link Training Failed
137|IGNORE|XID_137_FLOW|NVLINK_PRIV_ERR|NVLink Privilege Error
138|CONTACT_SUPPORT|-|ROBUST_CHANNEL_DLA_ERROR|Unused
139|RESTART_APP|CONTACT_SUPPORT|ROBUST_CHANNEL_OFA1_ERROR|OFA1 Error
140|RESET_GPU|CONTACT_SUPPORT|UNRECOVERABLE_ECC_ERROR_ESCAPE|ECC Unrecovered Error
141|IGNORE|CONTACT_SUPPORT|ROBUST_CHANNEL_FAST_PATH_ERROR|CUDA Fast Path Error
142|CONTACT_SUPPORT|-|ROBUST_CHANNEL_NVENC3_ERROR|NVENC3 Error
143|RESET_GPU|CONTACT_SUPPORT|GPU_INIT_ERROR|GPU Initialization Error
144|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR|NVLINK_SAW_ERROR|NVLINK: SAW Error
145|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR|NVLINK_RLW_ERROR|NVLINK: RLW Error
146|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR|NVLINK_TLW_ERROR|NVLINK: TLW Error
147|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR|NVLINK_TREX_ERROR|NVLINK: TREX Error
148|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR|NVLINK_NVLPW_CTRL_ERROR|NVLINK: NVLPW_CTRL Error
149|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR|NVLINK_NETIR_ERROR|NVLINK: NETIR Error
150|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR|NVLINK_MSE_ERROR|NVLINK: MSE Error
151|RESTART_VM|CONTACT_SUPPORT|ROBUST_CHANNEL_KEY_ROTATION_ERROR|Key rotation Error
152|IGNORE|CONTACT_SUPPORT|ROBUST_CHANNEL_DLA_SMMU_ERROR|DLA SMMU Error
153|IGNORE|CONTACT_SUPPORT|ROBUST_CHANNEL_DLA_TIMEOUT|DLA timeout Error
154|XID_154|N/A|GPU_RECOVERY_ACTION_CHANGED|GPU Recovery Action Changed
155|RESET_GPU|INVESTIGATE_SW_USER|NVLINK_SW_DEFINED_ERROR|NVLINK: SW Defined Error
156|RESET_GPU|IGNORE|RESOURCE_RETIREMENT_EVENT|Resource Retirement Event
157|IGNORE|CONTACT_SUPPORT|RESOURCE_RETIREMENT_FAILURE|Resource Retirement Failure
158|RESET_GPU|CONTACT_SUPPORT|GPU_FATAL_TIMEOUT|GPU Fatal Timeout
159|CHECK_UVM|SYMPATHETIC_REPORT_SOLO|ROBUST_CHANNEL_CHI_NON_DATA_ERROR|CHI Non-Data Error
160|IGNORE|INVESTIGATE_SW|CHANNEL_RETIREMENT_EVENT|Channel Retirement Event
161|IGNORE|INVESTIGATE_SW|CHANNEL_RETIREMENT_FAILURE|Channel Retirement Failure
162|-|-|PSHC_REENGAGED|Power Smoothing HW Circuitry capability reengaged
163|-|-|PSHC_DISENGAGED|Power Smoothing HW Circuitry capability disengaged
164|-|-|PSHC_LOW_LIFETIME|Power Smoothing HW Circuitry low lifetime reached
165|-|-|PSHC_ZERO_LIFETIME|Power Smoothing HW Circuitry lifetime exhausted
166|-|-|NVLINK_SECURE_CRYPTO_ERR|CC traffic seen prior to link properly being configured for encrypted traffic
167|-|-|PCIE_FATAL_TIMEOUT|PCIE_FATAL_TIMEOUT
168|-|-|REDUCED_GPU_MEMORY_CAPACITY|Errors found in WPR (write protected region)
169|-|-|SEC2_HALT_ERROR|Internal micro-controller halt
170|-|-|NVLINK_SECURE_OTHER|Interrupt seen in CC mode
171|-|-|UNCORRECTABLE_DRAM_ERROR|Additional to Xid 48: the fault is in DRAM
172|-|-|UNCORRECTABLE_SRAM_ERROR|Additional to Xid 48: the fault is in SRAM
"""


def _load(rows: str) -> dict[int, XidEntry]:
    catalog: dict[int, XidEntry] = {}
    for line in rows.strip().splitlines():
        number, action, follow_up, mnemonic, description = line.split("|")
        catalog[int(number)] = XidEntry(
            xid=int(number),
            mnemonic=mnemonic,
            description=description,
            action=None if action == "-" else XidAction(action),
            follow_up=XidFollowUp("" if follow_up == "-" else follow_up),
        )
    return catalog


#: Every Xid NVIDIA's catalog lists, by Xid.
CATALOG: dict[int, XidEntry] = _load(_ROWS)

#: The counter's ``action`` label for an Xid the catalog gives no action for, or does not list.
UNKNOWN_ACTION = "unknown"


def action_label(xid: int) -> str:
    """The ``action`` label of ``gfd_gpu_xid_errors_total`` for ``xid``."""
    entry = CATALOG.get(xid)
    return entry.action.label if entry is not None and entry.action is not None else UNKNOWN_ACTION


def describe(xid: int) -> str:
    """``xid`` as a message names it: ``Xid 79 (GPU has fallen off the bus)``; an Xid the
    catalog lists as unused is named by its mnemonic, one it does not list by number alone."""
    entry = CATALOG.get(xid)
    if entry is None:
        return f"Xid {xid}"
    what = entry.mnemonic if entry.description == "Unused" else entry.description
    return f"Xid {xid} ({what})"


def action_words(xid: int) -> str:
    """NVIDIA's immediate action for ``xid`` in gfd's words: ``reboot the node``."""
    entry = CATALOG.get(xid)
    if entry is None:
        return "unknown (not in NVIDIA's Xid catalog)"
    if entry.action is None:
        return "none in NVIDIA's Xid catalog"
    return ACTION_WORDS[entry.action]


def advice(xid: int) -> str:
    """NVIDIA's recommended action for ``xid``, as a message ends:
    ``action: reboot the node; if it recurs, contact support``."""
    words = f"action: {action_words(xid)}"
    entry = CATALOG.get(xid)
    follow_up = FOLLOW_UP_WORDS.get(entry.follow_up) if entry is not None else None
    if follow_up is not None:
        words += f"; if it recurs, {follow_up}"
    return words
