"""Where the host's files are: the one owner of every path gfd reads or writes by default.

A setting that names a host path (``--output-file``, ``--sysfs-root``,
``--machine-type-file``, ``--health-kernel-log``, ``--driver-root-ctr-path``) takes its
default from :class:`HostPaths`, and so do the paths no flag names: ``/proc`` (``gfd
doctor --from-pid``) and the pod's ServiceAccount folder (its namespace, token and CA).
The entry point (:func:`gfd.cli.main`) takes a ``HostPaths``, so a test, or an embedding
program, gives gfd a host of its own (:meth:`HostPaths.under`) instead of patching
module constants, and a run on a test machine never reads or writes the real ``/etc``.
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

from gfd.base.frozen import frozen_dataclass


@frozen_dataclass
class HostPaths:
    """The host paths gfd uses when no setting names another; the defaults are a node's."""

    #: NFD's features directory and gfd's file in it (``--output-file``'s default).
    feature_file: str = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
    #: Where sysfs is mounted (``--sysfs-root``'s default).
    sysfs_root: str = "/sys"
    #: The DMI product name (``--machine-type-file``'s default).
    machine_type_file: str = "/sys/class/dmi/id/product_name"
    #: The kernel log read for Xids (``--health-kernel-log``'s default).
    kernel_log: str = "/dev/kmsg"
    #: Where the driver's root is mounted in gfd's container, when it is
    #: (``--driver-root-ctr-path`` unset: used if it is a directory).
    driver_root: str = "/driver-root"
    #: Where processes are seen (``gfd doctor --from-pid``).
    proc_root: str = "/proc"
    #: The pod's ServiceAccount: ``namespace``, ``token`` and ``ca.crt`` in it.
    service_account_dir: str = "/var/run/secrets/kubernetes.io/serviceaccount"

    @classmethod
    def under(cls, root: str | PurePosixPath) -> HostPaths:
        """Every default moved under ``root``: ``/sys`` becomes ``ROOT/sys``, and so on."""
        base = PurePosixPath(root)
        node = cls()
        return cls(
            **{
                field.name: str(base / PurePosixPath(getattr(node, field.name)).relative_to("/"))
                for field in dataclasses.fields(cls)
            }
        )

    @property
    def namespace_file(self) -> str:
        return f"{self.service_account_dir}/namespace"

    @property
    def token_file(self) -> str:
        return f"{self.service_account_dir}/token"

    @property
    def ca_file(self) -> str:
        return f"{self.service_account_dir}/ca.crt"


#: A node's paths: what gfd uses unless told otherwise.
NODE_PATHS = HostPaths()
