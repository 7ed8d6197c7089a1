"""Simulated NVIDIA nodes for the backend's tests, reached exactly as ``drakit node`` reaches them.

Every test builds a simulated root with :mod:`drakit.sim` (sysfs plus the fake NVML's files)
and opens the plugin host through :func:`drakit.runtime.open_host`, which hands the backend the
root's fake NVML: the backend's code path is the one it takes over nvidia-ml-py.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from drakit.config import DrakitSettings
from drakit.models import AllocatedDevice, ClaimInfo
from drakit.pluginhost import PluginHost
from drakit.runtime import open_host
from drakit.sim import SysfsBuilder, fast_tmp, get_profile
from drakit_nvidia_gpu.plugin import NvidiaGpuPlugin
from drakit_nvidia_gpu.sim import with_mig_enabled

DRIVER = "gpu.nvidia.drakit.io"
NODE = "gpu-node"

Build = Callable[..., Path]
Open = Callable[..., Any]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("DRAKIT_"):
            monkeypatch.delenv(var)


@pytest.fixture
def build_root() -> Iterator[Build]:
    """``build_root(profile="dgx-h100", mig=(0, 1))``: a simulated root, MIG on for those GPUs."""
    made: list[str] = []

    def build(profile: str = "dgx-h100", mig: tuple[int, ...] = ()) -> Path:
        spec = get_profile(profile)
        if mig:
            spec = with_mig_enabled(spec, mig)
        tmp = tempfile.mkdtemp(prefix="dk-nv-", dir=fast_tmp())
        made.append(tmp)
        return SysfsBuilder(spec).build(Path(tmp))

    yield build
    for tmp in made:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _open(root: Path, plugins: dict[str, dict[str, Any]]) -> Iterator[PluginHost]:
    settings = DrakitSettings(node_name=NODE, sysfs_root=root, plugins=plugins)
    with open_host(settings) as host:
        try:
            yield host
        finally:
            for obj in host.backends.values():
                if isinstance(obj, NvidiaGpuPlugin) and obj.watcher is not None:
                    obj.watcher.stop()


@pytest.fixture
def open_gpu_host() -> Open:
    """``with open_gpu_host(root, health_watch=False) as host`` (only the NVIDIA backend)."""

    def opener(
        root: Path, *, others: dict[str, dict[str, Any]] | None = None, **settings: Any
    ) -> Any:
        return _open(root, {"nvidia_gpu": settings, **(others or {})})

    return opener


def _claim(*devices: str, uid: str = "uid-1", configs: tuple[Any, ...] = ()) -> ClaimInfo:
    return ClaimInfo(
        namespace="ns",
        name=f"claim-{uid}",
        uid=uid,
        devices=tuple(
            AllocatedDevice(request=f"r{i}", driver=DRIVER, pool=NODE, device=d, config=configs)
            for i, d in enumerate(devices)
        ),
    )


def _plugin_of(host: PluginHost) -> NvidiaGpuPlugin:
    obj = host.backends["nvidia_gpu"]
    assert isinstance(obj, NvidiaGpuPlugin)
    return obj


@pytest.fixture
def make_claim() -> Callable[..., ClaimInfo]:
    """``make_claim("gpu-0", uid=..., configs=(...))``: a claim of devices of the node's pool."""
    return _claim


@pytest.fixture
def plugin_of() -> Callable[[PluginHost], NvidiaGpuPlugin]:
    """The NVIDIA backend object of a host."""
    return _plugin_of
