"""Render devices into ``resource.k8s.io/v1`` ResourceSlices, checking the API's rules first.

Rules (``docs/architecture.md``; facts from the API's validation code):

* one pool per node by default (named after the node); ``Device.pool`` opens others;
* at most 128 devices per slice, 64 when a device in it uses taints, ``consumesCounters`` or
  list attributes;
* counter sets go in slices of their own (1.35+: ``devices`` and ``sharedCounters`` are
  exclusive), at most 8 per slice, 32 counters per set;
* at most 32 attributes + capacities per device, 48 attribute values with lists;
* names: driver a DNS subdomain (<= 63), pool DNS subdomains joined by ``/`` (<= 253), device,
  counter set and counter names DNS labels, attribute names C identifiers (<= 32) with an
  optional DNS-subdomain domain; lengths are counted in UTF-8 bytes, as the API server does;
* attribute values: ints in the int64 range, strings and versions at most 64 bytes, versions
  semantic versions, lists not empty;
* taints: keys label names (an optional DNS-subdomain prefix and ``/``, then at most 63
  characters of ``[A-Za-z0-9-_.]``), values label values;
* capacity request policies: ``default`` required with ``validValues`` or ``validRange``; at
  most 10 valid values, ascending, none above the capacity, ``default`` among them; a range
  within the capacity with ``default`` inside it and on its steps.

:func:`check_pool` splits a pool into what the API server would accept and one
:class:`~drakit.errors.SliceValidationError` per device or counter set it would reject (each
naming it and the rule), so one bad device never keeps the rest of its pool unpublished.
:func:`render_pool` is the strict form: it raises the first error. Rendering is
deterministic: the same input gives byte-identical output, and slice names sort in publishing
order (the scheduler tries a pool's slices in name order).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

from drakit.errors import SliceValidationError
from drakit.models import (
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceTaint,
    ValidRange,
    attribute_value_problem,
    quantity_value,
)

__all__ = [
    "API_VERSION",
    "MAX_DEVICES",
    "MAX_DEVICES_ADVANCED",
    "PoolSpec",
    "check_pool",
    "render_checked",
    "render_pool",
    "render_slices",
    "slice_name",
    "validate_device",
]

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64
MAX_ATTRS_AND_CAPS = 32
MAX_ATTRIBUTE_VALUES = 48
MAX_COUNTER_SETS_PER_SLICE = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_TAINTS = 16
MAX_VALID_VALUES = 10
MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253
MAX_DRIVER_NAME = 63
MAX_POOL_NAME = 253
MAX_DOMAIN = 63
MAX_IDENTIFIER = 32
MAX_LABEL_NAME = 63
MAX_LABEL_VALUE = 63
_NAME_PREFIX_BUDGET = 200  # leaves room for "-<index>" within a DNS subdomain's 253

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _fail(where: str, rule: str) -> SliceValidationError:
    return SliceValidationError(f"{where}: {rule}")


def _size(text: str) -> int:
    """Length as the API server counts it: UTF-8 bytes."""
    return len(text.encode("utf-8"))


def check_dns_label(value: str, what: str, where: str) -> None:
    """Raise unless ``value`` is a DNS label (<= 63 bytes of ``[a-z0-9-]``)."""
    if _size(value) > MAX_DNS_LABEL or not _DNS_LABEL.match(value):
        raise _fail(
            where,
            f"{what} {value!r} must be a DNS label: at most 63 lower-case letters, digits or '-',"
            " starting and ending with a letter or digit",
        )


def check_driver_name(driver: str) -> None:
    """Raise unless ``driver`` is a valid DRA driver name."""
    if _size(driver) > MAX_DRIVER_NAME or not _DNS_SUBDOMAIN.match(driver.lower()):
        raise _fail(
            f"driver {driver!r}",
            "a driver name must be a DNS subdomain of at most 63 characters (e.g. gpu.example.com)",
        )


def check_pool_name(pool: str) -> None:
    """Raise unless ``pool`` is a valid pool name."""
    if _size(pool) > MAX_POOL_NAME or not all(
        _size(p) <= MAX_DNS_SUBDOMAIN and _DNS_SUBDOMAIN.match(p) for p in pool.split("/")
    ):
        raise _fail(
            f"pool {pool!r}",
            "a pool name is one or more DNS subdomains separated by '/', at most 253 characters",
        )


def _check_qualified(name: str, what: str, where: str) -> None:
    domain, sep, ident = name.rpartition("/")
    if sep and (_size(domain) > MAX_DOMAIN or not _DNS_SUBDOMAIN.match(domain)):
        raise _fail(
            where, f"{what} name {name!r}: the domain must be a DNS subdomain of at most 63 chars"
        )
    if _size(ident) > MAX_IDENTIFIER or not _C_IDENT.match(ident):
        raise _fail(
            where,
            f"{what} name {name!r}: the name part must be a C identifier of at most 32 "
            "characters (letters, digits, '_'; not starting with a digit)",
        )


def _check_taint(taint: DeviceTaint, where: str) -> None:
    prefix, sep, name = taint.key.rpartition("/")
    if (
        (sep and (_size(prefix) > MAX_DNS_SUBDOMAIN or not _DNS_SUBDOMAIN.match(prefix)))
        or _size(name) > MAX_LABEL_NAME
        or not _LABEL.match(name)
    ):
        raise _fail(
            where,
            f"taint key {taint.key!r} must be a label name: an optional DNS-subdomain prefix and"
            " '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a"
            " letter or digit (e.g. example.com/unhealthy)",
        )
    if taint.value and (_size(taint.value) > MAX_LABEL_VALUE or not _LABEL.match(taint.value)):
        raise _fail(
            where,
            f"taint {taint.key}: value {taint.value[:20]!r} must be a label value: empty or at"
            " most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        )


def validate_device(device: Device, where: str, known_counter_sets: set[str] | None) -> None:
    """Check one device against the API's per-device rules.

    Args:
        device: the device.
        where: how to name it in errors (``driver/pool/device``).
        known_counter_sets: counter set names of the pool; ``None`` skips reference checks.

    Raises:
        SliceValidationError: the first rule it breaks, naming ``where`` and the rule.
    """
    check_dns_label(device.name, "device name", where)
    n = len(device.attributes) + len(device.capacity)
    if n > MAX_ATTRS_AND_CAPS:
        raise _fail(
            where,
            f"{n} attributes + capacities; at most {MAX_ATTRS_AND_CAPS} per device are allowed",
        )
    values = sum(_check_attribute(name, attr, where) for name, attr in device.attributes.items())
    if values > MAX_ATTRIBUTE_VALUES:
        raise _fail(where, f"{values} attribute values; at most {MAX_ATTRIBUTE_VALUES} per device")
    _check_capacities_and_counters(device, where, known_counter_sets)
    if len(device.taints) > MAX_TAINTS:
        raise _fail(where, f"{len(device.taints)} taints; at most {MAX_TAINTS}")
    for taint in device.taints:
        _check_taint(taint, where)


def _check_attribute(name: str, attr: DeviceAttribute, where: str) -> int:
    """Check one attribute; return how many values it counts for."""
    _check_qualified(name, "attribute", where)
    problem = attribute_value_problem(attr.kind, attr.value)
    if problem:
        raise _fail(where, f"attribute {name}: {problem}")
    return attr.value_count()


def _quantity(text: str, where: str, what: str) -> Fraction:
    value = quantity_value(text)
    if value is None:
        raise _fail(where, f"{what} {text!r} is not a Kubernetes quantity")
    return value


def _check_request_policy(name: str, cap: DeviceCapacity, where: str) -> None:
    policy = cap.request_policy
    if policy is None:
        return
    what = f"capacity {name}: requestPolicy"
    value = _quantity(cap.value, where, f"capacity {name}: value")
    if (policy.valid_values is not None or policy.valid_range is not None) and (
        policy.default is None
    ):
        raise _fail(where, f"{what}: default is required with validValues or validRange")
    default = None if policy.default is None else _quantity(policy.default, where, what)
    if policy.valid_values is not None:
        vals = [_quantity(v, where, f"{what}.validValues") for v in policy.valid_values]
        if not vals or len(vals) > MAX_VALID_VALUES:
            raise _fail(where, f"{what}: validValues needs 1 to {MAX_VALID_VALUES} entries")
        if any(b <= a for a, b in itertools.pairwise(vals)):
            raise _fail(where, f"{what}: validValues must be unique and in ascending order")
        if vals[-1] > value:
            raise _fail(where, f"{what}: validValues may not exceed the capacity ({cap.value})")
        if default not in vals:
            raise _fail(where, f"{what}: default {policy.default} must be one of validValues")
    if policy.valid_range is not None:
        _check_range(policy.valid_range, value, default, where, f"{what}.validRange")


def _check_range(
    rng: ValidRange, value: Fraction, default: Fraction | None, where: str, what: str
) -> None:
    lo = _quantity(rng.min, where, f"{what}.min")
    hi = None if rng.max is None else _quantity(rng.max, where, f"{what}.max")
    step = None if rng.step is None else _quantity(rng.step, where, f"{what}.step")
    top = value if hi is None else hi
    problems = [
        (lo > value, "min exceeds the capacity"),
        (hi is not None and hi > value, "max exceeds the capacity"),
        (hi is not None and lo > hi, "min exceeds max"),
        (default is not None and not lo <= default <= top, "default is outside the range"),
    ]
    if step is not None:
        problems += [
            (step <= 0, "step must be positive"),
            (step > 0 and lo + step > value, "min + step exceeds the capacity"),
            (step > 0 and default is not None and (default - lo) % step != 0, "default off-step"),
            (step > 0 and hi is not None and (hi - lo) % step != 0, "max is off-step"),
        ]
    for broken, rule in problems:
        if broken:
            raise _fail(where, f"{what}: {rule}")


def _check_capacities_and_counters(
    device: Device, where: str, known_counter_sets: set[str] | None
) -> None:
    for name, cap in device.capacity.items():
        _check_qualified(name, "capacity", where)
        if cap.request_policy is not None and not device.allow_multiple_allocations:
            raise _fail(
                where,
                f"capacity {name} has a requestPolicy, which needs allowMultipleAllocations: true",
            )
        _check_request_policy(name, cap, where)
    if len(device.consumes_counters) > MAX_CONSUMPTIONS_PER_DEVICE:
        raise _fail(
            where,
            f"{len(device.consumes_counters)} consumesCounters entries; at most "
            f"{MAX_CONSUMPTIONS_PER_DEVICE}",
        )
    seen: set[str] = set()
    for cc in device.consumes_counters:
        if cc.counter_set in seen:
            raise _fail(where, f"consumesCounters names counter set {cc.counter_set!r} twice")
        seen.add(cc.counter_set)
        if known_counter_sets is not None and cc.counter_set not in known_counter_sets:
            raise _fail(
                where,
                f"consumesCounters references counter set {cc.counter_set!r}, which the pool does"
                " not publish",
            )
        if len(cc.counters) > MAX_COUNTERS_PER_SET:
            raise _fail(where, f"consumes {len(cc.counters)} counters; at most 32 per entry")
        for c in cc.counters:
            check_dns_label(c, "counter name", where)


def _check_counter_set(cs: CounterSet, where: str) -> None:
    check_dns_label(cs.name, "counter set name", where)
    if len(cs.counters) > MAX_COUNTERS_PER_SET:
        raise _fail(where, f"{len(cs.counters)} counters; at most {MAX_COUNTERS_PER_SET}")
    for c in cs.counters:
        check_dns_label(c, "counter name", where)


def _is_advanced(device: Device) -> bool:
    return bool(
        device.taints
        or device.consumes_counters
        or any(
            a.kind in ("ints", "bools", "strings", "versions") for a in device.attributes.values()
        )
    )


def _device_to_api(device: Device) -> dict[str, Any]:
    out: dict[str, Any] = {"name": device.name}
    if device.attributes:
        out["attributes"] = {k: device.attributes[k].to_api() for k in sorted(device.attributes)}
    if device.capacity:
        caps: dict[str, Any] = {}
        for k in sorted(device.capacity):
            cap = device.capacity[k]
            body: dict[str, Any] = {"value": cap.value}
            if cap.request_policy is not None:
                body["requestPolicy"] = cap.request_policy.model_dump(
                    by_alias=True, exclude_none=True, mode="json"
                )
            caps[k] = body
        out["capacity"] = caps
    if device.consumes_counters:
        out["consumesCounters"] = [
            {
                "counterSet": cc.counter_set,
                "counters": {k: {"value": cc.counters[k]} for k in sorted(cc.counters)},
            }
            for cc in device.consumes_counters
        ]
    if device.taints:
        out["taints"] = [t.model_dump(exclude_none=True) for t in device.taints]
    if device.allow_multiple_allocations is not None:
        out["allowMultipleAllocations"] = device.allow_multiple_allocations
    if device.node_allocatable_resources:
        out["nodeAllocatableResources"] = {
            k: r.model_dump(by_alias=True, exclude_none=True, mode="json")
            for k, r in sorted(device.node_allocatable_resources.items())
        }
    return out


def _counter_set_to_api(cs: CounterSet) -> dict[str, Any]:
    return {
        "name": cs.name,
        "counters": {k: {"value": cs.counters[k]} for k in sorted(cs.counters)},
    }


def _chunks(devices: Sequence[Device]) -> list[list[Device]]:
    out: list[list[Device]] = []
    cur: list[Device] = []
    advanced = False
    for d in devices:
        adv = advanced or _is_advanced(d)
        limit = MAX_DEVICES_ADVANCED if adv else MAX_DEVICES
        if len(cur) + 1 > limit:
            out.append(cur)
            cur, adv = [], _is_advanced(d)
        cur.append(d)
        advanced = adv
    if cur:
        out.append(cur)
    return out


def slice_name_prefix(node: str, driver: str, pool: str) -> str:
    """The deterministic name prefix of a pool's slices (a DNS subdomain)."""
    base = f"{node}-{driver}" if pool == node else f"{node}-{driver}-{pool.replace('/', '-')}"
    base = re.sub(r"[^a-z0-9.-]", "-", base.lower()).strip("-.")
    if len(base) > _NAME_PREFIX_BUDGET:
        digest = hashlib.sha256(base.encode()).hexdigest()[:10]
        base = f"{base[: _NAME_PREFIX_BUDGET - 11].rstrip('.-')}-{digest}"
    return base


