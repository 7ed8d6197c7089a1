"""Driver files from the NVIDIA container toolkit (``driver_files: toolkit`` and ``auto``).

Run against the real ``nvidia-ctk`` (v1.20.2, built by ``hack/nvidia-ctk/build.sh``): its
``management`` mode finds the driver's files by their names and needs no NVML, so it runs
against the simulated root's driver files and device nodes exactly as on a node. Where a test
needs the toolkit to fail (exit non-zero, hang), a two-line shell script stands in for a broken
install; nothing stands in for the toolkit's output.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.errors import RetryableError
from drakit.models import CdiEdits
from drakit_nvidia_gpu.driverfiles import CONTAINER_LIB
from drakit_nvidia_gpu.settings import NvidiaGpuSettings
from drakit_nvidia_gpu.sim import write_driver_files
from drakit_nvidia_gpu.toolkit import CACHE_FILE, ToolkitError, ToolkitSpec, _parse

Build = Callable[..., Path]
Open = Callable[..., Any]
VERSION = "580.126.20"  # the simulated profiles' driver
LIB = "usr/lib/x86_64-linux-gnu"


def mounts(edits: CdiEdits) -> dict[str, str]:
    """Container path -> host path."""
    return {m.container_path: m.host_path for m in edits.mounts}


def hook_verbs(edits: CdiEdits) -> list[str]:
    return [h.args[1] for h in edits.hooks]


@pytest.fixture
def gpu_root(build_root: Build, nvidia_ctk_bin: Path) -> Path:
    """A simulated DGX H100 with real character device nodes and nvidia-cdi-hook installed."""
    root = build_root("dgx-h100")
    if not stat.S_ISCHR(os.stat(root / "dev" / "nvidiactl").st_mode):
        pytest.skip("the simulated device nodes are regular files (no CAP_MKNOD here)")
    shutil.copy2(nvidia_ctk_bin / "nvidia-cdi-hook", root / "usr" / "bin" / "nvidia-cdi-hook")
    return root


def ctk_copy(nvidia_ctk_bin: Path, where: Path) -> Path:
    """A copy of the real nvidia-ctk at ``where`` (a test may break it later)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(nvidia_ctk_bin / "nvidia-ctk", where)
    return where


def broken_ctk(where: Path, body: str) -> Path:
    where.parent.mkdir(parents=True, exist_ok=True)
    where.unlink(missing_ok=True)
    where.write_text(f"#!/bin/sh\n{body}\n")
    where.chmod(0o755)
    return where


def cache_path(root: Path) -> Path:
    return root / "var" / "lib" / "drakit" / "plugin_state" / "nvidia_gpu" / CACHE_FILE


