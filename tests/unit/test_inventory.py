"""drakit.host.inventory: immutable snapshots of discovery and ownership, swapped atomically."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from drakit.errors import PermanentError
from drakit.hookspecs import hookimpl
from drakit.host.inventory import Inventory, InventorySnapshot, build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.models import Device, DeviceKey, NodeInfo
from drakit.node.fleet import load_shape

pytestmark = pytest.mark.usefixtures("clean_drakit_env")

NODE = NodeInfo(name="node-1", sysfs_root="/nonexistent")
FPGA = "fpga.example.com"


def fpga(name: str) -> DeviceKey:
    return DeviceKey(driver=FPGA, pool=NODE.name, device=name)


def host_with(count: int) -> PluginHost:
    return PluginHost(DrakitSettings(plugins={"example_fpga": {"count": count}}), NODE)


def test_a_snapshot_answers_ownership_and_cannot_change() -> None:
    snap = build_inventory(host_with(2))
    assert snap.owner_of(fpga("fpga-1")) == "example_fpga"
    assert snap.owner_of(fpga("fpga-2")) is None
    dev = snap.device(fpga("fpga-0"))
    assert dev is not None
    assert dev.name == "fpga-0"
    assert snap.devices_of(FPGA) == (fpga("fpga-0"), fpga("fpga-1"))
    assert snap.devices_of("other.example.com") == ()
    assert [(k.device, owner) for k, owner, _ in snap.devices()] == [
        ("fpga-0", "example_fpga"),
        ("fpga-1", "example_fpga"),
    ]
    with pytest.raises(AttributeError):
        snap.pools = ()  # type: ignore[misc]
    owners: Any = snap._owners  # the mapping itself must be read-only
    with pytest.raises(TypeError):
        owners[(FPGA, NODE.name, "fpga-9")] = "intruder"


def test_refresh_swaps_in_a_new_snapshot_and_leaves_the_old_one_whole() -> None:
    host = host_with(2)
    inv = Inventory(host)
    assert not inv.discovered
    assert inv.current == InventorySnapshot()
    assert inv.current.owner_of(fpga("fpga-0")) is None, "nothing is owned before discovery"
    first = inv.refresh()
    assert inv.current is first
    plugin: Any = host.backends["example_fpga"]
    plugin.count = 1  # the hardware changed: the next round sees one card
    second = inv.refresh()
    assert inv.current is second
    assert second.owner_of(fpga("fpga-1")) is None
    assert first.owner_of(fpga("fpga-1")) == "example_fpga", "a held snapshot never changes"
    assert [len(p.devices) for p in first.pools] == [2]


class Flaky:
    """A helper plugin whose enrichment (part of every discovery round) breaks on demand."""

    broken = False

    @hookimpl
    def drakit_enrich_devices(self, node: NodeInfo, devices: Mapping[DeviceKey, Device]) -> None:
        if self.broken:
            raise RuntimeError("sysfs went away")


def test_a_failed_round_keeps_the_previous_snapshot() -> None:
    flaky = Flaky()
    host = PluginHost(
        DrakitSettings(plugins={"example_fpga": {"count": 2}}), NODE, extra_plugins={"flaky": flaky}
    )
    inv = Inventory(host)
    first = inv.refresh()
    flaky.broken = True
    with pytest.raises(PermanentError, match="sysfs went away"):
        inv.refresh()
    assert inv.current is first
    assert inv.current.owner_of(fpga("fpga-1")) == "example_fpga"


def test_composed_devices_are_published_before_their_members() -> None:
    """The scheduler tries a pool's devices in order and stops at a node's first fit: a pair
    request must not evaluate the node's GPUs and NICs before its first candidate."""

    shape = load_shape("h200-8gpu-8ainic")
    [pool] = [p for p in shape.pools if p.driver == "pairs.composite.drakit.io"]
    names = [d.name for d in pool.devices]
    assert names[:8] == [f"pair-{i}" for i in range(8)]
    assert sorted(names[8:]) == sorted(
        [f"gpu-{i}" for i in range(8)] + [f"ainic-{i}" for i in range(8)]
    )
    # each member plugin's own order (its strategy's) is kept behind them
    assert names[8:16] == [f"gpu-{i}" for i in range(8)]
