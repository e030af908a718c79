"""Quantities read exactly, and a pod's requests by kube-scheduler's rule
(``resourcehelper.PodRequests``): the values are worked by hand from the rule's text."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gfd.base.errors import ConfigError
from gfd.scheduling.quantity import parse_quantity, scheduler_units, show_units
from gfd.scheduling.workload import pod_requests, workloads_of


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("1", Fraction(1)),
        (2, Fraction(2)),
        ("1.5", Fraction(3, 2)),
        ("1Gi", Fraction(2**30)),
        ("64Mi", Fraction(64 * 2**20)),
        ("1k", Fraction(1000)),
        ("1e3", Fraction(1000)),
        ("2E-3", Fraction(2, 1000)),
        ("100n", Fraction(1, 10**7)),
    ],
)
def test_quantities(text: object, value: Fraction) -> None:
    assert parse_quantity(text, "here") == value


@pytest.mark.parametrize("text", ["", "1x", "Gi", "1 Gi", "--1", True, "1e99", "0x10"])
def test_a_bad_quantity_is_one_line_naming_where(text: object) -> None:
    with pytest.raises(ConfigError, match=r"^here: .*(quantity|out of range)"):
        parse_quantity(text, "here")


def test_the_scheduler_rounds_up_cpu_to_millicores_and_the_rest_to_units() -> None:
    assert scheduler_units("cpu", Fraction(1, 10**4)) == 1
    assert scheduler_units("memory", Fraction(1, 2)) == 1
    assert show_units("cpu", 1500) == "1500m"
    assert show_units("memory", 3 * 2**30) == "3Gi"


def _pod(**spec: object) -> dict[str, object]:
    return {"containers": [], **spec}


def _container(
    requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **more: object
) -> dict[str, object]:
    resources: dict[str, object] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **more}


def test_containers_add_up_and_a_limit_alone_is_the_request() -> None:
    spec = _pod(
        containers=[
            _container({"cpu": "1", "memory": "1Gi"}),
            _container(limits={"nvidia.com/gpu": "2", "cpu": "500m"}),
        ]
    )
    assert pod_requests(spec) == {"cpu": 1500, "memory": 2**30, "nvidia.com/gpu": 2}


def test_the_largest_init_container_wins_when_larger_than_the_containers() -> None:
    spec = _pod(
        containers=[_container({"cpu": "1"})],
        initContainers=[_container({"cpu": "3"}), _container({"cpu": "2"})],
    )
    assert pod_requests(spec) == {"cpu": 3000}


def test_a_sidecar_adds_to_the_containers_and_to_every_init_container_after_it() -> None:
    # containers 1 + sidecar 1 = 2; the init container after the sidecar needs 2 + 1 = 3.
    spec = _pod(
        containers=[_container({"cpu": "1"})],
        initContainers=[
            _container({"cpu": "1"}, restartPolicy="Always"),
            _container({"cpu": "2"}),
        ],
    )
    assert pod_requests(spec) == {"cpu": 3000}
    # An init container before the sidecar runs without it: max(2, 2.5) = 2.5.
    before = _pod(
        containers=[_container({"cpu": "1"})],
        initContainers=[
            _container({"cpu": "2500m"}),
            _container({"cpu": "1"}, restartPolicy="Always"),
        ],
    )
    assert pod_requests(before) == {"cpu": 2500}


def test_overhead_is_added_and_pod_level_resources_replace_cpu_and_memory() -> None:
    spec = _pod(
        containers=[_container({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})],
        overhead={"cpu": "250m"},
        resources={"requests": {"cpu": "4"}},
    )
    assert pod_requests(spec) == {"cpu": 4250, "memory": 2**30, "nvidia.com/gpu": 1}


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Pod", ("spec",)),
        ("Deployment", ("spec", "template", "spec")),
        ("StatefulSet", ("spec", "template", "spec")),
        ("DaemonSet", ("spec", "template", "spec")),
        ("Job", ("spec", "template", "spec")),
        ("CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
    ],
)
def test_every_kind_with_a_pod_template(kind: str, path: tuple[str, ...]) -> None:
    document: dict[str, object] = {"containers": [_container(limits={"nvidia.com/gpu": "1"})]}
    for step in reversed(path):
        document = {step: document}
    document.update(kind=kind, metadata={"name": "w", "namespace": "ml"})
    (workload,) = workloads_of([document], "m.yaml")
    assert (workload.title, pod_requests(workload.spec)) == (f"{kind} ml/w", {"nvidia.com/gpu": 1})


def test_a_list_is_opened_and_several_documents_give_several_pods() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": []}}
    found = workloads_of(
        [{"kind": "List", "items": [pod]}, None, dict(pod, metadata={"name": "b"})], "m"
    )
    assert [w.name for w in found] == ["a", "b"]


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        (
            [{"kind": "Service", "metadata": {"name": "s"}}],
            r"^m.yaml: document 1: kind 'Service' has no pod template",
        ),
        (
            [{"kind": "Deployment", "spec": {}}],
            r"^m.yaml: document 1: Deployment has no pod spec with containers at spec.template.spec",
        ),
        (["text"], r"^m.yaml: document 1 is not a Kubernetes object"),
        ([], r"^m.yaml: no document with a pod template"),
    ],
)
def test_a_manifest_without_a_pod_template_is_one_line(
    documents: list[object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        workloads_of(documents, "m.yaml")
