"""The AMD GPU backend over a simulated MI300X node (sysfs, DRM nodes and KFD topology)."""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.host.inventory import build_inventory
from drakit.models import AllocatedDevice, ClaimInfo, Device
from drakit.sim import MachineSpec, PciDeviceSpec, get_profile
from drakit.sysfs import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT
from drakit.testing import SimHost, SimNode, open_host
from drakit.testing.plugin import SimNodeFactory

DRIVER = "gpu.amd.drakit.io"
NODE = "mi-node"
GPU0 = "gpu-0000-05-00-0"


def _with_mode(
    devices: tuple[PciDeviceSpec, ...], bdf: str, mode: str
) -> tuple[PciDeviceSpec, ...]:
    out = []
    for d in devices:
        files = dict(d.extra_files)
        if d.address == bdf:
            files["current_compute_partition"] = mode
        out.append(
            dataclasses.replace(d, extra_files=files, children=_with_mode(d.children, bdf, mode))
        )
    return tuple(out)


@pytest.fixture
def build(drakit_sim_node: SimNodeFactory) -> Callable[..., SimNode]:
    """``build(cpx=(bdf, ...))``: an MI300X node, those GPUs in CPX mode."""

    def make(cpx: tuple[str, ...] = ()) -> SimNode:
        spec: MachineSpec = get_profile("mi300x-8gpu-8ainic")
        for bdf in cpx:
            roots = tuple(
                dataclasses.replace(r, children=_with_mode(r.children, bdf, "CPX"))
                for r in spec.pci_roots
            )
            spec = dataclasses.replace(spec, pci_roots=roots)
        return drakit_sim_node(spec, node_name=NODE)

    return make


def host_for(node: SimNode, **settings: Any) -> SimHost:
    return open_host({"plugins": {"amd_gpu": settings}}, node)


def devices(host: SimHost) -> dict[str, Device]:
    return {d.name: d for d in host.discover().by_driver().get(DRIVER, [])}


def claim(*names: str) -> ClaimInfo:
    return ClaimInfo(
        namespace="ns",
        name="c",
        uid="u1",
        devices=tuple(
            AllocatedDevice(request=f"r{i}", driver=DRIVER, pool=NODE, device=n)
            for i, n in enumerate(names)
        ),
    )


def test_eight_mi300x_with_their_attributes(build: Callable[..., SimNode]) -> None:
    node = build()
    root = node.root
    with host_for(node) as host:
        found = devices(host)
    assert len(found) == 8
    d = found[GPU0]
    bdf = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:05:00.0"))
    assert {k: v.value for k, v in d.attributes.items()} == {
        "type": "amdgpu",
        "deviceID": "0x74a1",
        "productName": "AMD Instinct MI300X",
        "gfxTarget": "gfx942",
        "family": "CDNA3",
        "driverVersion": "6.12.12",
        "computePartition": "spx",
        "memoryPartition": "nps1",
        "partitionProfile": "spx_nps1",
        PCI_BUS_ID: "0000:05:00.0",
        PCIE_ROOT: bdf.relative_to(root / "sys/devices").parts[0],
        NUMA_NODE: 0,
    }
    assert {k: v.value for k, v in d.capacity.items()} == {
        "memory": str(192 * 2**30),
        "computeUnits": "304",
    }
    assert d.consumes_counters == ()
    assert {found[n].attributes[NUMA_NODE].value for n in found} == {0, 1}


def test_a_cpx_gpu_publishes_its_partitions_against_one_counter_set(
    build: Callable[..., SimNode],
) -> None:
    with host_for(build(cpx=("0000:05:00.0",))) as host:
        found = devices(host)
        discovered = host.discover()
    parts = sorted(n for n in found if n.startswith(f"{GPU0}-cpx-"))
    assert parts == [f"{GPU0}-cpx-{k}" for k in range(8)]
    [whole] = found[GPU0].consumes_counters
    assert whole.counters == {"xcc": "8", "memory": str(192 * 2**30)}
    [part] = found[parts[3]].consumes_counters
    assert part.counter_set == whole.counter_set
    assert part.counters == {"xcc": "1", "memory": str(24 * 2**30)}
    assert found[parts[3]].attributes["type"].value == "amdgpu-partition"
    assert found[parts[3]].capacity["computeUnits"].value == "38"
    assert [cs.name for cs in discovered.counter_sets[(DRIVER, NODE)]] == [f"{GPU0}-counters"]
    assert found["gpu-0000-2b-00-0"].consumes_counters == (), "the other GPUs stay SPX"


