"""XID health: the watcher thread sees injected XIDs; Unhealthy, taint, recovery."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drakit.host.pluginhost import PluginHost
from drakit.models import DeviceHealth
from drakit_nvidia_gpu.sim import inject_gpu_lost, inject_xid, load_nvml_description, recover_gpu

DRIVER = "gpu.nvidia.drakit.io"
Build = Callable[..., Path]
Open = Callable[..., Any]


def health(host: PluginHost) -> dict[str, DeviceHealth]:
    return {h.device: h for h in host.health()["nvidia_gpu"]}


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def taints(host: PluginHost) -> dict[str, list[tuple[str, str, str]]]:
    return {
        d.name: [(t.key, t.value, t.effect) for t in d.taints]
        for d in host.discover().by_driver()[DRIVER]
    }


def test_a_critical_xid_makes_the_gpu_unhealthy_and_tainted_until_it_clears(
    build_root: Build, open_gpu_host: Open
) -> None:
    root = build_root("dgx-h100", mig=(1,))
    uuid = load_nvml_description(root).devices[1].uuid
    with open_gpu_host(root, taint_effect="NoExecute", health_clear_after=1.5) as host:
        host.discover()  # registers for events and starts the watcher
        assert {h.health for h in health(host).values()} == {"Healthy"}
        inject_xid(root, uuid, 79)
        wait_for(lambda: health(host)["gpu-1"].health == "Unhealthy")
        report = health(host)
        assert report["gpu-1"].message == "XID 79: GPU has fallen off the bus"
        mig = [n for n in report if n.startswith("gpu-1-mig-")]
        assert mig
        assert all(report[n].health == "Unhealthy" for n in mig), "its MIG devices too"
        assert report["gpu-0"].health == "Healthy"
        now = taints(host)
        assert now["gpu-1"] == [("gpu.nvidia.drakit.io/xid", "79", "NoExecute")]
        assert now[mig[0]] == now["gpu-1"]
        assert now["gpu-0"] == []
        wait_for(lambda: health(host)["gpu-1"].health == "Healthy")
        assert taints(host)["gpu-1"] == []


def test_application_xids_are_ignored_and_the_list_is_configurable(
    build_root: Build, open_gpu_host: Open
) -> None:
    root = build_root("dgx-h100")
    uuids = [g.uuid for g in load_nvml_description(root).devices]
    with open_gpu_host(root, ignored_xids=[13, 94]) as host:
        host.discover()
        inject_xid(root, uuids[0], 13)
        inject_xid(root, uuids[0], 94)
        inject_xid(root, uuids[2], 48)  # a marker: once it shows, the ones before were seen
        wait_for(lambda: health(host)["gpu-2"].health == "Unhealthy")
        assert health(host)["gpu-0"].health == "Healthy"
        assert health(host)["gpu-2"].message == "XID 48: double-bit ECC error"
        assert taints(host)["gpu-2"] == [("gpu.nvidia.drakit.io/xid", "48", "NoSchedule")]


def test_a_gpu_that_falls_off_the_bus_is_unhealthy_until_nvml_sees_it_again(
    build_root: Build, open_gpu_host: Open
) -> None:
    root = build_root("dgx-h100")
    uuid = load_nvml_description(root).devices[5].uuid
    with open_gpu_host(root) as host:
        host.discover()
        inject_gpu_lost(root, uuid)
        wait_for(lambda: health(host)["gpu-5"].health == "Unhealthy")
        assert health(host)["gpu-5"].message == "GPU has fallen off the bus"
        assert [h.device for h in health(host).values() if h.health != "Healthy"] == ["gpu-5"]
        lost = taints(host)  # the lost GPU stays published, tainted
        assert lost["gpu-5"] == [("gpu.nvidia.drakit.io/gpu-lost", "true", "NoSchedule")]
        recover_gpu(root, uuid)
        wait_for(lambda: health(host)["gpu-5"].health == "Healthy")
        assert taints(host)["gpu-5"] == []


def test_a_gpu_lost_later_keeps_its_own_data_when_an_earlier_one_was_never_read(
    build_root: Build, open_gpu_host: Open
) -> None:
    """What a lost GPU keeps is what was read at its NVML index, whatever was left out before."""
    root = build_root("dgx-h100")
    gpus = load_nvml_description(root).devices
    inject_gpu_lost(root, gpus[2].uuid)  # lost before the first round: never read
    with open_gpu_host(root, health_watch=False) as host:

        def published() -> dict[str, Any]:
            devs = host.discover().devices
            return {k.device: d.attributes["uuid"].value for k, d in devs.items()}

        first = published()
        assert "gpu-2" not in first
        assert first["gpu-5"] == gpus[5].uuid
        inject_gpu_lost(root, gpus[5].uuid)
        assert published() == first, "a lost GPU took another GPU's data, or vanished"


def test_without_health_watch_no_health_is_reported(build_root: Build, open_gpu_host: Open) -> None:
    with open_gpu_host(build_root("dgx-h100"), health_watch=False) as host:
        host.discover()
        assert host.health().get("nvidia_gpu", []) == []
