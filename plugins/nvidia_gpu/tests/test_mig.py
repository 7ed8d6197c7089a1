"""MIG instances at prepare and unprepare: created, adopted after a crash, destroyed, idempotent."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.errors import PermanentError
from drakit.models import PreparedDevice
from drakit_nvidia_gpu.sim import FakeNvml, load_nvml_description, mig_instances

Build = Callable[..., Path]
Open = Callable[..., Any]
SMALL = "gpu-0-mig-1g10gb-19-3"  # 1g.10gb (profile id 19) at memory slice 3
HALF = "gpu-0-mig-4g40gb-5-0"  # 4g.40gb (profile id 5) at slices 0-3
LAST = "gpu-0-mig-1g10gb-19-6"  # 1g.10gb at slice 6, clear of HALF


@pytest.fixture
def root(build_root: Build) -> Path:
    return build_root("dgx-h100", mig=(0,))


def gpu0(root: Path) -> str:
    return load_nvml_description(root).devices[0].uuid


def env(p: PreparedDevice) -> dict[str, str]:
    return dict(e.split("=", 1) for e in p.edits.env)


def nodes(p: PreparedDevice) -> list[str]:
    return [n.path for n in p.edits.device_nodes]


def fake_create(root: Path, profile_id: int, start: int, size: int, *, ci: bool) -> int:
    """Create an instance as another (crashed) process would have: through the fake NVML."""
    lib = FakeNvml(root)
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    where = lib.c_nvmlGpuInstancePlacement_t(start, size)
    gi = lib.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, ctypes.byref(where))
    if ci:
        lib.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    return int(lib.nvmlGpuInstanceGetInfo(gi).id)


def test_prepare_creates_the_placement_and_unprepare_destroys_it(
    root: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim(SMALL))
        [gi] = mig_instances(root)[gpu0(root)]
        assert (gi["profile_id"], gi["start"], gi["size"], len(gi["ci"])) == (19, 3, 1, 1)
        mig_uuid = p.state["mig"]["uuid"]
        assert mig_uuid.startswith("MIG-")
        assert env(p) == {"NVIDIA_VISIBLE_DEVICES": mig_uuid}
        caps = p.state["mig"]["caps"]
        assert nodes(p) == [
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            f"/dev/nvidia-caps/nvidia-cap{caps[0]}",
            f"/dev/nvidia-caps/nvidia-cap{caps[1]}",
        ]
        cap_file = root / f"proc/driver/nvidia/capabilities/gpu0/mig/gi{gi['gi']}/access"
        assert f"DeviceFileMinor: {caps[0]}" in cap_file.read_text()
        # the simulated driver made every node the claim names (the CDI check needs them)
        cap_nodes = [root / f"dev/nvidia-caps/nvidia-cap{c}" for c in caps]
        assert all(os.path.lexists(root / n.lstrip("/")) for n in nodes(p))

        host.unprepare("nvidia_gpu", "uid-1", [p])
        assert mig_instances(root)[gpu0(root)] == []
        assert not any(os.path.lexists(n) for n in cap_nodes)  # gone with the instances
        host.unprepare("nvidia_gpu", "uid-1", [p])  # already gone: still fine


def test_prepare_again_after_a_crash_adopts_the_instance(
    root: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [first] = host.prepare("nvidia_gpu", make_claim(SMALL))
    # the process died before the checkpoint was written; a new one gets the kubelet's retry
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [again] = host.prepare("nvidia_gpu", make_claim(SMALL))
    assert again.state == first.state
    assert len(mig_instances(root)[gpu0(root)]) == 1


def test_a_gpu_instance_left_without_compute_instance_is_completed(
    root: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    gi = fake_create(root, 19, 3, 1, ci=False)  # crash between the two creates
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim(SMALL))
    [rec] = mig_instances(root)[gpu0(root)]
    assert (rec["gi"], len(rec["ci"])) == (gi, 1)
    assert p.state["mig"]["gi"] == gi


def test_a_stale_overlapping_instance_held_by_no_claim_is_replaced(
    root: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    fake_create(root, 19, 2, 1, ci=True)  # a claim that was never checkpointed, slice 2
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim(HALF))
    [rec] = mig_instances(root)[gpu0(root)]
    assert (rec["profile_id"], rec["start"], rec["size"]) == (5, 0, 4)
    assert p.state["mig"]["start"] == 0


def test_an_overlapping_instance_another_claim_holds_fails_only_this_claim(
    root: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        held = host.prepare("nvidia_gpu", make_claim(SMALL, uid="a"))
        with pytest.raises(PermanentError, match="held by another claim and overlaps"):
            host.prepare("nvidia_gpu", make_claim(HALF, uid="b"), held)
        assert len(mig_instances(root)[gpu0(root)]) == 1, "the held instance survives"


def test_unprepare_after_a_restart_destroys_from_the_checkpointed_state(
    root: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        prepared = host.prepare("nvidia_gpu", make_claim(LAST, HALF))
    assert len(mig_instances(root)[gpu0(root)]) == 1 + 1
    checkpointed = [PreparedDevice.model_validate(p.model_dump(by_alias=True)) for p in prepared]
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        host.unprepare("nvidia_gpu", "uid-1", checkpointed)
    assert mig_instances(root)[gpu0(root)] == []


def test_two_mig_devices_of_one_claim_agree_on_visible_devices(
    root: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        a, b = host.prepare("nvidia_gpu", make_claim(LAST, HALF))
    both = f"{a.state['mig']['uuid']},{b.state['mig']['uuid']}"
    assert env(a)["NVIDIA_VISIBLE_DEVICES"] == env(b)["NVIDIA_VISIBLE_DEVICES"] == both


def test_overlapping_devices_of_one_claim_never_destroy_each_other(
    root: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        with pytest.raises(PermanentError, match="overlaps"):
            host.prepare("nvidia_gpu", make_claim(SMALL, HALF))
    assert len(mig_instances(root)[gpu0(root)]) == 1


def test_full_gpu_gets_its_node_the_control_nodes_and_its_uuid(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = build_root("dgx-h100")
    uuid = load_nvml_description(root).devices[3].uuid
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-3"))
    assert nodes(p) == [
        "/dev/nvidia3",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert env(p) == {"NVIDIA_VISIBLE_DEVICES": uuid}


def test_a_device_that_is_not_published_fails_with_the_known_names(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    with open_gpu_host(build_root("dgx-h100"), health_watch=False) as host:
        host.discover()
        with pytest.raises(PermanentError, match=r"'gpu-9' is not an NVIDIA device .*known: gpu-0"):
            host.prepare("nvidia_gpu", make_claim("gpu-9"))
