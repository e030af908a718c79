"""The Kubernetes API client that the node, NodeFeature and condition sinks share.

This package owns how gfd talks to the API server, one concern a module:

- :mod:`gfd.kube_api.client`: the process's one :class:`KubeClient`, how it is built
  (:func:`connect_kubernetes`), timeouts and the retry loop;
- :mod:`gfd.kube_api.retry`: the retry policy and which failures it retries;
- :mod:`gfd.kube_api.credentials`: kubeconfig or in-cluster service account, read again
  after a 401;
- :mod:`gfd.kube_api.responses`: bounded response bodies and the shape check of objects;
- :mod:`gfd.kube_api.errors`: the error tree every caller sees.

The names the sinks and the assembly use are importable from here.
"""

from gfd.kube_api.client import JSON as JSON
from gfd.kube_api.client import JSON_PATCH as JSON_PATCH
from gfd.kube_api.client import MERGE_PATCH as MERGE_PATCH
from gfd.kube_api.client import STRATEGIC_MERGE_PATCH as STRATEGIC_MERGE_PATCH
from gfd.kube_api.client import KubeClient as KubeClient
from gfd.kube_api.client import connect_kubernetes as connect_kubernetes
from gfd.kube_api.client import path_segment as path_segment
from gfd.kube_api.credentials import TRUST_THE_CLUSTER_CA as TRUST_THE_CLUSTER_CA
from gfd.kube_api.errors import Interrupted as Interrupted
from gfd.kube_api.errors import KubeApiError as KubeApiError
from gfd.kube_api.errors import KubeApiPermanentError as KubeApiPermanentError
from gfd.kube_api.responses import KubeResponse as KubeResponse
from gfd.kube_api.responses import object_shape_problem as object_shape_problem
from gfd.kube_api.responses import status_message as status_message
from gfd.kube_api.retry import RetryPolicy as RetryPolicy
from gfd.kube_api.retry import parse_retry_after as parse_retry_after
