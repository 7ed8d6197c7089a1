"""From plugins to desired ResourceSlices: discovery, strategy ordering, rendering.

The publisher (node) and the CLI (``drakit discover``, ``drakit slices``) share this path, so
what a user previews is exactly what a node publishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drakit.models import Device, DeviceKey
from drakit.pluginhost import Discovered, PluginHost
from drakit.slices import PoolSpec, pools_from_devices, render_pool

__all__ = ["Inventory", "build_inventory"]


@dataclass
class Inventory:
    """Everything one discovery round produced, ready to publish."""

    discovered: Discovered
    pools: list[PoolSpec] = field(default_factory=list)

    def slices(self, generations: dict[tuple[str, str], int] | None = None) -> list[dict[str, Any]]:
        """Render every pool; ``generations`` maps (driver, pool) to the generation to stamp."""
        out: list[dict[str, Any]] = []
        for spec in self.pools:
            gen = (generations or {}).get((spec.driver, spec.pool), 0)
            out.extend(render_pool(spec, generation=gen))
        return out

    def devices(self) -> list[tuple[DeviceKey, str, Device]]:
        """(key, owning plugin, device) in publishing order."""
        out = []
        for spec in self.pools:
            for d in spec.devices:
                key = DeviceKey(driver=spec.driver, pool=spec.pool, device=d.name)
                out.append((key, self.discovered.owners[key], self.discovered.devices[key]))
        return out


def build_inventory(host: PluginHost) -> Inventory:
    """Discover through ``host``, order each plugin's devices by its strategy, group into pools."""
    disc = host.discover()
    per_plugin: dict[str, list[Device]] = {}
    for key, dev in disc.devices.items():
        per_plugin.setdefault(disc.owners[key], []).append(dev)
    by_driver: dict[str, list[Device]] = {}
    for plugin, ctx in host.contexts.items():
        devs = per_plugin.get(plugin, [])
        ordered = host.publish_order(ctx.strategy, devs)
        by_driver.setdefault(ctx.driver_name, []).extend(ordered)
    pools: list[PoolSpec] = []
    node = host.node.name
    for driver in sorted(by_driver):
        counters = disc.counter_sets.get((driver, node), [])
        pools.extend(pools_from_devices(driver, node, by_driver[driver], counters))
    return Inventory(discovered=disc, pools=pools)
