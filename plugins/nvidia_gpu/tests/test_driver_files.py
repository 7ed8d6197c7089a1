"""The driver's files in a GPU's CDI edits, for CUDA under plain CDI (``driver_files``).

The simulated root carries the driver's user space as a Debian install lays it out (stand-in
files with the real names and ldconfig's links, ``drakit_nvidia_gpu.sim.write_driver_files``);
the backend finds them through its settings exactly as on a node. What CUDA does with them is
checked on hardware only (``docs/gpu-backends.md``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.errors import RetryableError
from drakit.models import CdiEdits
from drakit_nvidia_gpu.driverfiles import CONTAINER_LIB, find_driver_files
from drakit_nvidia_gpu.sim import write_driver_files

Build = Callable[..., Path]
Open = Callable[..., Any]
VERSION = "580.126.20"  # the simulated profiles' driver
LIB = "usr/lib/x86_64-linux-gnu"


def mounts(edits: CdiEdits) -> dict[str, str]:
    """Container path -> host path."""
    return {m.container_path: m.host_path for m in edits.mounts}


def test_without_the_hook_libraries_are_mounted_under_their_link_names(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = build_root("dgx-h100")
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-1"))
    got = mounts(p.edits)
    libcuda = f"{root}/{LIB}/libcuda.so.{VERSION}"
    assert got[f"{CONTAINER_LIB}/libcuda.so.1"] == libcuda
    assert got[f"{CONTAINER_LIB}/libcuda.so"] == libcuda  # through libcuda.so.1
    assert got[f"{CONTAINER_LIB}/libcuda.so.{VERSION}"] == libcuda
    assert got[f"{CONTAINER_LIB}/libnvidia-ml.so.1"] == f"{root}/{LIB}/libnvidia-ml.so.{VERSION}"
    assert got[f"{CONTAINER_LIB}/libnvidia-nvvm.so.4"].endswith(f"libnvidia-nvvm.so.{VERSION}")
    assert got["/usr/local/nvidia/bin/nvidia-smi"] == f"{root}/usr/bin/nvidia-smi"
    assert got["/run/nvidia-persistenced/socket"] == f"{root}/run/nvidia-persistenced/socket"
    assert f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin" in got
    assert p.edits.hooks == ()
    for host_path in got.values():  # the runtime bind-mounts each: it must exist on the host
        assert os.path.lexists(host_path), host_path
    # the device nodes and NVIDIA_VISIBLE_DEVICES are as before
    assert p.edits.device_nodes[0].path == "/dev/nvidia1"
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=GPU-") for e in p.edits.env)


def test_with_the_hook_files_keep_their_paths_and_hooks_make_links_and_the_cache(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = build_root("dgx-h100")
    hook = root / "usr" / "bin" / "nvidia-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    got = mounts(p.edits)
    assert got[f"/{LIB}/libcuda.so.{VERSION}"] == f"{root}/{LIB}/libcuda.so.{VERSION}"
    assert got["/usr/bin/nvidia-smi"] == f"{root}/usr/bin/nvidia-smi"
    assert not any(c.startswith(CONTAINER_LIB) for c in got)
    links, ldcache = p.edits.hooks
    assert links.hook_name == ldcache.hook_name == "createContainer"
    assert links.path == ldcache.path == str(hook)
    assert links.args[:2] == ("nvidia-cdi-hook", "create-symlinks")
    pairs = set(links.args[3::2])
    assert f"libcuda.so.{VERSION}::/{LIB}/libcuda.so.1" in pairs
    assert f"libcuda.so.1::/{LIB}/libcuda.so" in pairs
    assert f"libnvidia-nvvm.so.{VERSION}::/{LIB}/libnvidia-nvvm.so.4" in pairs
    assert ldcache.args == ("nvidia-cdi-hook", "update-ldcache", "--folder", f"/{LIB}")


def test_a_driver_container_root_and_where_drakit_sees_it(tmp_path: Path) -> None:
    """``driver_root`` /run/nvidia/driver, mounted in drakit's pod at /driver-root."""
    seen = tmp_path / "driver-root"
    write_driver_files(seen, VERSION)
    files = find_driver_files(seen, "/run/nvidia/driver", VERSION, find_hook=False)
    got = {m.container_path: m.host_path for m in files.mounts}
    assert got[f"{CONTAINER_LIB}/libcuda.so.1"] == f"/run/nvidia/driver/{LIB}/libcuda.so.{VERSION}"
    assert files.libcuda == f"/run/nvidia/driver/{LIB}/libcuda.so.{VERSION}"


