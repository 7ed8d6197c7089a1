"""One discovery round across all plugins: discovery, enrichment, composition, merged.

Each backend's ``drakit_discover_devices`` result is keyed by (driver, pool, device) and must
not repeat a key; ``drakit_enrich_devices`` may add attributes to anyone's devices but never
contradict the owner or another enricher; ``drakit_compose_devices`` then builds devices from
the others. :class:`Discovered` is the merged result; :mod:`drakit.host.inventory` turns it
into the snapshot a node publishes and prepares from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from drakit.errors import DrakitError, PermanentError
from drakit.models import Device, DeviceAttribute, DeviceInventory, DeviceKey, NodeInfo

__all__ = ["Discovered", "HookCaller", "discover"]

log = logging.getLogger(__name__)

HookCaller = Callable[[str, str], Callable[..., Any]]
"""(plugin, hook) -> the caller of that hook on that plugin alone."""


@dataclass
class Discovered:
    """The result of one discovery round across all plugins."""

    devices: dict[DeviceKey, Device] = field(default_factory=dict)
    owners: dict[DeviceKey, str] = field(default_factory=dict)
    counter_sets: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    """Counter sets per (driver, pool)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Plugins whose discovery failed and was tolerated (``tolerate``) -> the error."""
    composers: set[str] = field(default_factory=set)
    """Plugins whose ``drakit_compose_devices`` added devices this round."""

    def by_driver(self) -> dict[str, list[Device]]:
        """Devices grouped by driver name, in discovery order (what a backend's tests check)."""
        out: dict[str, list[Device]] = {}
        for key, dev in self.devices.items():
            out.setdefault(key.driver, []).append(dev)
        return out


def discover(
    node: NodeInfo,
    drivers: Mapping[str, str],
    registered: Sequence[str],
    only: HookCaller,
    tolerate: Collection[str] = (),
) -> Discovered:
    """Run discovery, enrichment and composition.

    Args:
        node: the node the hooks are called for.
        drivers: backend plugin name -> its DRA driver, in configuration order.
        registered: every registered plugin (backends, strategies, extras): all may enrich.
        only: the caller of one hook on one plugin.
        tolerate: backends whose failure (in discovery or composition, or an invalid result)
            is recorded in :attr:`Discovered.failed` and skipped, so the others' devices are
            still discovered (the node: a backend that cannot start must not stop the rest).

    Raises:
        PermanentError: a plugin returned something invalid (duplicate device, conflicting
            enrichment); the message names the plugin and device.
    """
    out = Discovered()
    for name, driver in drivers.items():
        with _isolated(out, name, tolerate):
            inv = only(name, "drakit_discover_devices")(node=node)
            _add_inventory(out, node, name, driver, inv, check_first=name in tolerate)
    _enrich(out, node, registered, only)
    for name, driver in drivers.items():
        if name in out.failed:
            continue
        with _isolated(out, name, tolerate):
            inv = only(name, "drakit_compose_devices")(
                node=node, devices=dict(out.devices), owners=dict(out.owners)
            )
            before = len(out.devices)
            _add_inventory(out, node, name, driver, inv, check_first=name in tolerate)
            if len(out.devices) > before:
                out.composers.add(name)
    return out


@contextmanager
def _isolated(out: Discovered, name: str, tolerate: Collection[str]) -> Iterator[None]:
    """Record a tolerated plugin's failure in ``out.failed`` instead of raising it."""
    try:
        yield
    except DrakitError as e:
        if name not in tolerate:
            raise
        out.failed[name] = str(e)
        log.error("backend %r is skipped: %s", name, e)


def _add_inventory(
    out: Discovered,
    node: NodeInfo,
    plugin: str,
    driver: str,
    result: Any,
    *,
    check_first: bool = False,
) -> None:
    """Add one plugin's result; ``check_first``: all or nothing (it is checked before adding)."""
    if check_first:
        trial = Discovered(devices=dict(out.devices), owners=dict(out.owners))
        _add_inventory(trial, node, plugin, driver, result)
    results = result if isinstance(result, list) else [result]
    for inv in results:
        if inv is None:
            continue
        if not isinstance(inv, DeviceInventory):
            raise PermanentError(
                f"plugin {plugin!r} returned {type(inv).__name__} from discovery; "
                "expected DeviceInventory"
            )
        for dev in inv.devices:
            key = DeviceKey(driver=driver, pool=dev.pool or node.name, device=dev.name)
            if key in out.devices:
                raise PermanentError(
                    f"device {key} is reported twice (by {out.owners[key]!r} and {plugin!r});"
                    " device names must be unique within a pool"
                )
            out.devices[key] = dev
            out.owners[key] = plugin
        for cs in inv.counter_sets:
            out.counter_sets.setdefault((driver, node.name), []).append(cs)


def _enrich(out: Discovered, node: NodeInfo, registered: Sequence[str], only: HookCaller) -> None:
    view = dict(out.devices)
    added: dict[DeviceKey, dict[str, tuple[str, DeviceAttribute]]] = {}
    for plugin_name in registered:
        patches = only(plugin_name, "drakit_enrich_devices")(node=node, devices=view)
        for patch in patches:
            if not patch:
                continue
            for key, attrs in patch.items():
                if key not in out.devices:
                    raise PermanentError(f"plugin {plugin_name!r} enriched unknown device {key}")
                for attr, raw in attrs.items():
                    value = DeviceAttribute.model_validate(raw)
                    own = out.devices[key].attributes.get(attr)
                    if own is not None and own != value:
                        raise PermanentError(
                            f"plugin {plugin_name!r} sets {attr}={value.value!r} on {key}, "
                            f"but its owner {out.owners[key]!r} set {own.value!r}"
                        )
                    prev = added.setdefault(key, {}).get(attr)
                    if prev is not None and prev[1] != value:
                        raise PermanentError(
                            f"plugins {prev[0]!r} and {plugin_name!r} disagree on {attr} of "
                            f"{key}: {prev[1].value!r} vs {value.value!r}"
                        )
                    added[key][attr] = (plugin_name, value)
    for key, attrs in added.items():
        out.devices[key] = out.devices[key].with_attributes({a: v for a, (_, v) in attrs.items()})
