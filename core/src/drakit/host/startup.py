"""Shared start-up: settings -> node (real or simulated sysfs) -> plugin host.

Used by the CLI, ``drakit node`` and ``drakit demo`` so they all load plugins the same way.

The simulator is never imported here: a ``--profile`` (or a ``--sysfs-root`` holding a tree
the simulator built) reaches it through :mod:`drakit.simseam` (the ``drakit.simulator`` entry
point), which gives the simulated tree and its vendor-library stand-ins (the fake NVML). On a
real node nothing of :mod:`drakit.sim` is loaded.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from drakit.host.pluginhost import PluginHost
from drakit.host.presets import default_backends
from drakit.host.settings import DrakitSettings
from drakit.models import NodeInfo
from drakit.simseam import fast_tmp, is_simulated, simulator

__all__ = [
    "default_node_name",
    "default_sections",
    "effective_settings",
    "fast_tmp",
    "open_host",
    "sysfs_for",
]


def default_node_name(settings: DrakitSettings) -> str:
    """The node name: configured, else the profile name (simulated), else the host name."""
    if settings.node_name:
        return settings.node_name
    if settings.profile:
        return settings.profile
    return socket.gethostname().split(".")[0].lower()


def effective_settings(settings: DrakitSettings) -> DrakitSettings:
    """``settings`` with the default backends filled in when none are configured."""
    if settings.plugins:
        return settings
    plugins = default_sections(default_backends())  # the shipped `default` preset's
    return settings.model_copy(update={"plugins": plugins})


def default_sections(names: Sequence[str]) -> dict[str, dict[str, object]]:
    """Empty sections for ``names``: what the defaults and ``drakit claim validate`` load.

    A composite's members among them publish under its driver because their sections name no
    driver (:func:`drakit.host.settings.plugin_drivers`).
    """
    return {n: {} for n in names}


@contextmanager
def sysfs_for(settings: DrakitSettings) -> Iterator[Path]:
    """The sysfs root to read: a materialised simulated profile, or ``settings.sysfs_root``.

    Raises:
        UnknownProfileError: no installed profile has ``settings.profile`` (a ``ValueError``
            whose message lists the known ones).
    """
    if not settings.profile:
        yield settings.sysfs_root
        return
    with simulator().materialize(settings.profile) as root:
        yield root


def _libraries(root: Path) -> Mapping[str, object]:
    if not is_simulated(root):
        return {}  # a real root: backends load their vendor libraries themselves
    return simulator().libraries(root)


@contextmanager
def open_host(settings: DrakitSettings) -> Iterator[PluginHost]:
    """Build the plugin host for ``settings`` (simulated hardware if a profile is set).

    A simulated root (a profile, or ``sysfs_root`` pointing at a tree the simulator built)
    brings its vendor-library stand-ins (the fake NVML), handed to the backends, and runs its
    behaviours (the AINIC SR-IOV kernel) while the host is open.
    """
    settings = effective_settings(settings)
    with sysfs_for(settings) as root, ExitStack() as stack:
        if is_simulated(Path(root)):  # e.g. the SR-IOV kernel that creates VFs on demand
            stack.enter_context(simulator().behaviours(Path(root)))
        node = NodeInfo(name=default_node_name(settings), sysfs_root=str(root))
        yield PluginHost(settings, node, libraries=_libraries(Path(root)))
