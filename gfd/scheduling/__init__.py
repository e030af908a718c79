"""The scheduler's rules as gfd judges them, for ``gfd explain`` and ``gfd select``.

kube-scheduler places a pod on a node only when every filter passes. This package owns
the filters that decide where a GPU pod can go, each as kube-scheduler v1.36 applies it
(and held to it: ``tests/records/kube-scheduler/``), with the node's actual value and a
fix where the scheduler only counts nodes:

- ``quantity``: Kubernetes resource quantities, exactly;
- ``workload``: the pod template of a manifest (Pod, Deployment, StatefulSet, DaemonSet,
  ReplicaSet, Job, CronJob) and what the pod requests, by the scheduler's rule;
- ``rules``: node selector, required node affinity, taints and tolerations;
- ``cuda``: the CUDA a pod needs (``NVIDIA_REQUIRE_CUDA``) against a node's driver;
- ``cluster``: the nodes and what the pods bound to them request, from a list file or
  the API server a page at a time;
- ``judge``: one verdict per node and the summary line;
- ``select``: requirements to a node affinity that matches exactly the nodes meeting them.
"""