def test_partitions_keep_their_names_while_amdgpu_refuses_the_mode_file(
    build: Callable[..., SimNode],
) -> None:
    """During a reset amdgpu refuses the mode files (or says UNKNOWN): KFD's nodes tell."""
    node = build(cpx=("0000:05:00.0",))
    pci = Path(os.path.realpath(node.root / "sys/bus/pci/devices/0000:05:00.0"))
    with host_for(node) as host:
        before = devices(host)
        (pci / "current_compute_partition").write_text("UNKNOWN\n")
        assert devices(host).keys() == before.keys()
        (pci / "current_compute_partition").unlink()  # unreadable
        (pci / "current_memory_partition").unlink()
        during = devices(host)
    assert during.keys() == before.keys(), "partition devices renamed"
    attrs = {k: v.value for k, v in during[GPU0].attributes.items()}
    assert attrs["computePartition"] == "cpx"
    assert "memoryPartition" not in attrs
    assert "partitionProfile" not in attrs


def test_partitions_off_publishes_whole_gpus_only(build: Callable[..., SimNode]) -> None:
    with host_for(build(cpx=("0000:05:00.0",)), partitions=False) as host:
        assert len(devices(host)) == 8


def test_prepare_gives_kfd_and_the_allocated_render_nodes(build: Callable[..., SimNode]) -> None:
    node = build(cpx=("0000:05:00.0",))
    root = node.root
    with host_for(node) as host:
        host.discover()
        whole, part = host.prepare("amd_gpu", claim("gpu-0000-2b-00-0", f"{GPU0}-cpx-1"))
    assert [n.path for n in whole.edits.device_nodes] == [
        "/dev/kfd",
        "/dev/dri/card2",
        "/dev/dri/renderD129",
    ]
    # XCP 1 of GPU 0 is the first amdgpu_xcp platform device: card 9, renderD136
    assert [n.path for n in part.edits.device_nodes] == [
        "/dev/kfd",
        "/dev/dri/card9",
        "/dev/dri/renderD136",
    ]
    assert (root / "sys/class/drm/renderD136").exists()


def test_uncorrectable_ras_errors_make_the_gpu_unhealthy_and_tainted(
    build: Callable[..., SimNode],
) -> None:
    node = build()
    root = node.root
    with host_for(node, taint_effect="NoExecute") as host:
        host.discover()
        assert {h.health for h in host.health()["amd_gpu"]} == {"Healthy"}
        pci = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:05:00.0"))
        (pci / "ras/umc_err_count").write_text("ue: 3\nce: 10\n")
        report = {h.device: h for h in host.health()["amd_gpu"]}
        assert report[GPU0].health == "Unhealthy"
        assert report[GPU0].message == "uncorrectable RAS errors: umc 3"
        assert report["gpu-0000-2b-00-0"].health == "Healthy"
        taints = [(t.key, t.value, t.effect) for t in devices(host)[GPU0].taints]
        assert taints == [("gpu.amd.drakit.io/unhealthy", "ras", "NoExecute")]
        (pci / "ras/umc_err_count").write_text("ue: 0\nce: 10\n")
        assert {h.health for h in host.health()["amd_gpu"]} == {"Healthy"}
        assert devices(host)[GPU0].taints == ()
        # while amdgpu recovers the GPU its counters answer no count: not taken as healthy
        (pci / "ras/umc_err_count").write_text("Query currently inaccessible\n")
        report = {h.device: h for h in host.health()["amd_gpu"]}
        assert report[GPU0].health == "Unhealthy"
        assert report[GPU0].message.startswith("RAS error counts unreadable: umc ")
        assert [t.value for t in devices(host)[GPU0].taints] == ["ras"]
        (pci / "ras/umc_err_count").write_text("ue: 0\nce: 10\nde: 0\n")
        assert {h.health for h in host.health()["amd_gpu"]} == {"Healthy"}


