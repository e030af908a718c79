"""How gfd declares an immutable record: :func:`frozen_dataclass`.

Facts, settings, check results, labels and the rest of gfd's values are frozen
dataclasses. ``@frozen_dataclass`` makes one that behaves as
``@dataclasses.dataclass(frozen=True)`` does: ``dataclasses.fields``, ``replace`` and
``asdict`` work on it; its ``__init__`` has the same signature and assigns the same
fields (defaults, default factories, ``init=False`` fields, keyword-only fields, then
``__post_init__``); it equals another instance of the same class whose compared fields
are equal, hashes by the same fields, shows as ``QualName(field=value, ...)`` (fields with
``repr=False`` left out); assigning or deleting an attribute raises
``dataclasses.FrozenInstanceError``; it copies and pickles; mypy checks it as a frozen
dataclass. ``tests/base/test_frozen.py`` holds the two decorators to the same answers.

Why not ``dataclasses.dataclass(frozen=True)`` itself: that decorator compiles a class's
``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__``
from source text, each in its own ``exec`` (CPython 3.11, the image's; 3.13 batches them,
still compiling), for every class at every start. A one-shot run defines about sixty
records, and compiling their methods was a fifth of its start-up
(``bench/startup.py``'s experiment row, docs/benchmarks.md). Here only ``__init__``, whose
signature is the class's own, is compiled, in one ``exec``; the other five are functions
defined once and shared by every record, which read what differs per class (the compared,
hashed and shown field names) from attributes set when the class is made.

``dataclasses`` still makes the class a dataclass (its fields, ``__match_args__``), asked
for no methods. The ``__init__`` here is the one ``dataclasses`` writes for a frozen class,
written the same way: a field is assigned with ``object.__setattr__``, as a
``__post_init__`` that normalises a field must do in any frozen dataclass. Methods the
class body defines itself are kept, as ``dataclasses`` keeps them. ``InitVar`` pseudo-fields
are not supported (no record uses one): declaring one is refused with a TypeError.
"""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

_Record = TypeVar("_Record")

_MISSING = dataclasses.MISSING


class _Factory:
    """The default of an ``__init__`` parameter whose field has a default factory."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _no_values(record: object) -> tuple[()]:
    return ()


def _values_of(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A function from a record to the tuple of its values of ``names``.

    A tuple even for one name, as ``dataclasses`` compares: a tuple's comparison takes
    an identical item as equal (a field holding NaN equals itself)."""
    if not names:
        return _no_values
    if len(names) == 1:
        value_of = attrgetter(names[0])
        return lambda record: (value_of(record),)
    return attrgetter(*names)


def _equal(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        compared = self._frozen_compared
        return compared(self) == compared(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self._frozen_hashed(self))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._frozen_shown)
    return f"{self.__class__.__qualname__}({shown})"


