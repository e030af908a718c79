"""The label mode of each cycle: ``--label-mode`` as the labels get it.

``device-plugin`` and ``hardware`` are fixed for a configuration (:func:`label_options`).
``auto`` labels as ``device-plugin`` until it is decided per cycle.
"""

from __future__ import annotations

import time

from gfd.config import LABEL_MODE_AUTO, LABEL_MODE_DEVICE_PLUGIN, Settings
from gfd.labels import LabelOptions


def label_options(settings: Settings, *, with_timestamp: bool) -> LabelOptions:
    """The label options of ``settings``; the timestamp only where labels are published.

    Under ``--label-mode auto`` the mode here is ``device-plugin``, what a cycle labels
    as until a cycle decides it.
    """
    timestamp = int(time.time()) if with_timestamp and not settings.no_timestamp else None
    mode = settings.label_mode
    return LabelOptions(
        timestamp=timestamp,
        mig_strategy=settings.mig_strategy,
        sharing=settings.sharing,
        mode=LABEL_MODE_DEVICE_PLUGIN if mode == LABEL_MODE_AUTO else mode,
    )
