"""Plugins' cpuset answers merged into one, and turned into NRI adjustments and updates (pure).

The adjustment also removes the fail-closed guard mounts (``drakit.enforce.guard``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from drakit.cpuset import format_cpulist, parse_cpulist
from drakit.enforce.guard import GUARD_DIR
from drakit.errors import PermanentError
from drakit.models import ContainerResources
from drakit.nri import api

__all__ = [
    "Wanted",
    "adjustment",
    "guard_mounts",
    "merge_answers",
    "needs_update",
    "update",
]


@dataclass(frozen=True)
class Wanted:
    """What a container's cpuset must be (``None``: leave as it is)."""

    cpus: frozenset[int] | None = None
    mems: frozenset[int] | None = None

    def __bool__(self) -> bool:
        return self.cpus is not None or self.mems is not None


def merge_answers(
    answers: Mapping[str, ContainerResources | None], *, memory_nodes: bool
) -> Wanted:
    """One cpuset from every plugin's answer (``plugin -> answer``).

    Raises:
        PermanentError: two plugins want different CPUs (or memory nodes); names both.
    """
    cpus: tuple[str, frozenset[int]] | None = None
    mems: tuple[str, frozenset[int]] | None = None
    for plugin, res in sorted(answers.items()):
        if res is None:
            continue
        cpus = _one("CPUs", cpus, plugin, res.cpus)
        if memory_nodes:
            mems = _one("memory nodes", mems, plugin, res.mems)
    return Wanted(cpus=None if cpus is None else cpus[1], mems=None if mems is None else mems[1])


def _one(
    what: str, have: tuple[str, frozenset[int]] | None, plugin: str, value: frozenset[int] | None
) -> tuple[str, frozenset[int]] | None:
    if value is None:
        return have
    if not value:
        raise PermanentError(f"plugin {plugin!r} answered an empty set of {what}; answer None")
    if have is not None and have[1] != value:
        raise PermanentError(
            f"plugins {have[0]!r} and {plugin!r} want different {what} for one container "
            f"({format_cpulist(have[1])} and {format_cpulist(value)}); configure one of them "
            "to leave such containers alone"
        )
    return (plugin, value) if have is None else have


def guard_mounts(mounts: Iterable[api.Mount]) -> list[str]:
    """The container paths of the guard mounts among a container's mounts."""
    prefix = GUARD_DIR + "/"
    return [m.destination for m in mounts if m.destination.startswith(prefix)]


def _cpuset(target: api.LinuxResources, wanted: Wanted) -> None:
    if wanted.cpus is not None:
        target.cpu.cpus = format_cpulist(wanted.cpus)
    if wanted.mems is not None:
        target.cpu.mems = format_cpulist(wanted.mems)


def adjustment(wanted: Wanted, remove: Iterable[str] = ()) -> api.ContainerAdjustment:
    """The CreateContainer adjustment: the cpuset, and the guard mounts removed."""
    adjust = api.ContainerAdjustment()
    for path in remove:  # NRI marks a removal with a leading '-' (api.MarkForRemoval)
        adjust.mounts.append(api.Mount(destination=f"-{path}"))
    if wanted:
        _cpuset(adjust.linux.resources, wanted)
    return adjust


def update(container_id: str, wanted: Wanted) -> api.ContainerUpdate:
    """An UpdateContainers entry setting ``container_id``'s cpuset."""
    out = api.ContainerUpdate(container_id=container_id)
    _cpuset(out.linux.resources, wanted)
    return out


def needs_update(container: api.Container, wanted: Wanted) -> bool:
    """Whether the container's current cpuset differs from ``wanted``."""
    cpu = container.linux.resources.cpu
    if wanted.cpus is not None and _parse(cpu.cpus) != wanted.cpus:
        return True
    return wanted.mems is not None and _parse(cpu.mems) != wanted.mems


def _parse(text: str) -> frozenset[int] | None:
    try:
        return frozenset(parse_cpulist(text)) if text else None
    except ValueError:
        return None
