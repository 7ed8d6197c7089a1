"""What discovery publishes does not depend on how fast it gets there.

Discovery reads VFs straight from their directories and keeps what cannot change across rounds,
and builds devices from validated parts. These tests hold that to the long way: every VF read
through :func:`drakit.sysfs.read_pci_function` and :func:`read_function`, every device validated
whole by pydantic, and the rendered ResourceSlices of a first round, a second round and a fresh
plugin byte for byte the same.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.host.discovery import Discovered
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import fast_tmp
from drakit.models import Device, NodeInfo
from drakit.publish.render import render_slices
from drakit.sim import SysfsBuilder, build_profile, get_profile
from drakit.sysfs import read_pci_function
from drakit_amd_ainic.discovery import SysfsCache, read_ainics, read_function, read_vf, read_vfs
from drakit_amd_ainic.sim import ainic_machine

DRIVER = "ainic.amd.drakit.io"
NUMA = "resource.kubernetes.io/numaNode"
TREES = (  # the AINIC profiles with VFs, and a small machine of the benchmark's kind
    "mi300x-8gpu-8ainic-16vf",
    "h200-8gpu-8ainic-sriov",
    "h200-8gpu-8ainic",
    "3x8",
)
MODES: dict[str, dict[str, Any]] = {
    "vf": {"default_mode": "vf"},
    "pf": {"default_mode": "pf"},
    "shared": {"default_mode": "shared"},
    "mixed": {
        "default_mode": "vf",
        "nics": [
            {"select": {"pf_names": ["enp24s0", "enp17s0"]}, "mode": "shared"},
            {"select": {"if_names": ["enp64*", "enp25*"]}, "mode": "pf"},
        ],
        "rails": {"enp79s0": 3, "enp17s0": 1},
        "fabric": "fab-a",
    },
}


@pytest.fixture(scope="module")
def trees() -> Iterator[dict[str, Path]]:
    with tempfile.TemporaryDirectory(prefix="drakit-ainic-pools-", dir=fast_tmp()) as tmp:
        out = {name: build_profile(name, Path(tmp) / name) for name in TREES if name != "3x8"}
        spec = ainic_machine("3x8", get_profile("minimal-1s").cpu, pfs=3, vfs=8)
        out["3x8"] = SysfsBuilder(spec).build(Path(tmp) / "3x8")
        yield out


def _host(root: Path, mode: str, state: Path) -> PluginHost:
    cfg = {**MODES[mode]}
    return PluginHost(
        DrakitSettings(plugins={"amd_ainic": cfg}), NodeInfo(name="n1", sysfs_root=str(root))
    )


def _rendered(found: Discovered) -> str:
    devices = list(found.devices.values())
    sets = [cs for group in found.counter_sets.values() for cs in group]
    return json.dumps(render_slices(DRIVER, "n1", devices, sets))


@pytest.mark.parametrize("tree", TREES)
def test_functions_read_from_their_directories_equal_the_long_way(
    trees: dict[str, Path], tree: str
) -> None:
    root = trees[tree]
    cache = SysfsCache()
    nics = read_ainics(root, cache)
    assert nics
    assert read_ainics(root, cache) == nics, "a round from the cache"
    for nic in nics:
        long_way = read_pci_function(root, nic.pf.bdf)
        assert long_way is not None
        assert nic.pf == read_function(root / "sys", long_way)
        slow = tuple(
            fn for i, bdf in nic.vf_addresses.items() if (fn := read_vf(root, nic, i, bdf))
        )
        assert len(slow) == len(nic.vf_addresses)
        assert read_vfs(root, nic, cache=cache) == slow, "first round"
        assert read_vfs(root, nic, cache=cache) == slow, "a round from the cache"


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("tree", TREES)
def test_published_devices_and_slices_are_those_of_the_long_way(
    trees: dict[str, Path], tree: str, mode: str, tmp_path: Path
) -> None:
    host = _host(trees[tree], mode, tmp_path)
    first = host.discover()
    if mode in ("vf", "mixed") and tree != "h200-8gpu-8ainic":
        assert any("-vf-" in k.device for k in first.devices), "VFs published"
    for dev in first.devices.values():
        whole = Device.model_validate(dev.model_dump(by_alias=True))
        assert dev == whole
    text = _rendered(first)
    assert _rendered(host.discover()) == text, "a round of the running plugin"
    assert _rendered(_host(trees[tree], mode, tmp_path).discover()) == text, "a fresh plugin"


@pytest.mark.parametrize("tree", ["mi300x-8gpu-8ainic-16vf", "3x8"])
def test_every_vf_device_says_what_the_long_way_reads(
    trees: dict[str, Path], tree: str, tmp_path: Path
) -> None:
    root = trees[tree]
    devices = {k.device: d for k, d in _host(root, "vf", tmp_path).discover().devices.items()}
    seen = 0
    for nic in read_ainics(root):
        for i, bdf in nic.vf_addresses.items():
            fn = read_vf(root, nic, i, bdf)
            assert fn is not None
            dev = devices[f"{nic.name}-vf-{i}"]
            got = {k: a.value for k, a in dev.attributes.items()}
            assert got == {
                "type": "vf",
                "model": nic.model,
                "pciVendorID": f"{fn.pci.vendor:04x}",
                "pciDeviceID": f"{fn.pci.device:04x}",
                "rdma": fn.rdma_device is not None,
                "pfName": nic.pf.ifname,
                "resource.kubernetes.io/pciBusID": bdf,
                "resource.kubernetes.io/pcieRoot": nic.pf.pci.chain[0],
                **({} if fn.pci.numa_node is None else {NUMA: fn.pci.numa_node}),
                "kernelDriver": fn.pci.driver,
                "ifName": fn.ifname,
                "mac": fn.mac,
                "mtu": fn.mtu,
                "linkSpeedGbps": (fn.speed_mbps or 0) // 1000,
                "rdmaDevice": fn.rdma_device,
                "firmwareVersion": fn.fw_version,
                "vfIndex": i,
                "pfPciAddress": nic.pf.bdf,
            }
            assert {k: c.value for k, c in dev.capacity.items()} == {
                "queues": str(fn.queues),
                "bandwidth": str((fn.speed_mbps or 0) // 1000),
            }
            seen += 1
    assert seen == len(devices) > 0


def test_the_fallbacks_of_the_fast_path_equal_the_long_way(tmp_path: Path) -> None:
    """Where a shortcut has nothing to go on, the VF is read as the long way reads it.

    No PF has ``sriov_vf_device`` (VF device ids read per VF), one VF's netdev has no readable
    ``address`` (its directory is looked for instead), another's class/net link is left
    behind by a netdev gone from the function (not its netdev), and a third VF is bound to
    another driver than its PF (not in the listing of the PF's driver: its own link says).
    """
    spec = ainic_machine("3x8", get_profile("minimal-1s").cpu, pfs=3, vfs=8)
    root = SysfsBuilder(spec).build(tmp_path / "3x8")
    nics = read_ainics(root)
    for nic in nics:
        (nic.pf.dir / "sriov_vf_device").unlink()
    first, second = (read_vf(root, nics[0], i, nics[0].vf_addresses[i]) for i in (1, 2))
    assert first is not None
    assert second is not None
    assert first.ifname
    assert second.ifname
    (first.dir / "net" / first.ifname / "address").unlink()
    gone = second.dir / "net" / second.ifname
    gone.rename(tmp_path / "moved")  # its class/net link now points at nothing
    rebound = nics[1].vf_addresses[3]  # ionic -> vfio-pci, as the driver core rebinds
    drivers = root / "sys" / "bus" / "pci" / "drivers"
    (drivers / "vfio-pci").mkdir()
    os.symlink(os.readlink(drivers / "ionic" / rebound), drivers / "vfio-pci" / rebound)
    (drivers / "ionic" / rebound).unlink()
    link = nics[1].pf.dir.with_name(rebound) / "driver"
    link.unlink()
    link.symlink_to(os.path.relpath(drivers / "vfio-pci", link.parent))
    cache = SysfsCache()
    for nic in read_ainics(root, cache):
        slow = tuple(
            fn for i, bdf in nic.vf_addresses.items() if (fn := read_vf(root, nic, i, bdf))
        )
        assert read_vfs(root, nic, cache=cache) == slow
        for vf in slow:  # read from its directory, not handed to the long way
            assert cache.fixed(vf.bdf, os.lstat(vf.dir).st_ino) is not None, vf.bdf
    vf1, vf2 = (fn for fn in read_vfs(root, nics[0]) if fn.vf_index in (1, 2))
    assert (vf1.ifname, vf1.mac) == (first.ifname, None)
    assert (vf2.ifname, vf2.queues) == (None, 0)
    drivers_of = {fn.vf_index: fn.pci.driver for fn in read_vfs(root, nics[1])}
    assert drivers_of == {i: "vfio-pci" if i == 3 else "ionic" for i in range(8)}


@pytest.mark.parametrize("mode", ["pf", "shared", "mixed"])
def test_whole_device_counters_give_every_whole_nic_a_set_of_its_own(
    trees: dict[str, Path], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Off (the default) a standalone NIC consumes no counters; ``whole_device_counters: true``
    makes every published PF (pf and shared modes, not VFs) a counter set it consumes whole (its
    bandwidth), for a Kueue that charges counters (docs/multi-node.md). Where the API server
    drops ``consumesCounters`` the backend says so once and publishes without them, and stays
    so until restart (no flapping)."""
    root = trees["h200-8gpu-8ainic-sriov"]

    def host(on: bool) -> PluginHost:
        cfg = {**MODES[mode], "whole_device_counters": on}
        return PluginHost(
            DrakitSettings(plugins={"amd_ainic": cfg}), NodeInfo(name="n1", sysfs_root=str(root))
        )

    off = host(on=False).discover()
    assert all(not d.consumes_counters for d in off.devices.values())
    assert not any(off.counter_sets.values())

    h = host(on=True)
    found = h.discover()
    assert {k.device for k in found.devices} == {k.device for k in off.devices}
    rendered = json.loads(_rendered(found))
    shared = {c["name"]: c for s in rendered for c in s["spec"].get("sharedCounters", [])}
    consuming = {d["name"]: d for s in rendered for d in s["spec"].get("devices", [])}
    consuming = {n: d for n, d in consuming.items() if d.get("consumesCounters")}
    assert sorted(shared) == sorted(f"{n}-counter-set" for n in consuming)
    for name, dev in consuming.items():
        [use] = dev["consumesCounters"]
        assert use["counterSet"] == f"{name}-counter-set"
        assert use["counters"] == shared[use["counterSet"]]["counters"]
        assert set(use["counters"]) <= {"bandwidth", "nic"}, use
    vfs = {k.device for k, d in found.devices.items() if d.attributes["type"].string == "vf"}
    assert set(consuming) == {k.device for k in found.devices} - vfs, "every PF, no VF"
    assert len(consuming) == {"pf": 8, "shared": 8, "mixed": 2}[mode], sorted(consuming)

    dropped: set[str] = {"consumesCounters"}
    h.dropped_fields = lambda driver: frozenset(dropped if driver == DRIVER else ())
    caplog.set_level("WARNING")
    after = h.discover()
    assert all(not d.consumes_counters for d in after.devices.values())
    assert not any(after.counter_sets.values())
    dropped.clear()
    assert not any(h.discover().counter_sets.values()), "off until restart"
    said = [r for r in caplog.records if "drops consumesCounters" in r.getMessage()]
    assert len(said) == 1
