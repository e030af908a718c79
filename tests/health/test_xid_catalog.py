"""NVIDIA's Xid catalog as gfd holds it: its shape, its source, and entries checked by hand
against NVIDIA's page (``gfd.health.xid_catalog.SOURCE``)."""

from __future__ import annotations

import re

import pytest

from gfd.health.xid_catalog import (
    ACTION_WORDS,
    CATALOG,
    CATALOG_DATE,
    SOURCE,
    UNKNOWN_ACTION,
    XidAction,
    XidFollowUp,
    action_label,
    advice,
    describe,
)


def test_the_source_names_nvidias_page_and_the_catalog_has_a_date() -> None:
    assert "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in SOURCE
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", CATALOG_DATE)


def test_every_xid_the_catalog_lists_is_there_once_and_in_order() -> None:
    assert list(CATALOG) == list(range(1, 173))
    assert all(number == entry.xid for number, entry in CATALOG.items())
    assert all(entry.mnemonic and entry.description for entry in CATALOG.values())


def test_every_entry_has_an_action_of_the_enum_but_those_the_catalog_gives_none() -> None:
    without = [xid for xid, entry in CATALOG.items() if entry.action is None]
    assert without == list(range(162, 173))
    for entry in CATALOG.values():
        assert entry.action is None or isinstance(entry.action, XidAction)
        assert isinstance(entry.follow_up, XidFollowUp)


def test_every_action_has_words_and_a_lower_case_label() -> None:
    assert set(ACTION_WORDS) == set(XidAction)
    assert {action.label for action in XidAction} == {action.value.lower() for action in XidAction}
    assert all(re.fullmatch(r"[a-z0-9_]+", action.label) for action in XidAction)


@pytest.mark.parametrize(
    ("xid", "action", "follow_up", "mnemonic"),
    [
        (13, XidAction.RESTART_APP, XidFollowUp.WORKFLOW_XID_13, "ROBUST_CHANNEL_GR_EXCEPTION"),
        (
            31,
            XidAction.RESTART_APP,
            XidFollowUp.WORKFLOW_XID_31,
            "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        ),
        (
            43,
            XidAction.IGNORE,
            XidFollowUp.CONTACT_SUPPORT,
            "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        ),
        (
            45,
            XidAction.WORKFLOW_XID_45,
            XidFollowUp.WORKFLOW_XID_45,
            "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        ),
        (48, XidAction.WORKFLOW_XID_48, XidFollowUp.WORKFLOW_XID_48, "ROBUST_CHANNEL_GPU_ECC_DBE"),
        (
            54,
            XidAction.CHECK_MECHANICALS,
            XidFollowUp.CONTACT_SUPPORT,
            "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        ),
        (63, XidAction.IGNORE, XidFollowUp.IGNORE, "INFOROM_DRAM_RETIREMENT_EVENT"),
        (64, XidAction.RESET_GPU, XidFollowUp.CONTACT_SUPPORT, "INFOROM_DRAM_RETIREMENT_FAILURE"),
        (74, XidAction.WORKFLOW_NVLINK_ERR, XidFollowUp.CONTACT_SUPPORT, "NVLINK_ERROR"),
        (78, XidAction.UPDATE_SWFW, XidFollowUp.UPDATE_SWFW, "VGPU_START_ERROR"),
        (
            79,
            XidAction.RESTART_BM,
            XidFollowUp.CONTACT_SUPPORT,
            "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        ),
        (92, XidAction.IGNORE, XidFollowUp.CONTACT_SUPPORT, "EXCESSIVE_SBE_INTERRUPTS"),
        (
            94,
            XidAction.RESTART_APP,
            XidFollowUp.IGNORE_SYMPATHETIC,
            "ROBUST_CHANNEL_CONTAINED_ERROR",
        ),
        (
            95,
            XidAction.RESET_GPU,
            XidFollowUp.IGNORE_SYMPATHETIC,
            "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        ),
        (
            109,
            XidAction.RESET_GPU,
            XidFollowUp.CONTACT_SUPPORT,
            "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
        ),
        (119, XidAction.RESET_GPU, XidFollowUp.INVESTIGATE_SW, "GSP_RPC_TIMEOUT"),
        (120, XidAction.RESET_GPU, XidFollowUp.INVESTIGATE_SW, "GSP_ERROR"),
        (136, XidAction.RESET_GPU, XidFollowUp.INVESTIGATE_LINK_SI, "ALI_TRAINING_FAIL"),
        (
            149,
            XidAction.WORKFLOW_NVLINK5_ERR,
            XidFollowUp.WORKFLOW_NVLINK5_ERR,
            "NVLINK_NETIR_ERROR",
        ),
        (
            151,
            XidAction.RESTART_VM,
            XidFollowUp.CONTACT_SUPPORT,
            "ROBUST_CHANNEL_KEY_ROTATION_ERROR",
        ),
        (154, XidAction.XID_154, XidFollowUp.INFORMATIONAL, "GPU_RECOVERY_ACTION_CHANGED"),
        (
            159,
            XidAction.CHECK_UVM,
            XidFollowUp.SYMPATHETIC_REPORT_SOLO,
            "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        ),
        (160, XidAction.IGNORE, XidFollowUp.INVESTIGATE_SW, "CHANNEL_RETIREMENT_EVENT"),
        (1, XidAction.CONTACT_SUPPORT, XidFollowUp.NONE, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD"),
        (163, None, XidFollowUp.NONE, "PSHC_DISENGAGED"),
    ],
)
def test_entries_checked_against_nvidias_page(
    xid: int, action: XidAction | None, follow_up: XidFollowUp, mnemonic: str
) -> None:
    entry = CATALOG[xid]
    assert (entry.action, entry.follow_up) == (action, follow_up)
    assert entry.mnemonic.split(" / ")[0] == mnemonic


def test_the_counter_label_is_the_action_in_lower_case_else_unknown() -> None:
    assert action_label(79) == "restart_bm"
    assert action_label(48) == "workflow_xid_48"
    assert action_label(95) == "reset_gpu"
    assert action_label(13) == "restart_app"
    assert action_label(165) == UNKNOWN_ACTION == "unknown"
    assert action_label(999) == "unknown"


def test_the_words_a_message_carries() -> None:
    assert describe(79) == "Xid 79 (GPU has fallen off the bus)"
    assert advice(79) == "action: reboot the node; if it recurs, contact support"
    assert describe(95) == "Xid 95 (Uncontained memory error)"
    assert advice(95) == (
        "action: reset the GPU; if it recurs, resolve the Xids that came with it, else report it"
    )
    assert advice(63) == "action: none needed"
    # Unused: named by its mnemonic; not listed: by its number.
    assert describe(2) == "Xid 2 (ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD)"
    assert describe(999) == "Xid 999"
    assert advice(999) == "action: unknown (not in NVIDIA's Xid catalog)"
    assert advice(164) == "action: none in NVIDIA's Xid catalog"
