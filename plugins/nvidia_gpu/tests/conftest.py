"""Simulated NVIDIA nodes for the backend's tests, reached exactly as ``drakit node`` reaches them.

Every test builds a simulated node with the kit (``drakit_sim_node``: sysfs plus the fake
NVML's files) and opens the plugin host through :func:`drakit.testing.open_host` (which goes
through :func:`drakit.host.startup.open_host`, handing the backend the root's fake NVML): the
backend's code path is the one it takes over nvidia-ml-py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from drakit.host.pluginhost import PluginHost
from drakit.models import AllocatedDevice, ClaimInfo
from drakit.sim import get_profile
from drakit.testing import SimNode, open_host
from drakit.testing.plugin import SimNodeFactory
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
def sim_nodes() -> dict[Path, SimNode]:
    """The nodes ``build_root`` built in this test, by root."""
    return {}


@pytest.fixture
def build_root(drakit_sim_node: SimNodeFactory, sim_nodes: dict[Path, SimNode]) -> Build:
    """``build_root(profile="dgx-h100", mig=(0, 1))``: a simulated root, MIG on for those GPUs."""

    def build(profile: str = "dgx-h100", mig: tuple[int, ...] = ()) -> Path:
        spec = get_profile(profile)
        if mig:
            spec = with_mig_enabled(spec, mig)
        node = drakit_sim_node(spec, node_name=NODE)
        sim_nodes[node.root] = node
        return node.root

    return build


@contextmanager
def _open(node: SimNode, plugins: dict[str, dict[str, Any]]) -> Iterator[PluginHost]:
    with open_host({"plugins": plugins}, node) as sim:
        try:
            yield sim.host
        finally:
            for obj in sim.backends.values():
                if isinstance(obj, NvidiaGpuPlugin) and obj.watcher is not None:
                    obj.watcher.stop()


@pytest.fixture
def open_gpu_host(sim_nodes: dict[Path, SimNode]) -> Open:
    """``with open_gpu_host(root, health_watch=False) as host`` (only the NVIDIA backend)."""

    def opener(
        root: Path, *, others: dict[str, dict[str, Any]] | None = None, **settings: Any
    ) -> Any:
        node = sim_nodes.get(root) or SimNode(root=root, profile="unknown", node_name=NODE)
        return _open(node, {"nvidia_gpu": settings, **(others or {})})

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


REPO_ROOT = Path(__file__).resolve().parents[3]
CTK_BUILD = REPO_ROOT / "hack" / "nvidia-ctk" / "build.sh"


@pytest.fixture(scope="session")
def nvidia_ctk_bin() -> Path:
    """The real ``nvidia-ctk`` and ``nvidia-cdi-hook`` (``hack/nvidia-ctk/build.sh``, cached).

    Skipped only where Go is absent (and no ``DRAKIT_NVIDIA_CTK_BIN_DIR`` is given); under
    ``DRAKIT_E2E_REQUIRED`` (``make test``, CI) that is a failure.
    """
    if shutil.which("go") is None and not os.environ.get("DRAKIT_NVIDIA_CTK_BIN_DIR"):
        why = "Go is not on PATH: hack/nvidia-ctk/build.sh cannot build nvidia-ctk"
        if os.environ.get("DRAKIT_E2E_REQUIRED"):
            pytest.fail(why)
        pytest.skip(why)
    proc = subprocess.run(
        ["bash", str(CTK_BUILD)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(f"{CTK_BUILD} failed: {proc.stderr.strip()[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])
