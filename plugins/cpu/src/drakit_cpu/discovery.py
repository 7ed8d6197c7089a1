"""The CPU backend's discovery: the kubelet topology model, and the facts it publishes beyond it.

:func:`read_node` is what a discovery round reads: the topology
(:meth:`~drakit_cpu.topology.CpuTopology.from_sysfs`) and the facts below.

:class:`~drakit_cpu.topology.CpuTopology` carries what the cpumanager algorithms need (cores,
sockets, NUMA nodes, uncore caches, NUMA distances). Devices also describe things kubelet does
not model, read here from the same root (``<root>/sys`` and ``<root>/proc``):

* ``cpuN/topology/die_id`` and the sysfs ``core_id`` (per package, not unique);
* the real level-3 cache ``id`` (kubelet falls back to the socket id when the L3 is not split);
* ``devices/system/cpu/smt/control`` (SMT switched on, off, or unsupported);
* ``devices/system/cpu/isolated`` (``isolcpus=`` domain isolation);
* ``model name`` and ``vendor_id`` from ``/proc/cpuinfo``.

Everything is optional: a missing file means "unknown" and the matching attribute is not
published, so odd kernels (ARM without cache ids, containers without ``/proc/cpuinfo``) still
discover. Malformed files are :class:`~drakit_cpu.topology.TopologyError`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from drakit_cpu.topology import CpuTopology, cpulist_in, int_in

__all__ = ["MAX_STRING_ATTRIBUTE", "CpuFacts", "read_cpu_facts", "read_node"]

logger = logging.getLogger(__name__)

MAX_STRING_ATTRIBUTE = 64
"""The API's limit on a string attribute; longer model names are cut to it."""

_CACHE_DIR = re.compile(r"^index(\d+)$")
_SMT_ON = "on"
_SMT_OFF = frozenset({"off", "forceoff", "notsupported", "notimplemented"})
_L3 = 3


@dataclass(frozen=True)
class CpuFacts:
    """What discovery knows about the node's CPUs besides the kubelet topology.

    Attributes:
        die_of: CPU -> ``die_id`` (only CPUs whose kernel reports a die, i.e. ``>= 0``).
        l3_of: CPU -> sysfs level-3 cache ``id`` (lowest sharing CPU when the id is missing).
        sysfs_core_of: CPU -> sysfs ``core_id`` (repeats across packages).
        smt: whether SMT is on: ``smt/control`` when readable, else "some core has two or more
            online threads".
        threads_per_core: the SMT level kubelet assumes (``NumCPUs // NumCores``).
        isolated: CPUs in ``devices/system/cpu/isolated``.
        model: ``model name`` of the first processor in ``/proc/cpuinfo`` (<= 64 chars).
        vendor: ``vendor_id`` of the first processor.
    """

    die_of: Mapping[int, int]
    l3_of: Mapping[int, int]
    sysfs_core_of: Mapping[int, int]
    smt: bool
    threads_per_core: int
    isolated: frozenset[int]
    model: str | None
    vendor: str | None

    def dies(self, cpus: frozenset[int]) -> frozenset[int]:
        """The dies holding ``cpus`` (empty when no die is known)."""
        return frozenset(self.die_of[c] for c in cpus if c in self.die_of)

    def l3s(self, cpus: frozenset[int]) -> frozenset[int]:
        """The L3 caches shared by ``cpus`` (empty when no L3 is known)."""
        return frozenset(self.l3_of[c] for c in cpus if c in self.l3_of)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    return None if text is None else int_in(path, text)


def _cpulist(path: Path) -> frozenset[int] | None:
    text = _read(path)
    return None if text is None else cpulist_in(path, text)


def _l3_id(cache_dir: Path) -> int | None:
    if not cache_dir.is_dir():
        return None
    for entry in sorted(cache_dir.iterdir()):
        if not _CACHE_DIR.match(entry.name) or _int(entry / "level") != _L3:
            continue
        cache_id = _int(entry / "id")
        if cache_id is not None:
            return cache_id
        shared = _cpulist(entry / "shared_cpu_list")
        return min(shared) if shared else None
    return None


def _cpuinfo(path: Path) -> tuple[str | None, str | None]:
    text = _read(path)
    if text is None:
        return None, None
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if found:  # the first processor block is enough: x86 repeats it per CPU
                break
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key in ("model name", "vendor_id") and key not in found:
            found[key] = " ".join(value.split())
    model = found.get("model name")
    return (model[:MAX_STRING_ATTRIBUTE] if model else None), found.get("vendor_id") or None


def read_cpu_facts(root: Path, topology: CpuTopology) -> CpuFacts:
    """Read the extra CPU facts for the online CPUs of ``topology``.

    Args:
        root: the directory holding ``sys`` and ``proc`` (``/`` on a node).
        topology: the topology discovered from the same root.

    Raises:
        TopologyError: a file exists but is malformed.
    """
    cpu_root = root / "sys" / "devices" / "system" / "cpu"
    die_of: dict[int, int] = {}
    l3_of: dict[int, int] = {}
    core_of: dict[int, int] = {}
    for cpu in sorted(topology.cpu_ids):
        d = cpu_root / f"cpu{cpu}"
        die = _int(d / "topology" / "die_id")
        if die is not None and die >= 0:
            die_of[cpu] = die
        core = _int(d / "topology" / "core_id")
        if core is not None:
            core_of[cpu] = core
        l3 = _l3_id(d / "cache")
        if l3 is not None:
            l3_of[cpu] = l3
    threads = topology.cpus_per_core()
    control = _read(cpu_root / "smt" / "control")
    if control == _SMT_ON:
        smt = True
    elif control in _SMT_OFF:
        smt = False
    else:
        if control is not None:
            logger.warning("unknown SMT control value %r; inferring SMT from siblings", control)
        smt = any(len(topology.cpus_in_core(c)) > 1 for c in topology.cores())
    isolated = _cpulist(cpu_root / "isolated") or frozenset()
    model, vendor = _cpuinfo(root / "proc" / "cpuinfo")
    return CpuFacts(
        die_of=MappingProxyType(die_of),
        l3_of=MappingProxyType(l3_of),
        sysfs_core_of=MappingProxyType(core_of),
        smt=smt,
        threads_per_core=threads,
        isolated=isolated & topology.cpu_ids,
        model=model,
        vendor=vendor,
    )


def read_node(root: Path) -> tuple[CpuTopology, CpuFacts]:
    """The CPU topology under ``root`` (``sys`` and ``proc``; ``/`` on a node) and its facts.

    Raises:
        TopologyError: a file exists but is malformed.
    """
    topology = CpuTopology.from_sysfs(root)
    return topology, read_cpu_facts(root, topology)
