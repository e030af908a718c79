"""How a gfd process ends: its exit statuses, and the one line that says why it failed.

Every subcommand (``run``, one-shot or periodic, ``labels``, ``facts``, ``topo``) ends
with one of three statuses, decided by the kind of what went wrong
(:func:`gfd.base.errors.error_kind`), never by where it was noticed:

====  ==========================  ==========================================================
code  name                        when
====  ==========================  ==========================================================
0     :data:`EXIT_OK`             done; also after SIGTERM or SIGINT (a stop that was asked
                                  for), and a ``--fail-on-init-error=false`` run that
                                  labelled a node whose NVML is down as one without GPUs
1     :data:`EXIT_FAILED`         the node or the cluster failed: NVML cannot start or read
                                  (no library, driver not loaded, a GPU lost), the feature
                                  file cannot be written, the API server refused a request
                                  or could not be reached within the one-shot bound, stdout's
                                  reader went away, or a bug in gfd. The same command may
                                  work later: a Job's retry makes sense
2     :data:`EXIT_USAGE`          what the user gave is wrong, and the same command can never
                                  work: the command line, an environment variable, the
                                  config file, or a file a flag names (``--simulate``'s
                                  profile or facts file, ``--kubeconfig``,
                                  ``--machine-type-file``), or settings that contradict the
                                  machine (MPS sharing on a GPU in MIG mode). Nothing was
                                  published
====  ==========================  ==========================================================

The reference exits 1 for every failure, usage included; gfd keeps 1 for a failure
and sets apart what no retry can fix. No other status is needed: a stop exits 0 as the
reference does, and a run's line says the rest.

Whatever ends a run, stderr carries one line for it: :func:`error_line`, written once,
by whoever ends the run (a failed cycle that ends the run is not also logged as an
error).
"""

from __future__ import annotations

from gfd.base.errors import error_kind, shorten

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: The error kinds (:data:`gfd.base.errors.ERROR_KINDS`) of input the user gave that is wrong.
USAGE_KINDS = frozenset({"config", "facts"})

#: The longest error line gfd prints; whatever a message echoes, it stays readable.
ERROR_LINE_LIMIT = 1000


def exit_status_of_kind(kind: str) -> int:
    """The status of a run that ends on a failure of ``kind`` (a cycle's ``kind``)."""
    return EXIT_USAGE if kind in USAGE_KINDS else EXIT_FAILED


def exit_status_of(error: BaseException) -> int:
    """The status of a run that ends on ``error``."""
    return exit_status_of_kind(error_kind(error))


def error_line(exc: BaseException | str) -> str:
    """``gfd: error: <reason>`` on one line, however the reason was built."""
    reason = " ".join(str(exc).splitlines())
    return f"gfd: error: {shorten(reason, ERROR_LINE_LIMIT)}"
