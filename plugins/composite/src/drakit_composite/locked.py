"""Locked-in mode: member devices divided into fixed shares that the composite publishes.

Seed 000's locked-in mode: a composite device owns a pre-divided part of a member device (a
quarter of a NUMA node's CPUs) and is consumed entirely on allocation. A member device fits when
it has a consumable capacity (``allowMultipleAllocations``, so its backend can prepare a part of
it) and consumes one counter set of its own whole (every member backend does so when it shares
the composite's driver). Each share then

* consumes ``1/shares`` of every counter of that set: the shares of one device fit beside one
  another, and neither fits beside the lone device, which consumes the whole set (the 1.37
  scheduler charges a multi-allocatable device's counters once, at its first allocation);
* carries the share as its own ``capacity`` and is allocated whole (no multiple allocations),
  so Kueue charges exactly the share's counters for each one;
* is prepared by the member's own backend, as a share of ``1/shares`` of the device.

Nothing here reads hardware; :func:`divide` works on the devices discovery produced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from drakit.models import CounterConsumption, Device, DeviceAttribute, DeviceCapacity, DeviceKey
from drakit_composite.settings import LockedShares

__all__ = ["SHARE_SUFFIX", "Share", "divide", "share_type"]

SHARE_SUFFIX = "-share"
"""A share's ``type`` (and DeviceClass) is its member backend's class name plus this."""

_KEPT = ("socket", "die", "l3", "smt", "isolated", "model", "threadsPerCore")
"""Member attributes a share keeps besides the standard (domain-qualified) ones."""


def share_type(plugin: str) -> str:
    """The ``type`` of ``plugin``'s shares and the name of their class: ``cpu`` -> ``cpu-share``."""
    return plugin.replace("_", "-").lower() + SHARE_SUFFIX


@dataclass(frozen=True)
class Share:
    """One published share: what to ask its member's backend for at prepare time."""

    name: str
    member: str
    plugin: str
    capacity: str
    amount: str
    """The share of ``capacity`` as a quantity (``"16"``)."""


def _quantity(q: str) -> Decimal | None:
    try:
        return Decimal(q)
    except InvalidOperation:
        return None