def slice_name(prefix: str, index: int) -> str:
    """The name of a pool's slice ``index``: names sort in index order, for any count.

    The index is written after a letter that gives its number of digits (``a0`` ... ``a9``,
    ``b10`` ... ``b99``, ``c100`` ...), so ``-b10`` sorts after ``-a9`` and a slice keeps its
    name when the pool grows.
    """
    digits = str(index)
    return f"{prefix}-{chr(ord('a') + len(digits) - 1)}{digits}"


@dataclass(frozen=True)
class PoolSpec:
    """One pool's devices and counter sets, as published under one driver."""

    driver: str
    node: str
    pool: str
    devices: tuple[Device, ...]
    counter_sets: tuple[CounterSet, ...] = ()


_Named = TypeVar("_Named", CounterSet, Device)


def _kept(
    items: Iterable[_Named],
    what: str,
    where: Callable[[_Named], str],
    check: Callable[[_Named, str], None],
    errors: list[SliceValidationError],
) -> list[_Named]:
    """The items that pass ``check`` and whose name is not taken; one error per item left out."""
    seen: set[str] = set()
    kept: list[_Named] = []
    for item in items:
        at = where(item)
        try:
            if item.name in seen:
                raise _fail(at, f"{what} names must be unique within a pool")
            check(item, at)
        except SliceValidationError as exc:
            errors.append(exc)
            continue
        seen.add(item.name)
        kept.append(item)
    return kept


