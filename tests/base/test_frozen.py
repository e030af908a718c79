"""gfd.base.frozen: a ``@frozen_dataclass`` record behaves as ``@dataclass(frozen=True)`` does.

Each case declares the same class body twice, once with the standard library's
decorator (the oracle) and once with gfd's, and holds them to the same answers: fields,
equality (within a class, never across classes), hash, repr, immutability, ``replace``,
``asdict``, copies and pickles, the methods a body defines itself, ``__post_init__``,
slots, and every record class gfd itself declares.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import math
import pickle
from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gfd
from gfd.base.frozen import frozen_dataclass

Decorator = Callable[[type[Any]], type[Any]]
STDLIB: Decorator = dataclass(frozen=True)
GFD: Decorator = frozen_dataclass
BOTH = pytest.mark.parametrize("decorate", [STDLIB, GFD], ids=["stdlib", "gfd"])


def _pair(make: Callable[[Decorator], type[Any]]) -> tuple[type[Any], type[Any]]:
    return make(STDLIB), make(GFD)


def _point(decorate: Decorator) -> type[Any]:
    class Point:
        x: int
        y: float = 0.0
        tags: tuple[str, ...] = ()
        note: str = field(default="", compare=False)
        secret: str = field(default="", repr=False)

    return decorate(Point)


# pickle needs classes it can find by name: one per decorator, at module level.
PickledStdlib = STDLIB(type("PickledStdlib", (), {"__annotations__": {"x": "int", "y": "str"}}))
PickledGfd = GFD(type("PickledGfd", (), {"__annotations__": {"x": "int", "y": "str"}}))
PickledSlots = frozen_dataclass(slots=True)(
    type("PickledSlots", (), {"__annotations__": {"x": "int", "y": "str"}})
)


@given(
    x=st.integers(-3, 3),
    y=st.floats(allow_nan=True),
    other_x=st.integers(-3, 3),
    other_y=st.floats(allow_nan=True),
    note=st.text(max_size=2),
)
def test_equality_and_hash_answer_as_the_standard_library_does(
    x: int, y: float, other_x: int, other_y: float, note: str
) -> None:
    oracle, record = _pair(_point)
    for cls in (oracle, record):
        cls.__qualname__ = "Point"
    a, b = oracle(x, y), oracle(other_x, other_y, note=note)
    c, d = record(x, y), record(other_x, other_y, note=note)
    assert (c == d) == (a == b)
    assert (c != d) == (a != b)
    assert c == c and (a == a)  # a field holding NaN: the record still equals itself
    if c == d:
        assert hash(c) == hash(d)
    assert repr(c) == repr(a) and repr(d) == repr(b)


@BOTH
def test_equal_only_within_one_class(decorate: Decorator) -> None:
    first, second = _point(decorate), _point(decorate)
    assert first(1) != second(1)
    assert first(1).__eq__(object()) is NotImplemented
    assert first(1) != (1, 0.0, (), "", "")


@BOTH
def test_fields_compared_hashed_and_shown_as_declared(decorate: Decorator) -> None:
    @decorate
    class Reading:
        value: int
        seen_at: float = field(default=0.0, compare=False)
        source: str = field(default="", hash=False)
        raw: bytes = field(default=b"", repr=False)

    assert Reading(1, seen_at=5.0) == Reading(1, seen_at=6.0)
    assert hash(Reading(1, source="a")) != hash(Reading(2, source="a"))
    assert Reading(1, source="a") != Reading(1, source="b")
    assert repr(Reading(1, 2.0, "s", b"x")) == (
        "test_fields_compared_hashed_and_shown_as_declared.<locals>.Reading"
        "(value=1, seen_at=2.0, source='s')"
    )
    assert [f.name for f in dataclasses.fields(Reading)] == ["value", "seen_at", "source", "raw"]
    assert Reading.__match_args__ == ("value", "seen_at", "source", "raw")


@BOTH
def test_no_field_and_one_field(decorate: Decorator) -> None:
    @decorate
    class Empty:
        pass

    @decorate
    class One:
        value: float

    assert Empty() == Empty() and hash(Empty()) == hash(Empty())
    nan = math.nan
    assert One(nan) == One(nan)  # one tuple item, compared as dataclasses compare
    assert One(1.0) == One(1.0) and One(1.0) != One(2.0)


@pytest.mark.parametrize("slots", [False, True], ids=["dict", "slots"])
def test_assigning_or_deleting_raises_frozen_instance_error(slots: bool) -> None:
    @frozen_dataclass(slots=slots)
    class Gpu:
        index: int
        name: str = "H100"

    gpu = Gpu(0)
    for name in ("index", "name", "not_a_field"):
        with pytest.raises(FrozenInstanceError, match=f"cannot assign to field '{name}'"):
            setattr(gpu, name, 1)
    with pytest.raises(FrozenInstanceError, match="cannot delete field 'index'"):
        del gpu.index
    assert (gpu.index, gpu.name) == (0, "H100")
    assert dataclasses.replace(gpu, name="H200") == Gpu(0, "H200")


@BOTH
def test_post_init_and_fields_made_after_init(decorate: Decorator) -> None:
    @decorate
    class Link:
        peers: tuple[int, ...]
        count: int = field(init=False)
        seen: list[int] = field(default_factory=list)

        def __post_init__(self) -> None:
            object.__setattr__(self, "peers", tuple(sorted(self.peers)))
            object.__setattr__(self, "count", len(self.peers))

    link = Link((3, 1))
    assert (link.peers, link.count, link.seen) == ((1, 3), 2, [])
    with pytest.raises(FrozenInstanceError):
        link.count = 3


def _signature_and_fields(cls: type[Any]) -> tuple[str, list[tuple[str, bool, bool]]]:
    fields = [(f.name, f.init, f.kw_only) for f in dataclasses.fields(cls)]
    return str(inspect.signature(cls)), fields


def test_init_takes_and_assigns_as_the_standard_library_does() -> None:
    def make(decorate: Decorator) -> type[Any]:
        @decorate
        class Gpu:
            index: int
            name: str = "H100"
            links: list[int] = field(default_factory=list)
            memory: int = field(default=0, init=False)
            seen: list[str] = field(default_factory=list, init=False)
            serial: str | None = field(default=None, kw_only=True)
            uuid: str = field(kw_only=True, default="")

        return Gpu

    oracle, record = _pair(make)
    assert _signature_and_fields(record) == _signature_and_fields(oracle)
    assert record.__match_args__ == oracle.__match_args__ == ("index", "name", "links")
    assert record.__init__.__annotations__ == oracle.__init__.__annotations__
    assert record.__init__.__qualname__.endswith("Gpu.__init__")
    for args, kwargs in [
        ((0,), {}),
        ((1, "H200", [3]), {"serial": "s", "uuid": "GPU-1"}),
        ((), {"index": 2, "links": [1, 2]}),
    ]:
        assert repr(record(*args, **kwargs)) == repr(oracle(*args, **kwargs))
    assert record(0).links is not record(0).links  # a new list per instance
    assert vars(record(0)) == vars(oracle(0))  # memory is read from the class, as there
    for args, kwargs in [((), {}), ((1, "a", [], "x"), {}), ((1,), {"memory": 3})]:
        with pytest.raises(TypeError) as expected:
            oracle(*args, **kwargs)
        with pytest.raises(TypeError) as got:
            record(*args, **kwargs)
        assert str(got.value).split("() ", 1)[1] == str(expected.value).split("() ", 1)[1]


@BOTH
def test_a_field_named_self(decorate: Decorator) -> None:
    @decorate
    class Odd:
        self: int

    assert Odd(self=1).self == 1 and Odd(2) == Odd(2)


@BOTH
def test_a_default_before_a_field_without_one_is_refused(decorate: Decorator) -> None:
    class Wrong:
        first: int = 0
        second: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="^non-default argument 'second' follows default argument$"):
        decorate(Wrong)


def test_an_undocumented_record_is_documented_by_its_signature() -> None:
    def make(decorate: Decorator) -> type[Any]:
        @decorate
        class Plain:
            value: int
            label: str = ""

        return Plain

    oracle, record = _pair(make)
    assert record.__doc__ == oracle.__doc__ == "Plain(value: 'int', label: 'str' = '')"


def test_an_init_var_is_refused_with_what_to_do() -> None:
    class WithInitVar:
        value: int
        scale: dataclasses.InitVar[int]

    with pytest.raises(TypeError, match=r"WithInitVar.scale: frozen_dataclass takes no InitVar"):
        frozen_dataclass(WithInitVar)


def test_slots_without_a_dict_and_init_false_defaults() -> None:
    def make(decorate: Decorator) -> type[Any]:
        @decorate
        class Pair:
            first: int
            second: int
            level: str = field(default="SYS", init=False)

        return Pair

    oracle = dataclass(frozen=True, slots=True)(make(lambda cls: cls))
    record = frozen_dataclass(slots=True)(make(lambda cls: cls))
    assert not hasattr(record(1, 2), "__dict__")
    assert repr(record(1, 2)).endswith("Pair(first=1, second=2, level='SYS')")
    assert repr(oracle(1, 2)).endswith("Pair(first=1, second=2, level='SYS')")
    assert record(1, 2) == copy.deepcopy(record(1, 2))


def test_methods_the_body_defines_are_kept() -> None:
    def make(decorate: Decorator) -> type[Any]:
        @decorate
        class Named:
            name: str

            def __repr__(self) -> str:
                return f"<{self.name}>"

            def __eq__(self, other: object) -> bool:
                return isinstance(other, Named) and other.name.lower() == self.name.lower()

            def __hash__(self) -> int:
                return hash(self.name.lower())

        return Named

    for cls in _pair(make):
        assert repr(cls("A")) == "<A>"
        assert cls("A") == cls("a") and hash(cls("A")) == hash(cls("a"))


def test_a_body_that_sets_hash_to_none_is_unhashable() -> None:
    def make(decorate: Decorator) -> type[Any]:
        @decorate
        class Unhashable:
            name: str
            __hash__ = None  # type: ignore[assignment]

        return Unhashable

    for cls in _pair(make):
        with pytest.raises(TypeError, match="unhashable"):
            hash(cls("A"))


def test_a_body_that_defines_eq_only_still_hashes_by_its_fields() -> None:
    def make(decorate: Decorator) -> type[Any]:
        @decorate
        class Named:
            name: str

            def __eq__(self, other: object) -> bool:
                return isinstance(other, Named) and other.name == self.name

        return Named

    oracle, record = _pair(make)
    assert hash(oracle("a")) == hash(oracle("a"))
    assert hash(record("a")) == hash(record("a"))


@BOTH
def test_a_body_may_not_define_setattr(decorate: Decorator) -> None:
    class Mutable:
        value: int

        def __setattr__(self, name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

    with pytest.raises(
        TypeError, match="^Cannot overwrite attribute __setattr__ in class Mutable$"
    ):
        decorate(Mutable)


def test_a_record_inherits_another_records_fields() -> None:
    @frozen_dataclass
    class Base:
        index: int

    @frozen_dataclass
    class Child(Base):
        name: str = ""

    child = Child(1, "x")
    assert child == Child(1, "x") and child != Child(2, "x") and child != Base(1)
    assert repr(child).endswith("Child(index=1, name='x')")
    with pytest.raises(FrozenInstanceError):
        child.index = 2


@BOTH
def test_repr_of_a_record_that_contains_itself(decorate: Decorator) -> None:
    @decorate
    class Box:
        items: list[Any]

    box = Box([])
    box.items.append(box)
    assert repr(box).endswith("Box(items=[...])")


@pytest.mark.parametrize("cls", [PickledStdlib, PickledGfd, PickledSlots])
def test_copies_and_pickles(cls: type[Any]) -> None:
    record = cls(1, "a")
    for copied in (copy.copy(record), copy.deepcopy(record), pickle.loads(pickle.dumps(record))):
        assert copied == record and copied is not record
        with pytest.raises(FrozenInstanceError):
            copied.x = 2
    assert dataclasses.asdict(record) == {"x": 1, "y": "a"}


def _gfd_record_classes() -> list[type[Any]]:
    package = Path(gfd.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name == "gfd.__main__":
            continue
        for value in vars(importlib.import_module(name)).values():
            if (
                isinstance(value, type)
                and dataclasses.is_dataclass(value)
                and value.__module__ == name
            ):
                found.append(value)
    return found


def test_every_frozen_record_in_gfd_is_declared_with_frozen_dataclass() -> None:
    """A record gfd declares with ``@dataclass(frozen=True)`` would compile its methods at
    every start again; the mutable ones (``@dataclass``) are the state some parts keep."""
    records = _gfd_record_classes()
    assert len(records) > 60
    stdlib_frozen = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in records
        if cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    ]
    assert stdlib_frozen == [], "declare these with gfd.base.frozen.frozen_dataclass"
