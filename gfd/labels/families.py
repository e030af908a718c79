"""The label keys gfd can produce: its namespace and its families, in one place.

Every labeler in this package writes keys ``nvidia.com/<family>...`` with a family
from :data:`GFD_FAMILIES` (``tests/labels/test_label_families.py`` holds every bundled
machine to it). Sinks use :func:`gfd_can_produce` to bound what they may ever
delete: the node sink removes a key listed in its ownership annotation only when
gfd could have written it, so whoever can edit that annotation cannot make gfd
delete other writers' labels.
"""

from __future__ import annotations

GFD_NAMESPACE = "nvidia.com/"
#: The families of key names under :data:`GFD_NAMESPACE`, as prefixes of the name.
GFD_FAMILIES = ("cuda.", "gfd.", "gpu.", "mig.", "mig-", "mps.", "vgpu.")


def gfd_can_produce(key: str) -> bool:
    """Whether ``key`` lies in a namespace and family that gfd's labelers write."""
    namespace, slash, name = key.rpartition("/")
    if not slash or f"{namespace}/" != GFD_NAMESPACE:
        return False
    return name.startswith(GFD_FAMILIES)