def _divided(value: str, shares: int) -> str | None:
    """``value / shares`` as a whole quantity, or ``None`` when it does not divide."""
    v = _quantity(value)
    if v is None or v <= 0 or v % shares:
        return None
    return str(int(v // shares))


def _fits_policy(cap: DeviceCapacity, amount: str) -> str:
    """Why the member's request policy refuses ``amount`` (empty when it accepts it)."""
    policy = cap.request_policy
    if policy is None:
        return ""
    want = Decimal(amount)
    if policy.valid_values and all(_quantity(v) != want for v in policy.valid_values):
        return f"its request policy accepts only {', '.join(policy.valid_values)}"
    rng = policy.valid_range
    if rng is None:
        return ""
    low = _quantity(rng.min) or Decimal(0)
    if want < low:
        return f"its request policy needs at least {rng.min}"
    step = _quantity(rng.step) if rng.step else None
    if step and (want - low) % step:
        return f"its request policy takes steps of {rng.step} from {rng.min}"
    return ""


def _divisors(value: str, limit: int = 64) -> str:
    v = _quantity(value)
    if v is None or v != v.to_integral_value():
        return "none"
    n = int(v)
    return ", ".join(str(d) for d in range(2, min(n, limit) + 1) if n % d == 0) or "none"


def divide(
    plugin: str,
    entries: Sequence[LockedShares],
    devices: Mapping[DeviceKey, Device],
    owners: Mapping[DeviceKey, str],
) -> tuple[list[Device], dict[str, Share], list[tuple[str, str]]]:
    """The share devices of every ``locked`` entry, and the settings problems found.

    Args:
        plugin: the composite's name (for the settings paths in problems).
        entries: ``plugins.<plugin>.locked``.
        devices: every device ``drakit_compose_devices`` received.
        owners: the plugin behind each of them.

    Returns:
        ``(devices, shares by name, problems)``; each problem is ``(path, message with the
        fix)``, and an entry with a problem contributes no devices.
    """
    out: list[Device] = []
    shares: dict[str, Share] = {}
    problems: list[tuple[str, str]] = []
    divided: dict[tuple[str, str], int] = {}  # (plugin, device) -> the entry dividing it
    for i, entry in enumerate(entries):
        where = f"plugins.{plugin}.locked[{i}]"
        mine = {k.device: d for k, d in devices.items() if owners.get(k) == entry.plugin}
        unknown = sorted(set(entry.devices) - set(mine))
        if unknown:
            problems.append(
                (
                    f"{where}.devices",
                    f"{', '.join(unknown)} are not devices of {entry.plugin!r} on this node "
                    f"(it has {', '.join(sorted(mine)) or 'none'}); list some of those or "
                    "leave devices out for all",
                )
            )
            continue
        chosen = {
            n: d
            for n, d in mine.items()
            if (n in entry.devices if entry.devices else entry.capacity in d.capacity)
        }
        if not chosen:
            seen = sorted({c for d in mine.values() for c in d.capacity})
            problems.append(
                (
                    f"{where}.capacity",
                    f"no device of {entry.plugin!r} has the consumable capacity "
                    f"{entry.capacity!r} (capacities there: {', '.join(seen) or 'none'}); "
                    "name one of those, or give the member backend consumable devices (the "
                    "CPU backend: mode grouped)",
                )
            )
            continue
        built: list[Device] = []
        bad = False
        for name, dev in sorted(chosen.items()):
            first = divided.setdefault((entry.plugin, name), i)
            if first != i:
                problems.append(
                    (
                        f"{where}.devices",
                        f"{name} is divided by plugins.{plugin}.locked[{first}] already; a "
                        "device is divided once, so list disjoint devices in the two entries",
                    )
                )
                bad = True
                continue
            why = _unfit(dev, entry)
            if why is not None:
                problems.append((f"{where}.{why[0]}", f"{name}: {why[1]}"))
                bad = True
                continue
            [use] = dev.consumes_counters
            amount = str(_divided(dev.capacity[entry.capacity].value, entry.shares))
            per = {c: str(_divided(v, entry.shares)) for c, v in use.counters.items()}
            attrs = {k: v for k, v in dev.attributes.items() if "/" in k or k in _KEPT}
            for k in range(entry.shares):
                share = f"{name}-share-{k}"
                built.append(
                    Device(
                        name=share,
                        attributes={
                            **attrs,
                            "type": DeviceAttribute(string=share_type(entry.plugin)),
                            "member": DeviceAttribute(string=name),
                            "share": DeviceAttribute(int=k),
                            "shares": DeviceAttribute(int=entry.shares),
                        },
                        capacity={entry.capacity: DeviceCapacity(value=amount)},
                        consumes_counters=(
                            CounterConsumption(counter_set=use.counter_set, counters=per),
                        ),
                        taints=dev.taints,
                    )
                )
                shares[share] = Share(share, name, entry.plugin, entry.capacity, amount)
        if not bad:
            out.extend(built)
    return out, shares, problems


def _unfit(dev: Device, entry: LockedShares) -> tuple[str, str] | None:
    """Why ``dev`` cannot be divided as ``entry`` says: ``(field, message)``, or ``None``."""
    cap = dev.capacity.get(entry.capacity)
    if cap is None:
        return "devices", f"has no consumable capacity {entry.capacity!r}; remove it from devices"
    if not dev.allow_multiple_allocations:
        return "plugin", (
            "is allocated whole (no allowMultipleAllocations), so its backend cannot prepare a "
            "part of it; locked-in shares fit only consumable devices (docs/composite.md)"
        )
    if len(dev.consumes_counters) != 1:
        return "plugin", (
            "consumes no counter set of its own, so a share could be allocated beside the whole "
            "device; its backend must publish under the composite's driver (docs/composite.md)"
        )
    why = _indivisible(cap, dev.consumes_counters[0].counters, entry)
    return ("shares", why) if why else None


def _indivisible(cap: DeviceCapacity, counters: Mapping[str, str], entry: LockedShares) -> str:
    """Why ``entry.shares`` does not divide the capacity and its counters (empty when it does)."""
    total = cap.value
    amount = _divided(total, entry.shares)
    if amount is None:
        return (
            f"{entry.shares} shares do not divide its {total} {entry.capacity}; use one of "
            f"{_divisors(total)}"
        )
    odd = sorted(c for c, v in counters.items() if _divided(v, entry.shares) is None)
    if odd:
        return (
            f"{entry.shares} shares do not divide its counters "
            f"{', '.join(f'{c}={counters[c]}' for c in odd)}; use a divisor of them"
        )
    refused = _fits_policy(cap, amount)
    if refused:
        return (
            f"a share of {amount} {entry.capacity} does not fit: {refused}; pick shares whose "
            "share it accepts"
        )
    return ""
