"""The ``labels`` link: what labels this cycle makes from the facts.

It counts them and names a few; a label dropped as invalid for Kubernetes is a problem
(a bug in a label rule); a label withheld because its facts could not be read means
gfd cannot tell that label, with the reason, which says what would let it read them.
"""

from __future__ import annotations

from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, cannot_tell, ok, problem

#: How many keys (and values) the message shows.
SHOWN = 4


def examine(examination: Examination) -> Answer:
    computed = examination.labels
    if computed is None:
        return cannot_tell("no labels: NVML gave no facts (see the nvml line)")
    label_set, _ = computed
    labels = label_set.labels
    shown = ", ".join(f"{key}={labels[key]}" for key in sorted(labels)[:SHOWN])
    more = f", and {len(labels) - SHOWN} more" if len(labels) > SHOWN else ""
    made = f"{len(labels)} label(s) this cycle: {shown}{more}"
    if examination.nvml.facts is None:
        return cannot_tell(
            f"NVML cannot start; with --fail-on-init-error=false gfd publishes the labels of "
            f"a node without GPUs meanwhile: {made}",
            "see the nvml line",
        )
    if label_set.dropped:
        dropped = "; ".join(f"{key} ({why})" for key, why in label_set.dropped)
        return problem(
            f"{made}; dropped as invalid for Kubernetes: {dropped}",
            "a label rule made a label the API server would refuse: report it to gfd's "
            "maintainers with gfd facts > node.yaml; the other labels are published",
        )
    if label_set.withheld:
        withheld = "; ".join(f"{key} ({why})" for key, why in label_set.withheld)
        return cannot_tell(
            f"{made}; withheld because their facts could not be read: {withheld}",
            "the reason says what gfd needs to read them",
        )
    return ok(made)
