"""DRA device selectors evaluated in Kubernetes' CEL environment.

The expressions run on ``common-expression-language`` (the Rust ``cel`` interpreter). The
environment is the one kube-scheduler gives a selector:

* ``device.driver`` (string), ``device.allowMultipleAllocations`` (bool);
* ``device.attributes[domain].id`` and ``device.capacity[domain].id``: attribute names
  without a domain belong to the driver's domain; a domain the device has nothing in is an
  empty map (so ``"x" in device.attributes["other.io"]`` is false, not an error);
* capacities are quantities and ``version`` attributes are semvers, with Kubernetes'
  functions on them: ``quantity()``, ``isQuantity()``, ``compareTo()``, ``isGreaterThan()``,
  ``isLessThan()``, ``add()``, ``sub()``, ``asInteger()``, ``asApproximateFloat()``,
  ``sign()``, ``isInteger()``; ``semver()``, ``isSemver()``, ``major()``, ``minor()``,
  ``patch()``.

Quantities and semvers travel through the interpreter as tagged strings holding the exact
value, so ``==`` between two quantities compares values (``quantity("1Gi") ==
quantity("1024Mi")``), as Kubernetes does. A runtime error (a missing attribute without a
``has``/``in`` guard) is a :class:`CelError`, which, as in kube-scheduler, stops allocation
on the node instead of filtering the device out. Known gap: the interpreter has no
``cel.bind()``; an expression using it fails to compile with a message saying so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterator, Mapping
from fractions import Fraction
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from drakit.allocator.api import Device
from drakit.allocator.quantity import parse_quantity
from drakit.errors import DrakitError
from drakit.models import SEMVER

if TYPE_CHECKING:
    import cel

__all__ = [
    "CelError",
    "DeviceEnv",
    "Selector",
    "compile_selector",
    "content_key",
    "device_input",
]


def _cel() -> ModuleType:
    """The CEL library, imported on first use.

    Its package also loads its interactive shell (prompt_toolkit, ~14 MiB), which a node driver
    that never evaluates a selector should not carry (``drakit.commands.cli`` reaches this module
    through ``drakit explain``).
    """
    import cel  # noqa: PLC0415

    return cel


_Q = "\x00Q:"
_V = "\x00V:"
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$")
_DRIVER_ONLY = re.compile(r'^\s*device\.driver\s*==\s*"([a-z0-9.-]+)"\s*$')
_LITERAL = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'")
_DEVICE = re.compile(r"(?<![\w.])device(?!\w)")
# A read of one value of the device: its driver, or one attribute or capacity by a plain
# literal domain and name (``.name`` or ``["name"]``), not followed by a call on it.
_NAME = r"""(?:"([^"\\\n]*)"|'([^'\\\n]*)')"""
_READ = re.compile(
    r"device\s*\.\s*(?:driver|allowMultipleAllocations)(?!\w)"
    rf"|device\s*\.\s*(attributes|capacity)\s*\[\s*{_NAME}\s*\]\s*"
    rf"(?:\.\s*([A-Za-z_]\w*)(?!\w)(?!\s*\()|\[\s*{_NAME}\s*\])"
)


class CelError(DrakitError):
    """A selector failed to compile or to evaluate."""


# --- quantity and semver values --------------------------------------------------------------


def _q(value: Fraction) -> str:
    return f"{_Q}{value.numerator}/{value.denominator}"


def _q_value(tagged: Any) -> Fraction:
    if isinstance(tagged, str) and tagged.startswith(_Q):
        return Fraction(tagged[len(_Q) :])
    if isinstance(tagged, int) and not isinstance(tagged, bool):
        return Fraction(tagged)
    raise CelError(f"expected a quantity, got {tagged!r}")


def _semver(text: str, normalize: bool = False) -> str:
    if normalize:
        text = _normalize_semver(text)
    if not SEMVER.match(text):
        raise CelError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH[-pre][+build])")
    return _V + text


