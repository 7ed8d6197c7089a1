"""The node's device-health policy: what the kubelet streams and which devices are tainted.

Every ``health.interval`` the node asks each plugin for its devices' health
(``drakit_device_health``). A device no plugin reports on is Healthy (the kubelet never marks a
device Unknown for silence); a composed device (a GPU-NIC pair, ``drakit_compose_devices``) is
Unhealthy while a member of its is; and with ``health.taint_unhealthy`` every Unhealthy device is
published with :data:`UNHEALTHY_TAINT`. :class:`drakit.node.daemon.Node` pushes the outcome to
the kubelet's health streams and republishes the ResourceSlices when it changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from drakit.host.inventory import InventorySnapshot
from drakit.host.pluginhost import PluginHost
from drakit.models import DeviceHealth, DeviceTaint
from drakit.publish.render import PoolSpec

__all__ = [
    "UNHEALTHY_TAINT",
    "DeviceHealthMap",
    "Unhealthy",
    "assess_health",
    "default_health",
    "with_health_taints",
]

UNHEALTHY_TAINT = DeviceTaint(key="drakit.io/unhealthy", value="true", effect="NoSchedule")

DeviceHealthMap = dict[str, dict[tuple[str, str], DeviceHealth]]
"""Driver -> (pool, device) -> the device's health."""

Unhealthy = set[tuple[str, str, str]]
"""The unhealthy devices, as (driver, pool, device)."""


def default_health(inv: InventorySnapshot | None, driver: str) -> list[DeviceHealth]:
    """Every device ``inv`` publishes for ``driver``, Healthy as of now (none before discovery)."""
    now = datetime.now(UTC)
    if inv is None:
        return []
    return [
        DeviceHealth(pool=spec.pool, device=d.name, health="Healthy", last_updated=now)
        for spec in inv.pools
        if spec.driver == driver
        for d in spec.devices
    ]


def assess_health(
    host: PluginHost,
    inv: InventorySnapshot | None,
    reported: Mapping[str, Sequence[DeviceHealth]],
    drivers: Sequence[str],
) -> tuple[DeviceHealthMap, Unhealthy]:
    """The health of every device of ``drivers`` from what the plugins ``reported``.

    Args:
        host: the plugin host (which driver each plugin serves, which plugins compose).
        inv: the current inventory snapshot (``None`` before the first discovery round).
        reported: plugin name -> the health it reported.
        drivers: the drivers the node serves (each gets every device it publishes).

    Returns:
        The health per driver and device, composed devices included, and the unhealthy ones.
    """
    plugin_drivers = host.driver_names()
    unhealthy: Unhealthy = set()
    per_driver: DeviceHealthMap = {
        d: {(h.pool, h.device): h for h in default_health(inv, d)} for d in drivers
    }
    for plugin, batch in reported.items():
        driver = plugin_drivers[plugin]
        for h in batch:
            per_driver.setdefault(driver, {})[(h.pool, h.device)] = h
            if h.health == "Unhealthy":
                unhealthy.add((driver, h.pool, h.device))
    _composed_health(host, inv, per_driver, unhealthy)
    return per_driver, unhealthy


def _composed_health(
    host: PluginHost,
    inv: InventorySnapshot | None,
    per_driver: DeviceHealthMap,
    unhealthy: Unhealthy,
) -> None:
    """Mark composed devices (GPU-NIC pairs) unhealthy while a member of theirs is.

    A composed device is one a plugin contributed through ``drakit_compose_devices``; its
    members are the other plugins' devices whose counter sets it consumes (the composite
    model, ``docs/composite.md``). Updates both arguments in place, so the kubelet stream
    reports the pair Unhealthy and ``taint_unhealthy`` taints it.
    """
    if inv is None or not unhealthy:
        return
    # (driver, pool, counter set) -> the unhealthy devices consuming it, with their owner
    sick: dict[tuple[str, str, str], list[tuple[str, DeviceHealth]]] = {}
    devices = inv.devices()
    for key, owner, dev in devices:
        if (key.driver, key.pool, key.device) not in unhealthy:
            continue
        h = per_driver[key.driver][(key.pool, key.device)]
        for use in dev.consumes_counters:
            sick.setdefault((key.driver, key.pool, use.counter_set), []).append((owner, h))
    composes: dict[str, bool] = {}
    for key, owner, dev in devices:
        if owner not in composes:
            composes[owner] = "drakit_compose_devices" in host.hook_implementations(owner)
        if not composes[owner] or (key.driver, key.pool, key.device) in unhealthy:
            continue
        causes = {
            h.device: h
            for use in dev.consumes_counters
            for other, h in sick.get((key.driver, key.pool, use.counter_set), [])
            if other != owner
        }
        if not causes:
            continue
        why = "; ".join(
            f"{name}: {h.message}" if h.message else name for name, h in sorted(causes.items())
        )
        per_driver.setdefault(key.driver, {})[(key.pool, key.device)] = DeviceHealth(
            pool=key.pool,
            device=key.device,
            health="Unhealthy",
            message=f"member unhealthy: {why}",
            last_updated=max(h.last_updated for h in causes.values()),
        )
        unhealthy.add((key.driver, key.pool, key.device))


def with_health_taints(
    inv: InventorySnapshot, unhealthy: Unhealthy, *, taint: bool
) -> Sequence[PoolSpec]:
    """``inv``'s pools, with the ``unhealthy`` devices tainted when ``taint`` is on."""
    if not (taint and unhealthy):
        return inv.pools
    out = []
    for spec in inv.pools:
        devices = tuple(
            d.with_taints((*d.taints, UNHEALTHY_TAINT))
            if (spec.driver, spec.pool, d.name) in unhealthy
            else d
            for d in spec.devices
        )
        out.append(PoolSpec(spec.driver, spec.node, spec.pool, devices, spec.counter_sets))
    return out
