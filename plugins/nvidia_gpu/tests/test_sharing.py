"""GpuConfig sharing: errors naming the field, per claim; compute modes and MPS edits applied."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.errors import ConfigInvalid, PermanentError
from drakit_nvidia_gpu.sim import FakeNvml

DRIVER = "gpu.nvidia.drakit.io"
Build = Callable[..., Path]
Open = Callable[..., Any]
API = {"apiVersion": "gpu.nvidia.drakit.io/v1alpha1", "kind": "GpuConfig"}


def compute_mode(root: Path, index: int) -> int:
    lib = FakeNvml(root)
    lib.nvmlInit()
    return lib.nvmlDeviceGetComputeMode(lib.nvmlDeviceGetHandleByIndex(index))


@pytest.mark.parametrize(
    ("sharing", "path", "says"),
    [
        (
            {"strategy": "TimeSlicing", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
            "sharing",
            "mpsConfig: only applies to strategy MPS",
        ),
        (
            {"strategy": "MPS", "timeSlicingConfig": {"interval": "Short"}},
            "sharing",
            "timeSlicingConfig: only applies to strategy TimeSlicing",
        ),
        ({"strategy": "Sometimes"}, "sharing.strategy", "TimeSlicing"),
        (
            {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}},
            "sharing.timeSlicingConfig.interval",
            "Default",
        ),
        (
            {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}},
            "sharing.mpsConfig.defaultActiveThreadPercentage",
            "greater than or equal to 1",
        ),
        (
            {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "500m"}},
            "sharing.mpsConfig",
            "defaultPinnedDeviceMemoryLimit",
        ),
        (
            {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "12 apples"}},
            "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit",
            "not a Kubernetes quantity",
        ),
        ({"strategy": "MPS", "mpsConfig": {"threads": 3}}, "sharing.mpsConfig.threads", ""),
    ],
)
def test_invalid_sharing_names_the_field(
    build_root: Build, open_gpu_host: Open, sharing: dict[str, Any], path: str, says: str
) -> None:
    with (
        open_gpu_host(build_root("dgx-h100"), health_watch=False) as host,
        pytest.raises(ConfigInvalid) as err,
    ):
        host.parse_config(DRIVER, {**API, "sharing": sharing})
    paths = [p for p, _ in err.value.errors]
    messages = " ".join(m for _, m in err.value.errors)
    assert path in paths, err.value.errors
    assert says in messages


def test_time_slicing_sets_the_default_compute_mode_and_shares_the_gpu(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = build_root("dgx-h100")
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        cfg = host.parse_config(DRIVER, {**API, "sharing": {"strategy": "TimeSlicing"}})
        lib = FakeNvml(root)
        lib.nvmlInit()
        lib.nvmlDeviceSetComputeMode(lib.nvmlDeviceGetHandleByIndex(2), 2)  # PROHIBITED
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-2", configs=(cfg,)))
    assert compute_mode(root, 2) == 0
    assert p.state["sharing"] == "TimeSlicing"
    assert p.edits.device_nodes[0].path == "/dev/nvidia2"


def test_mps_sets_exclusive_process_and_gives_the_client_environment(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = build_root("dgx-h100")
    sharing = {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 25,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
        },
    }
    with open_gpu_host(root, health_watch=False, mps_pipe_directory="/run/mps") as host:
        host.discover()
        cfg = host.parse_config(DRIVER, {**API, "sharing": sharing})
        a, b = host.prepare("nvidia_gpu", make_claim("gpu-0", "gpu-1", configs=(cfg,)))
        assert (compute_mode(root, 0), compute_mode(root, 1)) == (3, 3)
        env = dict(e.split("=", 1) for e in a.edits.env)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/mps"
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M,1=10240M"
        assert a.edits.env == b.edits.env
        assert a.edits.mounts[0].to_cdi() == {  # then the driver's files (test_driver_files)
            "hostPath": "/run/mps",
            "containerPath": "/run/mps",
            "options": ["rbind", "rw"],
        }
        assert [m for m in a.edits.mounts if m.container_path == "/run/mps"] == [a.edits.mounts[0]]
        host.unprepare("nvidia_gpu", "uid-1", [a, b])
    assert (compute_mode(root, 0), compute_mode(root, 1)) == (0, 0)


def test_a_pinned_limit_above_the_gpus_memory_fails_that_claim(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    sharing = {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "200Gi"}}
    with open_gpu_host(build_root("dgx-h100"), health_watch=False) as host:
        host.discover()
        cfg = host.parse_config(DRIVER, {**API, "sharing": sharing})
        with pytest.raises(
            PermanentError, match=r"defaultPinnedDeviceMemoryLimit 200Gi is more than"
        ):
            host.prepare("nvidia_gpu", make_claim("gpu-0", configs=(cfg,)))
        [ok] = host.prepare("nvidia_gpu", make_claim("gpu-1", uid="other"))
        assert ok.device == "gpu-1"


def test_time_slicing_on_a_mig_device_is_refused(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    with open_gpu_host(build_root("dgx-h100", mig=(0,)), health_watch=False) as host:
        host.discover()
        cfg = host.parse_config(DRIVER, {**API, "sharing": {"strategy": "TimeSlicing"}})
        with pytest.raises(PermanentError, match="TimeSlicing has no effect on a MIG device"):
            host.prepare("nvidia_gpu", make_claim("gpu-0-mig-1g10gb-19-0", configs=(cfg,)))


def test_a_non_default_interval_without_nvidia_smi_says_what_to_do(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
    with open_gpu_host(
        build_root("dgx-h100"), health_watch=False, nvidia_smi="/nonexistent/nvidia-smi"
    ) as host:
        host.discover()
        cfg = host.parse_config(DRIVER, {**API, "sharing": sharing})
        with pytest.raises(
            PermanentError, match=r"interval Long needs nvidia-smi.*use interval Default"
        ):
            host.prepare("nvidia_gpu", make_claim("gpu-0", configs=(cfg,)))


def test_a_non_default_interval_runs_nvidia_smi_compute_policy(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any], tmp_path: Path
) -> None:
    log = tmp_path / "argv"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" > {log}\n')
    smi.chmod(0o700)
    root = build_root("dgx-h100")
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}
    with open_gpu_host(root, health_watch=False, nvidia_smi=str(smi)) as host:
        host.discover()
        cfg = host.parse_config(DRIVER, {**API, "sharing": sharing})
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0", configs=(cfg,)))
    uuid = dict(e.split("=", 1) for e in p.edits.env)["NVIDIA_VISIBLE_DEVICES"]
    assert log.read_text().split() == ["compute-policy", "-i", uuid, "--set-timeslice", "1"]