def _refuse_assign(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delete(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _slots_state(self: Any) -> list[Any]:
    return [getattr(self, field.name) for field in dataclasses.fields(self)]


def _restore_slots(self: Any, state: list[Any]) -> None:
    for field, value in zip(dataclasses.fields(self), state, strict=True):
        object.__setattr__(self, field.name, value)


@overload
def frozen_dataclass(cls: type[_Record], /) -> type[_Record]: ...


@overload
def frozen_dataclass(*, slots: bool = False) -> Callable[[type[_Record]], type[_Record]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen_dataclass(cls: Any = None, /, *, slots: bool = False) -> Any:
    """Make ``cls`` a frozen dataclass (see the module's docstring); ``slots`` as in
    ``dataclasses.dataclass``. Used bare (``@frozen_dataclass``) or called."""
    if cls is None:
        return lambda cls: _make(cls, slots=slots)
    return _make(cls, slots=slots)


def _make(cls: type[_Record], *, slots: bool) -> type[_Record]:
    body = dict(cls.__dict__)
    for name in ("__setattr__", "__delattr__"):
        if name in body:
            # As dataclasses refuses it for a frozen class, in its words: it would not be.
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    made: Any = dataclasses.dataclass(
        cls, init=False, repr=False, eq=False, frozen=False, slots=slots
    )
    fields = dataclasses.fields(made)
    pseudo = set(made.__dataclass_fields__) - {field.name for field in fields}
    for name in sorted(pseudo):
        if "InitVar" in str(made.__dataclass_fields__[name].type):
            raise TypeError(
                f"{cls.__qualname__}.{name}: frozen_dataclass takes no InitVar; "
                "pass the value as a field, or declare the class with dataclasses.dataclass"
            )
    # What the shared methods read, per class (class attributes, not fields; the
    # functions static, so that reading one through an instance does not bind it).
    made._frozen_compared = staticmethod(
        _values_of([field.name for field in fields if field.compare])
    )
    made._frozen_hashed = staticmethod(
        _values_of(
            [
                field.name
                for field in fields
                if (field.compare if field.hash is None else field.hash)
            ]
        )
    )
    made._frozen_shown = tuple(field.name for field in fields if field.repr)
    if "__init__" not in body:
        made.__init__ = _init_of(made, fields, slots=slots)
        if not body.get("__doc__"):
            # dataclasses' doc for an undocumented class: its name and signature.
            signature = str(inspect.signature(made)).replace(" -> None", "")
            made.__doc__ = f"{made.__name__}{signature}"
    made.__setattr__ = _refuse_assign
    made.__delattr__ = _refuse_delete
    if slots:
        # Unpickling sets slots through __setattr__, which refuses; dataclasses gives a
        # frozen class with slots these two for the same reason.
        made.__getstate__ = _slots_state
        made.__setstate__ = _restore_slots
    if "__repr__" not in body:
        made.__repr__ = _repr
    if "__eq__" not in body:
        made.__eq__ = _equal
    # As dataclasses decides for eq=True, frozen=True: a __hash__ the body defines is
    # kept (None too); the None Python puts there for a body that defines __eq__ only
    # is not.
    class_hash = body.get("__hash__", _MISSING)
    if class_hash is _MISSING or (class_hash is None and "__eq__" in body):
        made.__hash__ = _hash
    made_class: type[_Record] = made
    return made_class


def _init_of(cls: Any, fields: tuple[dataclasses.Field[Any], ...], *, slots: bool) -> Any:
    """The ``__init__`` dataclasses writes for a frozen class, compiled in one ``exec``."""
    names = {field.name for field in fields}
    self_name = "__dataclass_self__" if "self" in names else "self"
    namespace: dict[str, Any] = {
        "__name__": cls.__module__,
        "__frozen_setattr__": object.__setattr__,
        "__frozen_factory__": _FACTORY,
    }
    positional: list[str] = []
    keyword_only: list[str] = []
    assignments: list[str] = []
    annotations: dict[str, Any] = {}
    seen_default = False
    for field in fields:
        default_name = f"__frozen_default_{field.name}__"
        has_default = field.default is not _MISSING
        has_factory = field.default_factory is not _MISSING
        if has_default:
            namespace[default_name] = field.default
        elif has_factory:
            namespace[default_name] = field.default_factory
        if field.init:
            annotations[field.name] = field.type
            if has_default:
                parameter, value = f"{field.name}={default_name}", field.name
            elif has_factory:
                parameter = f"{field.name}=__frozen_factory__"
                value = f"{default_name}() if {field.name} is __frozen_factory__ else {field.name}"
            else:
                parameter, value = field.name, field.name
            if field.kw_only:
                keyword_only.append(parameter)
            else:
                if has_default or has_factory:
                    seen_default = True
                elif seen_default:
                    raise TypeError(f"non-default argument {field.name!r} follows default argument")
                positional.append(parameter)
        elif has_factory:
            value = f"{default_name}()"
        elif slots and has_default:
            value = default_name
        else:
            # Read from the class attribute that holds the default, or set by
            # __post_init__, as dataclasses leaves it.
            continue
        assignments.append(f"    __frozen_setattr__({self_name}, {field.name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        assignments.append(f"    {self_name}.__post_init__()")
    parameters = [self_name, *positional, *(["*", *keyword_only] if keyword_only else [])]
    source = f"def __init__({', '.join(parameters)}):\n" + ("\n".join(assignments) or "    pass")
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**annotations, "return": None}
    return init