def check_pool(spec: PoolSpec) -> tuple[PoolSpec, list[SliceValidationError]]:
    """Split a pool into what the API server accepts and what it would reject.

    Returns:
        The pool without the devices and counter sets that break a rule, and one error per
        device or counter set left out (naming it and the rule). Devices that consume from a
        counter set left out are left out too.

    Raises:
        SliceValidationError: the driver or pool name is invalid (nothing of it can be published).
    """
    check_driver_name(spec.driver)
    check_pool_name(spec.pool)
    errors: list[SliceValidationError] = []
    counter_sets = _kept(
        spec.counter_sets,
        "counter set",
        lambda cs: f"{spec.driver}/{spec.pool} counter set {cs.name!r}",
        _check_counter_set,
        errors,
    )
    names = {cs.name for cs in counter_sets}
    devices = _kept(
        spec.devices,
        "device",
        lambda d: f"device {spec.driver}/{spec.pool}/{d.name}",
        lambda d, where: validate_device(d, where, names),
        errors,
    )
    if not errors:
        return spec, []
    kept = PoolSpec(
        driver=spec.driver,
        node=spec.node,
        pool=spec.pool,
        devices=tuple(devices),
        counter_sets=tuple(counter_sets),
    )
    return kept, errors


def render_checked(spec: PoolSpec, *, generation: int = 0) -> list[dict[str, Any]]:
    """Render a pool that :func:`check_pool` returned (no checks: they were made there)."""
    bodies: list[dict[str, Any]] = []
    cs_list = list(spec.counter_sets)
    for i in range(0, len(cs_list), MAX_COUNTER_SETS_PER_SLICE):
        part = cs_list[i : i + MAX_COUNTER_SETS_PER_SLICE]
        bodies.append({"sharedCounters": [_counter_set_to_api(cs) for cs in part]})
    for chunk in _chunks(spec.devices):
        bodies.append({"devices": [_device_to_api(d) for d in chunk]})
    if not bodies:  # an empty pool is still published, so consumers see it has no devices
        bodies.append({"devices": []})

    prefix = slice_name_prefix(spec.node, spec.driver, spec.pool)
    out = []
    for i, body in enumerate(bodies):
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": {"name": slice_name(prefix, i)},
                "spec": {
                    "driver": spec.driver,
                    "nodeName": spec.node,
                    "pool": {
                        "name": spec.pool,
                        "generation": generation,
                        "resourceSliceCount": len(bodies),
                    },
                    **body,
                },
            }
        )
    return out