def test_only_the_running_drivers_version_is_taken(tmp_path: Path) -> None:
    write_driver_files(tmp_path, "570.1.2")  # an old driver's files left behind
    files = find_driver_files(tmp_path, str(tmp_path), VERSION, find_hook=False)
    assert files.libcuda is None
    assert files.mounts == ()
    assert files.hooks == ()
    write_driver_files(tmp_path / "new", VERSION)
    (tmp_path / "new" / LIB / "libcuda.so.570.1.2").write_text("old")
    files = find_driver_files(tmp_path / "new", "/", VERSION, find_hook=False)
    assert not any("570.1.2" in m.host_path for m in files.mounts)


def test_auto_without_libraries_gives_device_nodes_and_says_why(
    build_root: Build,
    open_gpu_host: Open,
    make_claim: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = build_root("dgx-h100")
    with (
        caplog.at_level(logging.WARNING),
        open_gpu_host(root, health_watch=False, driver_root="/opt/elsewhere") as host,
    ):
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    assert p.edits.mounts == ()
    assert "no libcuda.so.580.126.20 under driver_root /opt/elsewhere" in caplog.text
    assert "NVIDIA runtime in legacy mode" in caplog.text


def test_required_without_libraries_fails_the_claim_naming_the_setting(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = build_root("dgx-h100")
    with open_gpu_host(
        root, health_watch=False, driver_root="/opt/elsewhere", driver_files="required"
    ) as host:
        host.discover()
        with pytest.raises(RetryableError, match=r"plugins\.nvidia_gpu\.driver_files is required"):
            host.prepare("nvidia_gpu", make_claim("gpu-0"))


def test_none_leaves_the_driver_to_the_nvidia_runtime(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = build_root("dgx-h100")
    with open_gpu_host(root, health_watch=False, driver_files="none") as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    assert p.edits.mounts == ()
    assert p.edits.hooks == ()
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=GPU-") for e in p.edits.env)


def test_the_files_are_found_again_when_the_driver_changes(
    build_root: Build,
    open_gpu_host: Open,
    make_claim: Callable[..., Any],
    plugin_of: Callable[..., Any],
) -> None:
    root = build_root("dgx-h100")
    with open_gpu_host(root, health_watch=False) as host:
        host.discover()
        plugin = plugin_of(host)
        first = plugin._driver_files
        host.discover()
        assert plugin._driver_files is first  # cached while the version stays
        write_driver_files(root / "upgrade", "580.200.1")
        for path in (root / "upgrade" / LIB).iterdir():
            os.replace(path, root / LIB / path.name)
        nvml = root / "drakit-sim" / "nvml.json"
        nvml.write_text(nvml.read_text().replace(VERSION, "580.200.1"))
        plugin.nvml.lib.nvmlInit()  # the fake reads its description at init; NVML asks the driver
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    assert mounts(p.edits)[f"{CONTAINER_LIB}/libcuda.so.1"].endswith("libcuda.so.580.200.1")


def test_bad_settings_name_the_key(build_root: Build, open_gpu_host: Open) -> None:
    root = build_root("dgx-h100")
    with pytest.raises(Exception, match="cdi_hook"), open_gpu_host(root, cdi_hook="relative/hook"):
        pass
