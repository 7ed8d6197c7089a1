"""CPU backend: one allocation on a 2 x 192-CPU machine, and discovery of a 512-CPU node.

Allocation: the ``epyc-genoa-2s`` profile (2 sockets x 96 cores x SMT2 = 384 CPUs, 24 L3
groups of 8 cores) is built into /dev/shm and read with :meth:`CpuTopology.from_sysfs`. A
realistically fragmented free set is made once, deterministically: CPUs 0, 1 and their
siblings are reserved, claims of 1-32 CPUs are allocated by the packed policy until 75 % of the
machine is used, then claims picked at random are released until 55 % of the CPUs are free
(scattered over both sockets and most L3 groups). From that free set one allocation of 8, 64
and 190 CPUs is timed for each policy: ``packed`` (kubelet's default), ``packed+uncore``
(``prefer-align-cpus-by-uncorecache``), ``distributed`` (``distribute-cpus-across-numa``) and
``spread`` (``distribute-cpus-across-cores``).

Discovery: a custom :class:`drakit.sim.MachineSpec` (the Genoa CPU with 128 cores per socket:
2 x 128 x SMT2 = 512 CPUs, 32 L3 groups) is written once with :class:`drakit.sim.SysfsBuilder`
into /dev/shm; then only discovery is timed: :meth:`CpuTopology.from_sysfs`, and the CPU
plugin's discovery through :meth:`drakit.host.pluginhost.PluginHost.discover` (grouped devices, and
one device per CPU). For scale, reading every file of the CPU and NUMA trees once (about 20,000
files, more than discovery opens) is timed too.

Baseline ``calibration``: :func:`benchmarks.common.calibration_workload`, a fixed, short
pure-Python workload, timed right before every timed call of this section
(:func:`benchmarks.common.interleaved`); the median of all those samples.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Baseline, Report, interleaved, median, repeat_timed

from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import fast_tmp
from drakit.models import NodeInfo
from drakit.sim import MachineSpec, SysfsBuilder, build_profile, get_profile
from drakit_cpu.allocator import take_distributed, take_packed, take_spread
from drakit_cpu.topology import CpuTopology

__all__ = ["SIZES", "fragmented_free", "run_cpu"]

SIZES = (8, 64, 190)

Policy = Callable[[CpuTopology, frozenset[int], int], frozenset[int]]
POLICIES: dict[str, Policy] = {
    "packed": take_packed,
    "packed+uncore": functools.partial(take_packed, prefer_uncore=True),
    "distributed": take_distributed,
    "spread": take_spread,
}


def fragmented_free(topo: CpuTopology, seed: int = 7) -> frozenset[int]:
    """A free set after a history of packed allocations and releases (deterministic)."""
    rng = random.Random(seed)
    reserved = topo.siblings(0) | topo.siblings(1)
    free = set(topo.cpu_ids - reserved)
    held: list[frozenset[int]] = []
    while len(free) > topo.num_cpus // 4:
        n = min(rng.choice((1, 2, 2, 4, 4, 8, 8, 16, 32)), len(free) - topo.num_cpus // 4)
        got = take_packed(topo, frozenset(free), max(n, 1))
        free -= got
        held.append(got)
    rng.shuffle(held)
    while len(free) < topo.num_cpus * 55 // 100:
        free |= held.pop()
    return frozenset(free)


def _read_tree(root: Path) -> int:
    """Read every regular file of the CPU and NUMA parts of the tree; return how many."""
    count = 0
    for sub in ("sys/devices/system/cpu", "sys/devices/system/node"):
        for dirpath, _dirs, files in os.walk(root / sub):
            for f in files:
                p = Path(dirpath, f)
                if p.is_file():
                    p.read_bytes()
                    count += 1
    return count


def machine_512() -> MachineSpec:
    """2 sockets x 128 cores x SMT2 = 512 CPUs (the Genoa CPU spec with more cores)."""
    genoa = get_profile("epyc-genoa-2s").cpu
    return MachineSpec(
        name="bench-2x128c-smt2",
        description="2x 128-core SMT2 (Genoa-like, L3 per 8 cores), 512 CPUs",
        cpu=dataclasses.replace(
            genoa, model_name="AMD EPYC 128-Core Processor (bench)", cores_per_socket=128
        ),
    )


def run_cpu(report: Report, repeats: int, discovery_repeats: int) -> None:
    """Figure 5: allocation medians per policy and size; discovery of a 512-CPU node."""
    calib: list[float] = []
    with tempfile.TemporaryDirectory(prefix="drakit-bench-cpu-", dir=fast_tmp()) as tmp:
        genoa_root = build_profile("epyc-genoa-2s", Path(tmp) / "genoa")
        topo = CpuTopology.from_sysfs(genoa_root)
        free = fragmented_free(topo)
        l3_touched = len({topo.info(c).uncore_cache_id for c in free})
        alloc: dict[tuple[str, int], float] = {}
        for policy, take in POLICIES.items():
            for n in SIZES:
                got = take(topo, free, n)
                if len(got) != n or not got <= free:
                    raise RuntimeError(f"{policy} {n}: got {len(got)} CPUs, not a subset of free")
                times = interleaved(functools.partial(take, topo, free, n), repeats, calib)
                alloc[(policy, n)] = median(times)

        spec = machine_512()
        root512 = Path(tmp) / "m512"
        build_s = repeat_timed(lambda: SysfsBuilder(spec).build(root512), 1, 0)[0]
        topo512 = CpuTopology.from_sysfs(root512)
        if topo512.num_cpus != 512:
            raise RuntimeError(f"expected 512 CPUs, discovered {topo512.num_cpus}")
        from_sysfs = interleaved(
            functools.partial(CpuTopology.from_sysfs, root512), discovery_repeats, calib
        )
        files = _read_tree(root512)
        raw_read = interleaved(functools.partial(_read_tree, root512), discovery_repeats, calib)
        node = NodeInfo(name="bench-512", sysfs_root=str(root512))
        hosts = {
            mode: PluginHost(DrakitSettings(plugins={"cpu": {"mode": mode}}), node)
            for mode in ("grouped", "individual")
        }
        devices = {mode: len(h.discover().devices) for mode, h in hosts.items()}
        plugin = {
            mode: interleaved(h.discover, discovery_repeats, calib) for mode, h in hosts.items()
        }
    report.baseline(
        Baseline(
            "calibration",
            median(calib) * 1e3,
            "ms",
            "median of benchmarks.common.calibration_workload() (fixed pure-Python set/dict/"
            "sort/str work), timed right before every timed call of the CPU section",
            samples=len(calib),
        )
    )
    for (policy, n), secs in alloc.items():
        report.add(
            "cpu",
            f"allocate {n} CPUs, {policy}, 2x192-CPU Genoa, fragmented",
            secs * 1e3,
            "ms",
            "calibration",
            repeats=repeats,
            free_cpus=len(free),
            l3_groups_with_free_cpus=l3_touched,
        )
    report.add(
        "cpu",
        "discover 512-CPU node: CpuTopology.from_sysfs",
        median(from_sysfs) * 1e3,
        "ms",
        "calibration",
        repeats=discovery_repeats,
        tree_build_s=round(build_s, 2),
    )
    for mode, secs_list in plugin.items():
        report.add(
            "cpu",
            f"discover 512-CPU node: CPU plugin via PluginHost.discover ({mode}, "
            f"{devices[mode]} devices)",
            median(secs_list) * 1e3,
            "ms",
            "calibration",
            repeats=discovery_repeats,
        )
    report.add(
        "cpu",
        f"reference: read every one of the {files} files of the 512-CPU cpu/ and node/ trees",
        median(raw_read) * 1e3,
        "ms",
        "calibration",
        repeats=discovery_repeats,
    )
