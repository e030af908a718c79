"""The NVLinks of one GPU: how many, which are up, and what each one reaches.

This module owns the per-GPU link reads. The link count comes from the
``NVML_FI_DEV_NVLINK_LINK_COUNT`` field, or, where a driver does not support it, from
probing link states until NVML says an index is past the end; it is asked once per
session. Each link's state is asked every read; what an active link reaches (its remote
bus id and device type) is kept while it stays up and asked again when it comes back,
since a link may be recabled while it is down.
"""

from __future__ import annotations

from typing import Any

import pynvml

from gfd.facts import NVLINK_REMOTE_TYPES, NvLink
from gfd.nvml.cache import UNREAD, GpuStatic
from gfd.nvml.calls import ABSENT_CODES, NvmlCaller, as_gfd_error, text, within_limit

#: NVML_FI_DEV_NVLINK_LINK_COUNT.
FIELD_NVLINK_LINK_COUNT = 91
#: Upper bound on links probed one by one when the link-count field is not supported.
MAX_PROBED_LINKS = 36

_REMOTE_TYPE_NAMES = {value: name for name, value in NVLINK_REMOTE_TYPES.items()}


def read_nvlinks(nv: NvmlCaller, index: int, handle: Any, static: GpuStatic) -> tuple[NvLink, ...]:
    """The links of GPU ``index``; a link whose state NVML does not report is left out."""
    if static.link_count is UNREAD:
        static.link_count = within_limit(
            "nvmlDeviceGetFieldValues",
            index,
            _nvlink_count(nv, handle),
            nv.limits.nvlinks,
            "NVLinks",
        )
    links: list[NvLink] = []
    for link in range(static.link_count):
        state = nv.optional(
            "nvmlDeviceGetNvLinkState", pynvml.nvmlDeviceGetNvLinkState, handle, link
        )
        if state is None:
            static.remotes.pop(link, None)
            continue
        active = bool(state)
        remote_bus = remote_type = None
        if not active:
            # What a link reaches is asked again when it comes back: it may be recabled.
            static.remotes.pop(link, None)
        elif link in static.remotes:
            remote_bus, remote_type = static.remotes[link]
        else:
            remote = nv.optional(
                "nvmlDeviceGetNvLinkRemotePciInfo",
                pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
                handle,
                link,
            )
            kind = nv.optional(
                "nvmlDeviceGetNvLinkRemoteDeviceType",
                pynvml.nvmlDeviceGetNvLinkRemoteDeviceType,
                handle,
                link,
            )
            remote_bus = text(remote.busId).upper() if remote is not None else None
            remote_type = _REMOTE_TYPE_NAMES.get(int(kind), "unknown") if kind is not None else None
            static.remotes[link] = (remote_bus, remote_type)
        links.append(
            NvLink(index=link, active=active, remote_bus_id=remote_bus, remote_type=remote_type)  # type: ignore[arg-type]
        )
    return tuple(links)


def read_nvlink_version(nv: NvmlCaller, handle: Any, static: GpuStatic) -> int | None:
    """The NVLink version of link 0, asked once per session (only of a GPU that has links)."""
    if static.nvlink_version is UNREAD:
        version = nv.optional(
            "nvmlDeviceGetNvLinkVersion", pynvml.nvmlDeviceGetNvLinkVersion, handle, 0
        )
        static.nvlink_version = int(version) if version is not None else None
    known: int | None = static.nvlink_version
    return known


def _nvlink_count(nv: NvmlCaller, handle: Any) -> int:
    """Links of a GPU: the link-count field, else probing until NVML says the index is past the end."""
    values = nv.optional(
        "nvmlDeviceGetFieldValues",
        pynvml.nvmlDeviceGetFieldValues,
        handle,
        [FIELD_NVLINK_LINK_COUNT],
    )
    if values is not None and values[0].nvmlReturn == pynvml.NVML_SUCCESS:
        return int(values[0].value.uiVal)
    count = 0
    for link in range(MAX_PROBED_LINKS):
        nv.calls += 1
        try:
            pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError as exc:
            if exc.value in ABSENT_CODES:
                break
            raise as_gfd_error("nvmlDeviceGetNvLinkState", exc) from exc
        count = link + 1
    return count
