"""Discovery results and device ownership, as immutable snapshots swapped atomically.

:func:`build_inventory` runs one discovery round through the plugin host (discovery, strategy
ordering, grouping into pools) and returns an :class:`InventorySnapshot`: the pools to publish
and, per device, the plugin that owns it. Nothing in a snapshot changes after it is built (frozen
dataclasses, read-only mappings), so a reader holds one snapshot for as long as it needs.

:class:`Inventory` owns the current snapshot of a node: the publisher's discovery rounds
(through :meth:`Inventory.refresh`) replace it in one assignment, and the prepare pipeline
(``drakit.prepare.pipeline``) reads it once per kubelet call, so one call never sees two discovery
rounds.

The publisher (node) and the CLI (``drakit discover``, ``drakit slices``) share this path, so
what a user previews is exactly what a node publishes.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from drakit.host.discovery import Discovered
from drakit.host.pluginhost import PluginHost
from drakit.models import Device, DeviceKey
from drakit.publish.render import PoolSpec, pools_from_devices, render_pool

__all__ = ["Inventory", "InventorySnapshot", "build_inventory"]

_Key = tuple[str, str, str]
"""(driver, pool, device): the snapshot's own key (cheaper to hash than a ``DeviceKey``)."""


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class InventorySnapshot:
    """Everything one discovery round produced: pools to publish and who owns each device.

    Build it with :func:`build_inventory`; an empty one (no round yet) owns nothing.
    """

    pools: tuple[PoolSpec, ...] = ()
    _owners: Mapping[_Key, str] = field(default_factory=_empty, repr=False)
    _devices: Mapping[_Key, Device] = field(default_factory=_empty, repr=False)
    _by_driver: Mapping[str, tuple[DeviceKey, ...]] = field(default_factory=_empty, repr=False)
    failed: Mapping[str, str] = field(default_factory=_empty)
    """Backends whose discovery failed this round and were skipped -> the error (the node)."""

    def owner_of(self, key: DeviceKey) -> str | None:
        """The plugin that discovered a device in this round, if any."""
        return self._owners.get((key.driver, key.pool, key.device))

    def device(self, key: DeviceKey) -> Device | None:
        """A device as published in this round, if any."""
        return self._devices.get((key.driver, key.pool, key.device))

    def devices_of(self, driver: str) -> tuple[DeviceKey, ...]:
        """The devices published for ``driver`` in this round, in discovery order."""
        return self._by_driver.get(driver, ())

    def slices(self, generations: dict[tuple[str, str], int] | None = None) -> list[dict[str, Any]]:
        """Render every pool; ``generations`` maps (driver, pool) to the generation to stamp."""
        out: list[dict[str, Any]] = []
        for spec in self.pools:
            gen = (generations or {}).get((spec.driver, spec.pool), 0)
            out.extend(render_pool(spec, generation=gen))
        return out

    def devices(self) -> list[tuple[DeviceKey, str, Device]]:
        """(key, owning plugin, device as discovered) in publishing order."""
        out = []
        for spec in self.pools:
            for d in spec.devices:
                k = (spec.driver, spec.pool, d.name)
                key = DeviceKey(driver=spec.driver, pool=spec.pool, device=d.name)
                out.append((key, self._owners[k], self._devices[k]))
        return out


def _snapshot(disc: Discovered, pools: list[PoolSpec]) -> InventorySnapshot:
    owners: dict[_Key, str] = {}
    devices: dict[_Key, Device] = {}
    by_driver: dict[str, list[DeviceKey]] = {}
    for key, dev in disc.devices.items():
        k = (key.driver, key.pool, key.device)
        owners[k] = disc.owners[key]
        devices[k] = dev
        by_driver.setdefault(key.driver, []).append(key)
    return InventorySnapshot(
        pools=tuple(pools),
        _owners=MappingProxyType(owners),
        _devices=MappingProxyType(devices),
        _by_driver=MappingProxyType({d: tuple(keys) for d, keys in by_driver.items()}),
        failed=MappingProxyType(dict(disc.failed)),
    )


def build_inventory(host: PluginHost, tolerate: Collection[str] = ()) -> InventorySnapshot:
    """Discover through ``host``, order each plugin's devices by its strategy, group into pools.

    Within a driver, the devices of plugins that composed devices this round come first: the
    scheduler tries a pool's devices in order and stops at a node's first fit, so a request
    for a composed device (a GPU-NIC pair) would otherwise evaluate every member (the GPUs
    and NICs) before its first candidate (``benchmarks/README.md``, "The real kube-scheduler").

    ``tolerate``: backends whose discovery may fail; they are skipped and named in
    :attr:`InventorySnapshot.failed`.
    """
    disc = host.discover(tolerate)
    per_plugin: dict[str, list[Device]] = {}
    for key, dev in disc.devices.items():
        per_plugin.setdefault(disc.owners[key], []).append(dev)
    by_driver: dict[str, list[Device]] = {}
    for plugin in sorted(host.contexts, key=lambda p: p not in disc.composers):  # stable
        ctx = host.contexts[plugin]
        devs = per_plugin.get(plugin, [])
        ordered = host.publish_order(ctx.strategy, devs)
        by_driver.setdefault(ctx.driver_name, []).extend(ordered)
    pools: list[PoolSpec] = []
    node = host.node.name
    for driver in sorted(by_driver):
        counters = disc.counter_sets.get((driver, node), [])
        pools.extend(pools_from_devices(driver, node, by_driver[driver], counters))
    return _snapshot(disc, pools)


class Inventory:
    """The current :class:`InventorySnapshot` of one node's plugins.

    Args:
        host: the plugin host discovery runs through.
        isolate: a backend that has no device in the current snapshot (at start-up, every
            backend; later, one that never discovered anything) and whose discovery fails is
            skipped and named in the snapshot's ``failed``, so the others are still served (the
            node). A backend that had devices and then fails fails the round as before: the
            previous snapshot, with its devices, stays current.

    Reading :attr:`current` takes no lock (one attribute read); :meth:`refresh` builds the
    next snapshot outside any reader's way and swaps it in one assignment. Rounds are
    serialised among themselves.
    """

    def __init__(self, host: PluginHost, *, isolate: bool = False) -> None:
        self.host = host
        self.isolate = isolate
        self._current: InventorySnapshot | None = None
        self._round = threading.Lock()

    @property
    def current(self) -> InventorySnapshot:
        """The latest snapshot (an empty one, owning nothing, before the first round)."""
        snap = self._current
        return snap if snap is not None else _EMPTY

    @property
    def discovered(self) -> bool:
        """Whether a discovery round has completed."""
        return self._current is not None

    def refresh(self) -> InventorySnapshot:
        """Run one discovery round and make its snapshot current.

        Raises:
            DrakitError: discovery failed; the previous snapshot stays current.
        """
        with self._round:
            tolerate: frozenset[str] = frozenset()
            if self.isolate:
                owning = set(self.current._owners.values())
                tolerate = frozenset(self.host.contexts) - owning
            snap = build_inventory(self.host, tolerate)
            self._current = snap
            return snap


_EMPTY = InventorySnapshot()
