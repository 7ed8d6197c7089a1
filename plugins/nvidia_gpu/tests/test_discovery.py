"""Discovery over the fake NVML: every attribute, MIG partitions and counters, NVML absent."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.host.inventory import build_inventory
from drakit.models import Device
from drakit.sysfs import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT
from drakit_nvidia_gpu.sim import load_nvml_description

DRIVER = "gpu.nvidia.drakit.io"
Build = Callable[..., Path]
Open = Callable[..., Any]


def gpus(host: object) -> dict[str, Device]:
    found = host.discover().by_driver()  # type: ignore[attr-defined]
    return {d.name: d for d in found.get(DRIVER, [])}


def test_every_attribute_as_nvidias_driver_publishes_it(
    build_root: Build, open_gpu_host: Open
) -> None:
    root = build_root("dgx-h100")
    desc = load_nvml_description(root)
    with open_gpu_host(root, health_watch=False) as host:
        devices = gpus(host)
    assert sorted(devices) == [f"gpu-{i}" for i in range(8)]
    for g in desc.devices:
        d = devices[f"gpu-{g.minor_number}"]
        attrs = {k: v.to_api() for k, v in d.attributes.items()}
        bdf = Path(os.path.realpath(root / "sys/bus/pci/devices" / g.pci_bus_id))
        numa = int((bdf / "numa_node").read_text())
        assert attrs == {
            "type": {"string": "gpu"},
            "uuid": {"string": g.uuid},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "580.126.20"},
            "cudaDriverVersion": {"version": "13.0.0"},
            PCI_BUS_ID: {"string": g.pci_bus_id},
            PCIE_ROOT: {"string": bdf.relative_to(root / "sys/devices").parts[0]},
            NUMA_NODE: {"int": numa},
        }
        assert "index" not in attrs
        assert "minor" not in attrs
        assert {k: v.value for k, v in d.capacity.items()} == {"memory": str(g.memory_total_bytes)}
        assert d.consumes_counters == ()


def test_mig_mode_off_publishes_only_full_gpus(build_root: Build, open_gpu_host: Open) -> None:
    with open_gpu_host(build_root("h200-8gpu-8ainic"), health_watch=False) as host:
        inv = host.discover()
    assert [d.name for d in inv.by_driver()[DRIVER]] == [f"gpu-{i}" for i in range(8)]


def test_mig_gpus_are_counter_sets_their_placements_consume(
    build_root: Build, open_gpu_host: Open
) -> None:
    root = build_root("dgx-h100", mig=(0,))
    with open_gpu_host(root, health_watch=False) as host:
        devices = gpus(host)
        plugin_sets = host.discover()
    mig = sorted(n for n in devices if n.startswith("gpu-0-mig-"))
    # 7x 1g.10gb, 4x 1g.20gb, 3x 2g.20gb, 2x 3g.40gb, 1x 4g.40gb, 1x 7g.80gb, and the seven
    # places of 1g.10gb+me (one at a time: it takes the GPU's one OFA)
    assert len(mig) == 25
    assert "gpu-0-mig-1g10gb-19-6" in mig
    assert "gpu-0-mig-7g80gb-0-0" in mig
    me = devices["gpu-0-mig-1g10gbme-20-4"]  # a device name is a DNS label: no "+"
    assert me.attributes["profile"].value == "1g.10gb+me"
    [use] = me.consumes_counters
    assert use.counters["ofa-engines"] == "1"  # of the GPU's one: two never fit together
    assert not any(n.startswith("gpu-1-mig-") for n in devices), "GPU 1 is not in MIG mode"
    assert devices["gpu-1"].consumes_counters == ()

    full = devices["gpu-0"]
    [whole] = full.consumes_counters
    assert whole.counter_set == "gpu-0-counter-set"
    sets = {cs.name: cs for cs in plugin_sets.counter_sets[(DRIVER, "gpu-node")]}
    assert list(sets) == ["gpu-0-counter-set"]
    assert sets["gpu-0-counter-set"].counters == whole.counters
    assert whole.counters["multiprocessors"] == "132"
    assert whole.counters["ofa-engines"] == "1"
    assert {f"memory-slice-{i}" for i in range(8)} <= set(whole.counters)

    small = devices["gpu-0-mig-1g10gb-19-3"]
    attrs = {k: v.value for k, v in small.attributes.items()}
    assert attrs["type"] == "mig"
    assert attrs["profile"] == "1g.10gb"
    assert attrs["parentUUID"] == full.attributes["uuid"].value
    assert "uuid" not in attrs
    assert attrs[PCI_BUS_ID] == full.attributes[PCI_BUS_ID].value
    assert {k: v.value for k, v in small.capacity.items()} == {
        "multiprocessors": "16",
        "copyEngines": "1",
        "decoders": "1",
        "encoders": "0",
        "jpegEngines": "1",
        "ofaEngines": "0",
        "memory": str(81559 // 8 * 2**20),
    }
    [use] = small.consumes_counters
    assert use.counters["memory-slice-3"] == "1"
    assert not {f"memory-slice-{i}" for i in (0, 1, 2, 4, 5, 6, 7)} & set(use.counters)


def test_overlapping_placements_share_a_memory_slice_counter(
    build_root: Build, open_gpu_host: Open
) -> None:
    with open_gpu_host(build_root("dgx-h100", mig=(0,)), health_watch=False) as host:
        devices = gpus(host)

    def slices(name: str) -> set[str]:
        [use] = devices[name].consumes_counters
        return {c for c in use.counters if c.startswith("memory-slice-")}

    assert slices("gpu-0-mig-3g40gb-9-0") & slices("gpu-0-mig-4g40gb-5-0")
    assert not slices("gpu-0-mig-3g40gb-9-4") & slices("gpu-0-mig-4g40gb-5-0")
    assert slices("gpu-0") == slices("gpu-0-mig-7g80gb-0-0")


def test_mig_partitions_off_publishes_full_gpus_without_counters(
    build_root: Build, open_gpu_host: Open
) -> None:
    with open_gpu_host(
        build_root("dgx-h100", mig=(0,)), health_watch=False, mig_partitions=False
    ) as host:
        devices = gpus(host)
    assert sorted(devices) == [f"gpu-{i}" for i in range(8)]
    assert all(d.consumes_counters == () for d in devices.values())


def test_published_slices_put_counter_sets_apart(build_root: Build, open_gpu_host: Open) -> None:
    with open_gpu_host(build_root("dgx-h100", mig=(0, 1)), health_watch=False) as host:
        slices = [s for s in build_inventory(host).slices() if s["spec"]["driver"] == DRIVER]
    counters = [s for s in slices if "sharedCounters" in s["spec"]]
    assert [c["name"] for s in counters for c in s["spec"]["sharedCounters"]] == [
        "gpu-0-counter-set",
        "gpu-1-counter-set",
    ]
    assert all("devices" not in s["spec"] for s in counters)
    assert sum(len(s["spec"].get("devices", [])) for s in slices) == 8 + 2 * 25


def test_nvml_absent_publishes_no_gpus_once_said_and_others_go_on(
    build_root: Build, open_gpu_host: Open, caplog: pytest.LogCaptureFixture
) -> None:
    root = build_root("h200-8gpu-8ainic")
    (root / "drakit-sim/nvml.json").unlink()  # no fake NVML: the real pynvml finds no driver
    caplog.set_level(logging.WARNING)
    with open_gpu_host(root, others={"cpu": {}, "amd_ainic": {}}) as host:
        first = host.discover().by_driver()
        second = host.discover().by_driver()
    assert DRIVER not in first
    assert DRIVER not in second
    assert first.get("cpu.drakit.io")
    assert first.get("ainic.amd.drakit.io")
    lines = [r.getMessage() for r in caplog.records if "NVML is not available" in r.getMessage()]
    assert len(lines) == 1
    assert "publishing no NVIDIA GPUs" in lines[0]


def test_partitions_stop_when_the_api_server_drops_consumes_counters(
    build_root: Build, open_gpu_host: Open, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    dropped: set[str] = set()
    with open_gpu_host(build_root("dgx-h100", mig=(0,)), health_watch=False) as host:
        host.dropped_fields = lambda driver: frozenset(dropped if driver == DRIVER else ())
        assert len(gpus(host)) == 8 + 25
        dropped.add("consumesCounters")
        after = gpus(host)
        assert sorted(after) == [f"gpu-{i}" for i in range(8)]
        assert all(d.consumes_counters == () for d in after.values())
        dropped.clear()  # the server keeps everything now: still off until restart (no flapping)
        assert len(gpus(host)) == 8
    said = [r for r in caplog.records if "drops consumesCounters" in r.getMessage()]
    assert len(said) == 1


def test_whole_device_counters_give_every_full_gpu_a_set_of_its_own(
    build_root: Build, open_gpu_host: Open
) -> None:
    """``whole_device_counters: true`` (off by default, the tests above): every full GPU
    consumes a counter set of its own whole, MIG mode or not, for a Kueue that charges counters
    (docs/multi-node.md, "Counters"); MIG placements still consume their GPU's set."""
    root = build_root("dgx-h100", mig=(0,))
    desc = {g.minor_number: g for g in load_nvml_description(root).devices}
    with open_gpu_host(root, health_watch=False, whole_device_counters=True) as host:
        devices = gpus(host)
        slices = [s for s in build_inventory(host).slices() if s["spec"]["driver"] == DRIVER]
    shared = {c["name"]: c["counters"] for s in slices for c in s["spec"].get("sharedCounters", [])}
    assert list(shared) == [f"gpu-{i}-counter-set" for i in range(8)]
    for i in range(8):
        [whole] = devices[f"gpu-{i}"].consumes_counters
        assert whole.counter_set == f"gpu-{i}-counter-set"
        assert {k: v["value"] for k, v in shared[whole.counter_set].items()} == whole.counters
    [gpu1] = devices["gpu-1"].consumes_counters
    assert gpu1.counters == {"memory": str(desc[1].memory_total_bytes)}, "no MIG: memory only"
    assert "memory-slice-0" in devices["gpu-0"].consumes_counters[0].counters
    [use] = devices["gpu-0-mig-1g10gb-19-3"].consumes_counters
    assert use.counter_set == "gpu-0-counter-set"
    published = [d for s in slices for d in s["spec"].get("devices", [])]
    assert len(published) == 8 + 25
    assert all(d["consumesCounters"] for d in published)