def _normalize_semver(text: str) -> str:
    text = text.removeprefix("v")
    core, sep, rest = text.partition("-") if "-" in text else text.partition("+")
    parts = [str(int(p)) if p.isdigit() else p for p in core.split(".")]
    parts += ["0"] * (3 - len(parts))
    return ".".join(parts) + (sep + rest if sep else "")


def _v_key(tagged: Any) -> tuple[Any, ...]:
    if not (isinstance(tagged, str) and tagged.startswith(_V)):
        raise CelError(f"expected a semver, got {tagged!r}")
    m = SEMVER.match(tagged[len(_V) :])
    if m is None:
        raise CelError(f"invalid semver {tagged[len(_V) :]!r}")
    major, minor, patch, pre = int(m[1]), int(m[2]), int(m[3]), m[5]
    if pre is None:
        return (major, minor, patch, 1, ())
    ids = tuple((0, int(x), "") if x.isdigit() else (1, 0, x) for x in pre.split("."))
    return (major, minor, patch, 0, ids)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, str) and a.startswith(_V):
        ka, kb = _v_key(a), _v_key(b)
    else:
        ka, kb = _q_value(a), _q_value(b)  # type: ignore[assignment]
    return (ka > kb) - (ka < kb)


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def _quantity(text: str) -> str:
    try:
        return _q(parse_quantity(text))
    except ValueError as e:
        raise CelError(str(e)) from None


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except (CelError, ValueError):
        return False
    return True


def _as_integer(q: Any) -> int:
    v = _q_value(q)
    if v.denominator != 1:
        raise CelError(f"quantity {float(v)} is not an integer")
    return v.numerator


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "add": lambda a, b: _q(_q_value(a) + _q_value(b)),
    "sub": lambda a, b: _q(_q_value(a) - _q_value(b)),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: float(_q_value(q)),
    "sign": lambda q: (_q_value(q) > 0) - (_q_value(q) < 0),
    "isInteger": lambda q: _q_value(q).denominator == 1,
    "major": lambda v: _v_key(v)[0],
    "minor": lambda v: _v_key(v)[1],
    "patch": lambda v: _v_key(v)[2],
}


# --- the device variable -----------------------------------------------------------------------


