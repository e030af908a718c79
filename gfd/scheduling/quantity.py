"""Kubernetes resource quantities (``500m``, ``1Gi``, ``8``, ``1e3``), read exactly.

The scheduler compares CPU in millicores and everything else in whole units, each
rounded up (``Quantity.MilliValue`` and ``Quantity.Value``): :func:`scheduler_units`
gives that number, so that gfd's comparison is the scheduler's to the unit.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from gfd.base.errors import ConfigError, echo

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|"
    r"[eE](?P<exponent>[+-]?\d+))?$"
)


def parse_quantity(text: object, where: str) -> Fraction:
    """The exact value of a quantity; :class:`ConfigError` naming ``where`` otherwise."""
    if isinstance(text, bool):
        raise ConfigError(f'{where}: {text!r} is not a quantity (write "1", "500m", "4Gi")')
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float) and math.isfinite(text):
        return Fraction(str(text))
    match = _QUANTITY.match(text) if isinstance(text, str) and len(text) <= 64 else None
    if match is None:
        raise ConfigError(
            f'{where}: {echo(str(text))} is not a quantity (write "1", "500m", "4Gi")'
        )
    number = Fraction(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > 30:
            raise ConfigError(f"{where}: {echo(str(text))} is out of range")
        return number * Fraction(10) ** exponent
    suffix = match["suffix"] or ""
    return number * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


def scheduler_units(resource: str, value: Fraction) -> int:
    """What the scheduler compares: millicores for ``cpu``, whole units otherwise, rounded
    up as ``resource.Quantity`` rounds."""
    return math.ceil(value * 1000) if resource == "cpu" else math.ceil(value)


def show_units(resource: str, units: int) -> str:
    """A scheduler quantity as a person reads it: ``1500m`` CPU, ``4Gi`` memory, ``2`` GPUs."""
    if resource == "cpu":
        return f"{units // 1000}" if units % 1000 == 0 else f"{units}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units and units % size == 0:
                return f"{units // size}{suffix}"
    return str(units)