def render_pool(spec: PoolSpec, *, generation: int = 0) -> list[dict[str, Any]]:
    """Render one pool into ResourceSlice objects (``resource.k8s.io/v1`` JSON dicts).

    Raises:
        SliceValidationError: a rule is broken; the message names the device and the rule.
    """
    checked, errors = check_pool(spec)
    if errors:
        raise errors[0]
    return render_checked(checked, generation=generation)


def pools_from_devices(
    driver: str, node: str, devices: Iterable[Device], counter_sets: Sequence[CounterSet] = ()
) -> list[PoolSpec]:
    """Group one driver's devices into pools (the node's pool unless ``Device.pool`` is set).

    Counter sets belong to the node's pool.
    """
    by_pool: dict[str, list[Device]] = {}
    for d in devices:
        by_pool.setdefault(d.pool or node, []).append(d)
    if counter_sets and node not in by_pool:
        by_pool[node] = []
    return [
        PoolSpec(
            driver=driver,
            node=node,
            pool=pool,
            devices=tuple(devs),
            counter_sets=tuple(counter_sets) if pool == node else (),
        )
        for pool, devs in sorted(by_pool.items())
    ]


def render_slices(
    driver: str,
    node: str,
    devices: Iterable[Device],
    counter_sets: Sequence[CounterSet] = (),
    *,
    generation: int = 0,
) -> list[dict[str, Any]]:
    """Render one driver's devices on a node into ResourceSlices, pool by pool."""
    out: list[dict[str, Any]] = []
    for spec in pools_from_devices(driver, node, devices, counter_sets):
        out.extend(render_pool(spec, generation=generation))
    return out