def _split(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.rpartition("/")
    return (domain, ident) if sep else (driver, name)


def device_input(driver: str, device: Device) -> dict[str, Any]:
    """The ``device`` variable for ``device`` of ``driver``."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attr in device.attributes.items():
        domain, ident = _split(name, driver)
        # the one set field, read as ``attr.kind``/``attr.value`` do, in one pass
        field, value = next((f, v) for f, v in attr.__dict__.items() if v is not None)
        if field == "version":
            value = _V + str(value)
        elif field == "versions":
            value = [_V + str(x) for x in value]
        elif isinstance(value, tuple):
            value = list(value)
        attributes.setdefault(domain, {})[ident] = value
    capacity: dict[str, dict[str, Any]] = {}
    for name, cap in device.capacity.items():
        domain, ident = _split(name, driver)
        capacity.setdefault(domain, {})[ident] = _q(cap.amount)
    return {
        "driver": driver,
        "allowMultipleAllocations": bool(device.allow_multiple_allocations),
        "attributes": attributes,
        "capacity": capacity,
    }


def content_key(driver: str, device: Device) -> Hashable:
    """What :func:`device_input` is made of, as it is stored: equal keys, equal inputs.

    The attributes' set fields in declaration order (an ``int`` and a ``bool`` of equal value
    sit in different places) and the capacities' quantity strings; the name and the rest of the
    device are not visible to CEL. Devices whose attributes or capacities are listed in another
    order, or whose quantities are spelled differently, get keys of their own (and inputs equal
    to each other's): the key decides sharing only, never a value.
    """
    return (
        driver,
        bool(device.allow_multiple_allocations),
        tuple((name, *attr.__dict__.values()) for name, attr in device.attributes.items()),
        tuple((name, cap.value) for name, cap in device.capacity.items()),
    )


class DeviceEnv:
    """The evaluation context of one device, built once and shared by every selector.

    Building the interpreter's context dominates the cost of an evaluation (about 100 us
    against 4 us for the evaluation itself), so contexts are cached by the device's CEL
    content: devices that look the same to CEL (same driver, attributes and capacity; the
    name is not visible) share one, also across nodes.
    """

    _cache: ClassVar[dict[Hashable, DeviceEnv]] = {}
    # id -> (the device, kept alive so that its id is not reused; driver; environment)
    _by_object: ClassVar[dict[int, tuple[Device, str, DeviceEnv]]] = {}
    _MAX = 8192

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value
        self._contexts: dict[tuple[str, ...], cel.Context] = {}
        self.results: dict[str, bool] = {}

    @classmethod
    def of(cls, driver: str, device: Device) -> DeviceEnv:
        """The (cached) environment for ``device`` of ``driver``.

        Looked up by :func:`content_key`, so the ``device`` variable is only converted for a
        content not seen before: a fleet's nodes publish the same devices under their own pool
        names, and converting each (about 40 us) was most of explaining a claim over them. A
        device object seen before (one shared by many slices, as
        :func:`drakit.explain.sources.parse_slices` makes them) is not even keyed again: devices
        are frozen models, never changed in place.
        """
        seen = cls._by_object.get(id(device))
        if seen is not None and seen[0] is device and seen[1] == driver:
            return seen[2]
        key = content_key(driver, device)
        env = cls._cache.get(key)
        if env is None:
            if len(cls._cache) >= cls._MAX:
                cls.clear()
            env = cls._cache[key] = cls(device_input(driver, device))
        if len(cls._by_object) >= cls._MAX:
            cls._by_object.clear()
        cls._by_object[id(device)] = (device, driver, env)
        return env

    @classmethod
    def clear(cls) -> None:
        """Forget every environment and every result cached (also :class:`Selector`'s)."""
        cls._cache.clear()
        cls._by_object.clear()
        compile_selector.cache_clear()

    def context(self, domains: tuple[str, ...], functions: bool) -> cel.Context:
        """A context whose maps also hold an empty entry for each of ``domains``.

        ``functions``: register the quantity and semver functions (converting them costs
        about as much as the device itself, so expressions that call none go without).
        """
        missing = tuple(
            d
            for d in domains
            if d not in self.value["attributes"] or d not in self.value["capacity"]
        )
        key = (*missing, "\x00f" if functions else "")
        ctx = self._contexts.get(key)
        if ctx is None:
            value = self.value
            if missing:
                value = {
                    **value,
                    "attributes": {**{d: {} for d in missing}, **value["attributes"]},
                    "capacity": {**{d: {} for d in missing}, **value["capacity"]},
                }
            ctx = _cel().Context()
            if functions:
                ctx.update(_FUNCTIONS)
            ctx.add_variable("device", value)
            self._contexts[key] = ctx
        return ctx


class Selector:
    """A compiled selector expression."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        if "cel.bind(" in expression:
            raise CelError(
                f"selector {expression!r}: cel.bind() is not supported by drakit's CEL "
                "interpreter; write the expression without it"
            )
        try:
            self._program = _cel().compile(expression)
        except (ValueError, RuntimeError) as e:
            raise CelError(f"selector {expression!r} does not compile: {e}") from None
        # String literals that may be domains: give them an empty map on devices lacking them.
        literals = (a or b for a, b in _LITERAL.findall(expression))
        self._domains = tuple(sorted({x for x in literals if _DOMAIN.match(x)}))
        self._functions = any(f"{name}(" in expression for name in _FUNCTIONS)
        # The usual DeviceClass selector needs no interpreter (nor a device context).
        m = _DRIVER_ONLY.match(expression)
        self.driver_only: str | None = m.group(1) if m else None
        self.reads = _reads(expression)
        self._by_reads: dict[Hashable, bool] = {}
        self._by_device: dict[int, tuple[Device, str, bool]] = {}

    def matches_device(self, driver: str, device: Device, env: Callable[[], DeviceEnv]) -> bool:
        """Evaluate on ``device`` of ``driver``; ``env()`` gives its environment.

        Where the expression reads the device only through values named in its text
        (:attr:`reads`), the result is shared by every device with the same driver and the same
        values (present or not) of what it reads: a fleet's devices differ in serial numbers and
        UUIDs, which a class's selector rarely reads, and building a device's context is most
        of an evaluation. Otherwise, or the first time, it is :meth:`matches` on ``env()``.

        Raises:
            CelError: a runtime error or a non-boolean result (never cached).
        """
        if self.reads is None:
            return self.matches(env())
        seen = self._by_device.get(id(device))
        if seen is not None and seen[0] is device and seen[1] == driver:
            return seen[2]  # a device object shared by many slices (``parse_slices``)
        key = (driver, device.allow_multiple_allocations, *_values(driver, device, self.reads))
        cached = self._by_reads.get(key)
        if cached is None:
            cached = self.matches(env())
            if len(self._by_reads) >= _MAX_SHARED:
                self._by_reads.clear()
            self._by_reads[key] = cached
        if len(self._by_device) >= _MAX_SHARED:
            self._by_device.clear()
        self._by_device[id(device)] = (device, driver, cached)  # kept: its id stays its own
        return cached

    def matches(self, env: DeviceEnv) -> bool:
        """Evaluate on a device (results are cached in ``env``).

        Raises:
            CelError: a runtime error or a non-boolean result.
        """
        cached = env.results.get(self.expression)
        if cached is not None:
            return cached
        try:
            result = self._program.execute(env.context(self._domains, self._functions))
        except CelError as e:
            raise CelError(f"selector {self.expression!r}: {e}") from None
        except Exception as e:  # noqa: BLE001 - the interpreter raises several builtin types
            raise CelError(f"selector {self.expression!r}: CEL runtime error: {e!r}") from None
        if not isinstance(result, bool):
            raise CelError(
                f"selector {self.expression!r} returned {result!r}; a selector must return a bool"
            )
        env.results[self.expression] = result
        return result


_MAX_SHARED = 65536

_Read = tuple[str, str, str]  # ("attributes" or "capacity", domain, name)


def _reads(expression: str) -> tuple[_Read, ...] | None:
    """The device values ``expression`` reads, when that is all it does with ``device``.

    Every occurrence of the identifier ``device`` (in a string literal too) must start a read of
    ``device.driver``, ``device.allowMultipleAllocations``, or one attribute or capacity named
    by plain literals (``device.attributes["d"].name``, ``device.capacity['d']["name"]``), and
    that value may then be used in any way. Anything else (a map of the device used whole:
    ``"x" in device.attributes["d"]``, a macro over it, a computed key, an optional field,
    ``device`` as a comprehension's variable) gives ``None``: the expression may read anything.
    """
    reads: list[_Read] = []
    for m in _DEVICE.finditer(expression):
        r = _READ.match(expression, m.start())
        if r is None:
            return None
        if r.group(1):
            domain = r.group(2) if r.group(2) is not None else r.group(3)
            name = r.group(4) or (r.group(5) if r.group(5) is not None else r.group(6))
            reads.append((r.group(1), domain, name))
    return tuple(sorted(set(reads)))


def _values(driver: str, device: Device, reads: tuple[_Read, ...]) -> Iterator[Hashable]:
    """What ``device`` holds under each of ``reads`` (``None`` where it holds nothing).

    A name of the driver's own domain may be stored with or without the domain: both are
    looked up (the device variable holds whichever comes last).
    """
    for kind, domain, name in reads:
        attributes = kind == "attributes"
        held: Mapping[str, Any] = device.attributes if attributes else device.capacity
        for key in (f"{domain}/{name}", name) if domain == driver else (f"{domain}/{name}",):
            v = held.get(key)
            if v is None:
                yield None
            elif attributes:  # its set fields in place: 1 and true differ
                yield (key, *v.__dict__.values())
            else:
                yield (key, v.value)


@lru_cache(maxsize=1024)
def compile_selector(expression: str) -> Selector:
    """The compiled selector for ``expression`` (cached)."""
    return Selector(expression)
