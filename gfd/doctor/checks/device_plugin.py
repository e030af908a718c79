"""The ``device-plugin`` link: the GPUs NVML sees are offered to pods.

NVIDIA's device plugin registers ``nvidia.com/gpu`` (or the MIG resources, as the MIG
strategy and sharing say) in the Node's allocatable; on a node of NVIDIA's DRA driver, its
ResourceSlices publish the GPUs instead. The judgement is the ``device-plugin`` health
check's own (:class:`gfd.health.checks.device_plugin.DevicePluginCheck`), made here at
once, without its grace period: the doctor is asked now.
"""

from __future__ import annotations

from pathlib import Path

from gfd.doctor.api import DoctorApi
from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, cannot_tell, ok, problem
from gfd.health import FAILING, OK
from gfd.health.check import CheckSetup, GpuDirectory, Observation
from gfd.health.checks.device_plugin import REASON_PLUGIN_MISSING, DevicePluginCheck
from gfd.health.dra_node import DRA_DRIVER, DraNodeWatch, expected_resources

FIXES = {
    REASON_PLUGIN_MISSING: (
        "run NVIDIA's device plugin on this node (the GPU Operator, or the "
        "nvidia-device-plugin DaemonSet: kubectl get pods -A -o wide | grep device-plugin) or "
        "NVIDIA's DRA driver; the plugin's log says why it did not register"
    ),
}
#: The fix of every other reason: devices the plugin or the DRA driver holds back.
UNHEALTHY_DEVICES = (
    "the device plugin (or the DRA driver) holds devices back as unhealthy: its log names "
    "them; nvidia-smi -q on the node shows their state; gfd's sharing and MIG settings must "
    "match the plugin's"
)


def examine(examination: Examination) -> Answer:
    facts = examination.nvml.facts
    if facts is None:
        return cannot_tell("no GPUs read (see the nvml line)")
    if not facts.gpus:
        return ok("no GPU to offer")
    api = examination.api
    read = examination.node
    if read.node is None:
        return cannot_tell(
            f"cannot read the Node's allocatable: {read.why}",
            "pass --kubeconfig PATH of a user that may get nodes (and --node-name)",
        )
    settings = examination.settings
    slices = None
    if isinstance(api, DoctorApi):
        # Read only when the plugin's resources are missing: a DRA node has none.
        from gfd.health.resource_slices import ResourceSliceReader

        slices = ResourceSliceReader(
            client=api.client, node_name=settings.node_name or "", stop=api.stop
        ).list
    check = DevicePluginCheck(
        CheckSetup(
            sysfs_root=Path(settings.sysfs_root),
            mig_strategy=settings.mig_strategy,
            sharing=settings.sharing,
            grace_period=0.0,
            log=examination.log,
            # Read at once (interval 1): the doctor is asked now, not over cycles.
            dra_node=DraNodeWatch(slices, interval=1, log=examination.log),
        )
    )
    result = check.observe(Observation(facts, None, read.node, GpuDirectory()))
    expected = expected_resources(facts, settings.mig_strategy, settings.sharing)
    wanted = ", ".join(f"{count} {name}" for name, count in sorted(expected.items()))
    if result.state == OK:
        status = read.node.get("status") or {}
        allocatable = status.get("allocatable") or {}
        if all(name in allocatable for name in expected):
            return ok(f"the kubelet advertises {wanted} for the GPUs NVML sees")
        return ok(f"NVIDIA's DRA driver ({DRA_DRIVER}) publishes the GPUs NVML sees")
    if result.state != FAILING:
        return cannot_tell(f"the device-plugin check answers {result.state}")
    messages = "; ".join(p.message for p in result.problems)
    reasons = {p.reason for p in result.problems}
    fix = FIXES[REASON_PLUGIN_MISSING] if reasons == {REASON_PLUGIN_MISSING} else UNHEALTHY_DEVICES
    return problem(messages, fix)
