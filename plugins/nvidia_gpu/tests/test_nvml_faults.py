"""One GPU or one NVML call never stops the backend (issue 30, classes 3 and 5).

The fake NVML is subclassed at the library seam (what nvidia-ml-py would answer on a node):
NotSupported for event registration, one GPU failing one query, an event wait that keeps
raising GpuIsLost. Everything above the library is drakit's own code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.models import NodeInfo
from drakit_nvidia_gpu.health import XidWatcher
from drakit_nvidia_gpu.nvml import Nvml
from drakit_nvidia_gpu.plugin import NvidiaGpuPlugin
from drakit_nvidia_gpu.sim import load_nvml_description
from drakit_nvidia_gpu.sim.fakenvml import (
    FakeNvml,
    NVMLError_GpuIsLost,
    NVMLError_InsufficientResources,
    NVMLError_NotSupported,
)

Build = Callable[..., Path]


def host_over(root: Path, lib: FakeNvml, tmp_path: Path) -> PluginHost:
    return PluginHost(
        DrakitSettings(state_dir=tmp_path / "state", plugins={"nvidia_gpu": {}}),
        NodeInfo(name="gpu-node", sysfs_root=str(root)),
        libraries={"pynvml": lib},
    )


def plugin_of(host: PluginHost) -> NvidiaGpuPlugin:
    obj = host.backends["nvidia_gpu"]
    assert isinstance(obj, NvidiaGpuPlugin)
    return obj


class NoEventsFor(FakeNvml):
    """NVML answers NotSupported when one GPU (or every GPU) is registered for events."""

    def __init__(self, root: Path, refuse: set[str] | None) -> None:
        super().__init__(root)
        self.refuse = refuse

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        if self.refuse is None or handle.uuid in self.refuse:
            raise NVMLError_NotSupported()
        super().nvmlDeviceRegisterEvents(handle, event_types, event_set)


@pytest.mark.parametrize("which", ["one", "every"])
def test_event_registration_not_supported_is_off_for_that_gpu_not_fatal(
    build_root: Build, tmp_path: Path, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    root = build_root("dgx-h100")
    uuids = [d.uuid for d in load_nvml_description(root).devices]
    refused = {uuids[2]} if which == "one" else None
    host = host_over(root, NoEventsFor(root, refused), tmp_path)
    try:
        devices = host.discover().by_driver()["gpu.nvidia.drakit.io"]
        assert len([d for d in devices if "-mig-" not in d.name]) == len(uuids)
        watcher = plugin_of(host).watcher
        assert watcher is not None
        off = set(uuids) if refused is None else refused
        assert set(watcher.unwatched) == off
        assert "NotSupported" in next(iter(watcher.unwatched.values()))
        assert f"XID health watching is off for GPU {uuids[2]}" in caplog.text
        assert watcher.running == (which == "one")
        assert {h.health for h in host.health()["nvidia_gpu"]} == {"Healthy"}
    finally:
        w = plugin_of(host).watcher
        if w is not None:
            w.stop()


class OneGpuFails(FakeNvml):
    """One GPU's memory query fails with an NVML error (a driver hiccup on one card)."""

    def __init__(self, root: Path, bad: str) -> None:
        super().__init__(root)
        self.bad = bad

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        if getattr(handle, "uuid", None) == self.bad:
            raise NVMLError_InsufficientResources()
        return super().nvmlDeviceGetMemoryInfo(handle, version)


def test_one_gpu_failing_one_nvml_call_is_skipped_and_named(
    build_root: Build, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = build_root("dgx-h100")
    uuids = [d.uuid for d in load_nvml_description(root).devices]
    host = host_over(root, OneGpuFails(root, uuids[3]), tmp_path)
    try:
        names = {d.name for d in host.discover().by_driver()["gpu.nvidia.drakit.io"]}
        assert "gpu-3" not in names
        assert {f"gpu-{i}" for i in range(8) if i != 3} <= names
        assert "NVML GPU 3:" in caplog.text
        assert "it is not published" in caplog.text
    finally:
        w = plugin_of(host).watcher
        if w is not None:
            w.stop()


class LostForever(FakeNvml):
    """The event wait keeps raising GpuIsLost, and one GPU no longer answers its queries."""

    def __init__(self, root: Path, lost: str) -> None:
        super().__init__(root)
        self.lost = lost
        self.waits = 0

    def nvmlEventSetWait(self, event_set: Any, timeoutms: int) -> Any:
        self.waits += 1
        raise NVMLError_GpuIsLost()

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        if getattr(handle, "uuid", None) == self.lost:
            raise NVMLError_GpuIsLost()
        return super().nvmlDeviceGetMemoryInfo(handle, version)


def test_a_wait_that_keeps_failing_backs_off_and_marks_the_lost_gpu_unhealthy(
    build_root: Build,
) -> None:
    root = build_root("dgx-h100")
    uuids = [d.uuid for d in load_nvml_description(root).devices]
    lib = LostForever(root, uuids[5])
    lib.nvmlInit()
    changes = threading.Event()
    watcher = XidWatcher(Nvml(lib), ignored=(), clear_after=None, on_change=changes.set)
    watcher.start(uuids)
    try:
        assert changes.wait(5), "the lost GPU was never marked"
        time.sleep(1.0)
        assert lib.waits <= 10, f"{lib.waits} waits in about a second: a busy loop"
        problems = watcher.problems()
        assert set(problems) == {uuids[5]}
        assert problems[uuids[5]].kind == "lost"
        assert watcher.failures >= 2
    finally:
        watcher.stop()