def test_the_toolkits_common_edits_replace_drakits_own(
    gpu_root: Path, nvidia_ctk_bin: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = gpu_root
    ctk = nvidia_ctk_bin / "nvidia-ctk"
    with open_gpu_host(
        root, health_watch=False, driver_files="toolkit", nvidia_ctk=str(ctk)
    ) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    got = mounts(p.edits)
    # the toolkit's layout: files at their own paths, the hooks make links and the cache
    assert got[f"/{LIB}/libcuda.so.{VERSION}"] == f"{root}/{LIB}/libcuda.so.{VERSION}"
    assert got["/usr/bin/nvidia-smi"] == f"{root}/usr/bin/nvidia-smi"
    assert got["/run/nvidia-persistenced/socket"] == f"{root}/run/nvidia-persistenced/socket"
    assert f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin" in got
    assert not any(c.startswith(CONTAINER_LIB) for c in got)
    # the toolkit's legacy device selection stays out
    assert not any(c.startswith("/var/run/nvidia-container-devices") for c in got)
    assert "NVIDIA_VISIBLE_DEVICES=void" not in p.edits.env
    assert f"NVIDIA_CTK_LIBCUDA_DIR=/{LIB}" in p.edits.env
    verbs = hook_verbs(p.edits)
    assert {"create-symlinks", "update-ldcache", "enable-cuda-compat"} <= set(verbs)
    hook = f"{root}/usr/bin/nvidia-cdi-hook"
    assert {h.path for h in p.edits.hooks} == {hook}
    [ldcache] = [h for h in p.edits.hooks if h.args[1] == "update-ldcache"]
    assert ldcache.args[2:] == ("--folder", f"/{LIB}")
    [links] = [h for h in p.edits.hooks if h.args[1] == "create-symlinks"]
    assert "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so" in links.args
    # drakit's own device nodes and visible devices, the source in the device's state
    assert p.edits.device_nodes[0].path == "/dev/nvidia0"
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=GPU-") for e in p.edits.env)
    assert p.state["driver_files"] == f"toolkit {VERSION}"
    for host_path in got.values():
        assert os.path.lexists(host_path), host_path
    # cached in the plugin's state directory, private
    cache = cache_path(root)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert json.loads(cache.read_text())["data"]["key"]["driver_version"] == VERSION


def test_auto_prefers_the_toolkit_and_falls_back_to_own_discovery(
    gpu_root: Path,
    nvidia_ctk_bin: Path,
    open_gpu_host: Open,
    make_claim: Callable[..., Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = gpu_root
    ctk = ctk_copy(nvidia_ctk_bin, root / "usr" / "bin" / "nvidia-ctk")  # found under the root
    with open_gpu_host(root, health_watch=False) as host:  # auto, nvidia_ctk auto
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    assert p.state["driver_files"] == f"toolkit {VERSION}"
    assert "enable-cuda-compat" in hook_verbs(p.edits)
    # a toolkit that fails: auto says why and uses drakit's own discovery
    broken_ctk(ctk, "echo 'level=error msg=\"no luck\"' >&2; exit 3")
    cache_path(root).unlink()
    with caplog.at_level(logging.WARNING), open_gpu_host(root, health_watch=False) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    assert p.state["driver_files"] == f"own {VERSION}"
    assert "exited 3" in caplog.text
    assert "no luck" in caplog.text
    assert "using drakit's own discovery" in caplog.text
    # no toolkit at all: own discovery, quietly
    ctk.unlink()
    with open_gpu_host(root, health_watch=False, cdi_hook="none") as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    assert f"{CONTAINER_LIB}/libcuda.so.1" in mounts(p.edits)
    assert p.state["driver_files"] == f"own {VERSION}"


def test_the_cache_serves_a_restart_and_the_driver_change_runs_the_toolkit_again(
    gpu_root: Path,
    nvidia_ctk_bin: Path,
    open_gpu_host: Open,
    make_claim: Callable[..., Any],
    plugin_of: Callable[..., Any],
    tmp_path: Path,
) -> None:
    root = gpu_root
    ctk = ctk_copy(nvidia_ctk_bin, tmp_path / "bin" / "nvidia-ctk")
    settings = {"health_watch": False, "driver_files": "toolkit", "nvidia_ctk": str(ctk)}
    with open_gpu_host(root, **settings) as host:
        host.discover()
        [first] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    # restarted with a toolkit that would fail: the cached spec is used, nothing is run
    broken_ctk(ctk, "exit 7")
    with open_gpu_host(root, **settings) as host:
        host.discover()
        [again] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    assert again.edits == first.edits
    # the driver changes: the toolkit runs again (and here fails, retryably, naming it)
    write_driver_files(root / "upgrade", "580.200.1")
    for path in (root / "upgrade" / LIB).iterdir():
        os.replace(path, root / LIB / path.name)
    for path in (root / LIB).glob(f"*.so.{VERSION}"):
        path.unlink()
    nvml = root / "drakit-sim" / "nvml.json"
    nvml.write_text(nvml.read_text().replace(VERSION, "580.200.1"))
    with open_gpu_host(root, **settings) as host:
        host.discover()
        with pytest.raises(RetryableError, match=r"plugins\.nvidia_gpu: .*exited 7"):
            host.prepare("nvidia_gpu", make_claim("gpu-0"))
        ctk_copy(nvidia_ctk_bin, ctk)  # fixed: the next discovery round tries again
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    assert f"/{LIB}/libcuda.so.580.200.1" in mounts(p.edits)
    assert json.loads(cache_path(root).read_text())["data"]["key"]["driver_version"] == (
        "580.200.1"
    )


def test_a_driver_container_root_seen_elsewhere(
    gpu_root: Path, nvidia_ctk_bin: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    """driver_root /run/nvidia/driver, seen at /driver-root: host paths are the host's."""
    root = gpu_root
    seen = root / "driver-root"
    write_driver_files(seen, VERSION)
    shutil.copy2(nvidia_ctk_bin / "nvidia-cdi-hook", seen / "usr" / "bin" / "nvidia-cdi-hook")
    with open_gpu_host(
        root,
        health_watch=False,
        driver_files="toolkit",
        nvidia_ctk=str(nvidia_ctk_bin / "nvidia-ctk"),
        driver_root="/run/nvidia/driver",
        driver_root_seen="/driver-root",
        toolkit_dev_root="/",
    ) as host:
        host.discover()
        [p] = host.prepare("nvidia_gpu", make_claim("gpu-0"))
    host_root = f"{root}/run/nvidia/driver"
    assert mounts(p.edits)[f"/{LIB}/libcuda.so.{VERSION}"] == (
        f"{host_root}/{LIB}/libcuda.so.{VERSION}"
    )
    assert all(m.host_path.startswith(host_root + "/") for m in p.edits.mounts)
    assert {h.path for h in p.edits.hooks} == {f"{host_root}/usr/bin/nvidia-cdi-hook"}


def test_another_drivers_files_are_refused_naming_both_versions(
    gpu_root: Path, nvidia_ctk_bin: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = gpu_root
    old = root / "old-driver"
    write_driver_files(old, "570.1.2")
    shutil.copy2(nvidia_ctk_bin / "nvidia-cdi-hook", old / "usr" / "bin" / "nvidia-cdi-hook")
    with open_gpu_host(
        root,
        health_watch=False,
        driver_files="toolkit",
        nvidia_ctk=str(nvidia_ctk_bin / "nvidia-ctk"),
        driver_root="/old-driver",
        toolkit_dev_root="/",
    ) as host:
        host.discover()
        with pytest.raises(
            RetryableError, match=r"found driver 570\.1\.2 but NVML reports 580\.126\.20"
        ):
            host.prepare("nvidia_gpu", make_claim("gpu-0"))


def test_toolkit_mode_without_a_toolkit_or_in_time_fails_claims_naming_the_fix(
    build_root: Build, open_gpu_host: Open, make_claim: Callable[..., Any], tmp_path: Path
) -> None:
    root = build_root("dgx-h100")
    with open_gpu_host(root, health_watch=False, driver_files="toolkit") as host:
        host.discover()
        with pytest.raises(RetryableError, match=r"nvidia-ctk is not found .*driver_files: own"):
            host.prepare("nvidia_gpu", make_claim("gpu-0"))
    hook = broken_ctk(root / "usr" / "bin" / "nvidia-cdi-hook", "exit 0")
    assert hook.exists()
    slow = broken_ctk(tmp_path / "nvidia-ctk", "exec sleep 30")
    with open_gpu_host(
        root,
        health_watch=False,
        driver_files="toolkit",
        nvidia_ctk=str(slow),
        toolkit_timeout=0.5,
    ) as host:
        host.discover()
        with pytest.raises(RetryableError, match=r"toolkit_timeout"):
            host.prepare("nvidia_gpu", make_claim("gpu-0"))


def test_the_toolkits_json_is_validated_and_unknown_keys_named(
    gpu_root: Path, nvidia_ctk_bin: Path, open_gpu_host: Open, make_claim: Callable[..., Any]
) -> None:
    root = gpu_root
    with open_gpu_host(
        root,
        health_watch=False,
        driver_files="toolkit",
        nvidia_ctk=str(nvidia_ctk_bin / "nvidia-ctk"),
    ) as host:
        host.discover()
    doc = json.loads(cache_path(root).read_text())["data"]["spec"]  # the binary's own output
    spec = _parse(doc, "test")
    assert isinstance(spec, ToolkitSpec)
    assert spec.devices[0].name == "all"
    doc["containerEdits"]["mounts"][0]["hostpath"] = "/typo"
    with pytest.raises(ToolkitError, match=r"containerEdits\.mounts\.0\.hostpath"):
        _parse(doc, "test")


def test_toolkit_without_the_hook_is_refused_in_the_settings() -> None:
    with pytest.raises(ValueError, match="driver_files: toolkit needs nvidia-cdi-hook"):
        NvidiaGpuSettings(driver_files="toolkit", cdi_hook="none")