def test_a_gpu_missing_from_kfd_is_unhealthy(build: Callable[..., SimNode]) -> None:
    node = build()
    nodes = node.root / "sys/class/kfd/kfd/topology/nodes"
    shutil.rmtree(nodes / "2")  # node 2 is the first GPU (nodes 0 and 1 are the CPUs)
    with host_for(node) as host:
        found = devices(host)
        report = {h.device: h for h in host.health()["amd_gpu"]}
    assert report[GPU0].health == "Unhealthy"
    assert "missing from the KFD topology" in report[GPU0].message
    assert [t.value for t in found[GPU0].taints] == ["kfd"]


def test_kfd_nodes_the_kernel_refuses_say_how_to_fix_it(
    build: Callable[..., SimNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    """amdkfd answers a GPU node's properties with EPERM outside the GPU's device cgroup."""
    node = build()
    refused = node.root / "sys/class/kfd/kfd/topology/nodes/2/properties"  # the first GPU
    read_text = Path.read_text

    def kernel(path: Path, *args: Any, **kwargs: Any) -> str:
        if path == refused:
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", kernel)
    with host_for(node) as host:
        found = devices(host)
        report = {h.device: h for h in host.health()["amd_gpu"]}
    assert report[GPU0].health == "Unhealthy"
    assert "refused this process 1 GPU node(s) (EPERM)" in report[GPU0].message
    assert "privileged" in report[GPU0].message
    assert [t.value for t in found[GPU0].taints] == ["kfd"]
    others = [h for d, h in report.items() if d.startswith("gpu-") and d != GPU0]
    assert len(others) == 7
    assert {h.health for h in others} == {"Healthy"}


def test_partitions_stop_when_the_api_server_drops_consumes_counters(
    build: Callable[..., SimNode],
) -> None:
    with host_for(build(cpx=("0000:05:00.0",))) as host:
        assert len(devices(host)) == 8 + 8
        host.host.dropped_fields = lambda driver: frozenset({"consumesCounters"})
        found = devices(host)
    assert len(found) == 8
    assert all(d.consumes_counters == () for d in found.values())


def test_whole_device_counters_give_every_full_gpu_a_set_of_its_own(
    build: Callable[..., SimNode],
) -> None:
    """``whole_device_counters: true`` (off by default, the tests above): every full GPU
    consumes a counter set of its own whole, partitioned or not, for a Kueue that charges
    counters (docs/multi-node.md, "Counters"); a partition still consumes its GPU's set."""
    with host_for(build(cpx=("0000:05:00.0",)), whole_device_counters=True) as host:
        found = devices(host)
        slices = [s for s in build_inventory(host.host).slices() if s["spec"]["driver"] == DRIVER]
    shared = {c["name"]: c for s in slices for c in s["spec"].get("sharedCounters", [])}
    whole = [n for n in found if found[n].attributes["type"].value == "amdgpu"]
    assert len(whole) == 8
    assert sorted(shared) == sorted(f"{n}-counters" for n in whole)
    for name in whole:
        [use] = found[name].consumes_counters
        assert use.counter_set == f"{name}-counters"
        assert use.counters == {"xcc": "8", "memory": str(192 * 2**30)}
        counters = shared[use.counter_set]["counters"]
        assert {k: v["value"] for k, v in counters.items()} == use.counters
    [part] = found[f"{GPU0}-cpx-3"].consumes_counters
    assert part.counter_set == f"{GPU0}-counters"

    with host_for(build(), whole_device_counters=True) as host:
        host.host.dropped_fields = lambda driver: frozenset({"consumesCounters"})
        after = devices(host)
    assert len(after) == 8
    assert all(d.consumes_counters == () for d in after.values()), "the server drops them"
