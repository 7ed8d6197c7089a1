"""The seam between production code and the simulator: found by entry point, never imported.

Production modules (the runtime, the CLI, the backends) must not import :mod:`drakit.sim`
(an import-linter contract checks it). When a ``--profile`` or a simulated ``--sysfs-root``
asks for simulated hardware, they load the simulator through the ``drakit.simulator`` entry
point (:func:`simulator`), which ``drakit`` registers for :mod:`drakit.sim`. The simulator in
turn finds vendors' profiles (``drakit.profiles``) and vendor-library stand-ins
(``drakit.sim_libraries``, e.g. the NVIDIA backend's fake NVML) and what a simulated root does
on its own while it is used (``drakit.sim_behaviours``, e.g. the AINIC backend's SR-IOV kernel)
with :func:`entries` and :func:`load`. These read entry-point metadata with
:mod:`importlib.metadata` only; building plugin managers (stevedore, pluggy) stays the plugin
host's job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Protocol, cast

from drakit.errors import DrakitError

__all__ = [
    "PROFILE_GROUP",
    "SIMULATOR_GROUP",
    "SIM_BEHAVIOUR_GROUP",
    "SIM_LIBRARY_GROUP",
    "SIM_MARKER",
    "EntryInfo",
    "Simulator",
    "SimulatorUnavailable",
    "entries",
    "fast_tmp",
    "is_simulated",
    "load",
    "simulator",
]

SIMULATOR_GROUP = "drakit.simulator"
"""The simulator: entry point ``drakit`` -> an object satisfying :class:`Simulator`."""
PROFILE_GROUP = "drakit.profiles"
"""Simulated-hardware profiles: ``name = "pkg.module:factory"``, ``factory() -> MachineSpec``."""
SIM_LIBRARY_GROUP = "drakit.sim_libraries"
"""Vendor-library stand-ins: ``name = "pkg.module:factory"``, ``factory(root) -> dict``."""
SIM_BEHAVIOUR_GROUP = "drakit.sim_behaviours"
"""What a simulated root does while it is used (the kernel's reaction to ``sriov_numvfs``
writes): ``name = "pkg.module:factory"``, ``factory(root)`` -> a context manager that runs it,
or ``None`` when the root holds nothing of its vendor."""

SIM_MARKER = Path("drakit-sim") / "machine.json"
"""Relative to a root: present when the simulator built the tree (which profile it is)."""


class SimulatorUnavailable(DrakitError):
    """An entry point the simulation needs is not installed or does not import."""


class Simulator(Protocol):
    """What production code needs of the simulator."""

    def materialize(self, name: str) -> AbstractContextManager[Path]:
        """Build the named profile in a temporary root, yield it, remove it afterwards.

        Raises:
            ValueError: no profile has that name (the message lists the known ones).
        """
        ...

    def libraries(self, root: Path) -> Mapping[str, object]:
        """The vendor-library stand-ins for a simulated root, by module name (``pynvml``)."""
        ...

    def behaviours(self, root: Path) -> AbstractContextManager[object]:
        """Run what the simulated root does on its own (every ``drakit.sim_behaviours``)."""
        ...


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """An installed entry point and the distribution that registers it."""

    group: str
    name: str
    target: str
    distribution: str


def entries(group: str) -> list[EntryInfo]:
    """Every installed entry point of ``group``, sorted by name."""
    out = [
        EntryInfo(
            group=group,
            name=ep.name,
            target=ep.value,
            distribution=ep.dist.metadata["Name"] if ep.dist else "?",
        )
        for ep in metadata.entry_points(group=group)
    ]
    return sorted(out, key=lambda e: e.name)


def load(group: str, name: str) -> object:
    """Import entry point ``name`` of ``group``.

    Raises:
        SimulatorUnavailable: it is not installed, or importing it fails.
    """
    found = list(metadata.entry_points(group=group, name=name))
    if not found:
        installed = ", ".join(e.name for e in entries(group)) or "none"
        raise SimulatorUnavailable(
            f"no entry point {name!r} in group {group!r} (installed: {installed}); install "
            "the distribution that provides it"
        )
    ep = found[0]
    try:
        return ep.load()
    except Exception as e:  # a broken distribution: say which, keep the cause
        dist = ep.dist.metadata["Name"] if ep.dist else "?"
        raise SimulatorUnavailable(
            f"entry point {name!r} = {ep.value!r} in group {group!r} (from {dist}) failed to "
            f"import: {e!r}; reinstall that distribution"
        ) from e


def simulator() -> Simulator:
    """The installed simulator (entry point ``drakit`` of ``drakit.simulator``).

    Raises:
        SimulatorUnavailable: it is not installed or does not import.
    """
    return cast(Simulator, load(SIMULATOR_GROUP, "drakit"))


def is_simulated(root: Path) -> bool:
    """Whether the simulator built the tree under ``root``."""
    return (Path(root) / SIM_MARKER).is_file()


def fast_tmp() -> str | None:
    """A memory-backed temp directory (``/dev/shm``) if there is one, else ``None`` (default).

    A simulated profile is thousands of small files; on a loaded disk writing them takes tens
    of seconds, in memory well under one.
    """
    shm = Path("/dev/shm")  # noqa: S108 - private temp dirs are made inside it
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
