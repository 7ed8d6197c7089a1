"""``drakit cpu``: the CPU backend's commands, contributed to the ``drakit`` CLI.

Registered under the ``drakit.cli`` entry point group (``cpu = "drakit_cpu.cli:cpu"``), which
core's CLI loads lazily, so core never imports this plugin; it is built from the public CLI kit
(:mod:`drakit.clikit`), like core's own commands. The commands run the same code as a
node: ``allocate`` the kubelet-parity algorithms that prepare uses, ``topology`` the discovery.

Errors are one line on stderr (``drakit: error: ...``) and exit code 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from drakit.clikit import UserError, dump, profile_option, simulated_root, sysfs_root_option
from drakit.cpuset import CpuListError, format_cpulist, parse_cpulist
from drakit_cpu.allocator import AllocationError
from drakit_cpu.discovery import read_cpu_facts
from drakit_cpu.policy import POLICIES, Policy, PolicyOptions
from drakit_cpu.prepare import select_cpus
from drakit_cpu.topology import CpuTopology, TopologyError

__all__ = ["cpu"]

F = TypeVar("F", bound=Callable[..., Any])
_POLICIES: dict[str, Policy] = {p: p for p in POLICIES}
_FLAGS = {
    "prefer_uncore": "--prefer-uncore",
    "group_size": "--group-size",
    "full_pcpus_only": "--full-pcpus-only",
}


def _hardware(f: F) -> F:
    f = sysfs_root_option("Read the topology under this root (it holds sys/; '/' on a node).")(f)
    return profile_option()(f)


@contextmanager
def _root(profile: str | None, sysfs_root: Path | None) -> Iterator[Path]:
    if (profile is None) == (sysfs_root is None):
        raise UserError("give exactly one of --profile and --sysfs-root")
    if sysfs_root is not None:
        yield sysfs_root
        return
    with simulated_root(str(profile)) as root:
        yield root


def _topology(root: Path) -> CpuTopology:
    try:
        return CpuTopology.from_sysfs(root)
    except TopologyError as e:
        raise UserError(f"cannot read the CPU topology under {root}: {e}") from None


def _cpus(text: str, what: str) -> frozenset[int]:
    try:
        return parse_cpulist(text)
    except CpuListError as e:
        raise UserError(f"{what}: {e}") from None


@click.group("cpu")
def cpu() -> None:
    """CPU backend: topology and kubelet-parity CPU allocation."""


@cpu.command()
@_hardware
@click.option(
    "--available",
    help="Free CPUs to choose from (CPU list; default: all online CPUs but --reserved).",
)
@click.option("--count", "-n", type=click.IntRange(min=1), required=True, help="CPUs to take.")
@click.option(
    "--policy",
    type=click.Choice(POLICIES),
    default="packed",
    show_default=True,
    help="packed (kubelet default), distributed (distribute-cpus-across-numa), "
    "spread (distribute-cpus-across-cores).",
)
@click.option("--prefer-uncore", is_flag=True, help="packed: align to uncore (L3) caches first.")
@click.option(
    "--group-size",
    type=click.IntRange(min=1, max=64),
    help="distributed: CPUs handed out together (default: SMT level with --full-pcpus-only).",
)
@click.option("--full-pcpus-only", is_flag=True, help="Whole physical cores only (SMT alignment).")
@click.option("--reserved", default="", help="Reserved CPUs (CPU list), as kubelet sees them.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def allocate(
    profile: str | None,
    sysfs_root: Path | None,
    available: str | None,
    count: int,
    policy: str,
    prefer_uncore: bool,
    group_size: int | None,
    full_pcpus_only: bool,
    reserved: str,
    output: str,
) -> None:
    """Print the CPUs kubelet's cpumanager would pick, in CPU list syntax."""
    options = PolicyOptions(
        policy=_POLICIES[policy],
        prefer_uncore=prefer_uncore,
        group_size=group_size,
        full_pcpus_only=full_pcpus_only,
    )
    for key, message in options.conflicts():
        raise UserError(f"{_FLAGS[key]}: {message}")
    reserved_cpus = _cpus(reserved, "--reserved")
    with _root(profile, sysfs_root) as root:
        topo = _topology(root)
    free = topo.cpu_ids - reserved_cpus if available is None else _cpus(available, "--available")
    unknown = free - topo.cpu_ids
    if unknown:
        raise UserError(
            f"--available: CPUs {format_cpulist(unknown)} are not online in this topology "
            f"(online: {format_cpulist(topo.cpu_ids)})"
        )
    try:
        chosen = select_cpus(topo, free, count, options, reserved=reserved_cpus)
    except AllocationError as e:
        raise UserError(str(e)) from None
    if output == "text":
        click.echo(format_cpulist(chosen))
        return
    per_numa: dict[str, int] = {}
    for c in sorted(chosen):
        key = str(topo.info(c).numa_node)
        per_numa[key] = per_numa.get(key, 0) + 1
    click.echo(
        json.dumps(
            {
                "cpus": format_cpulist(chosen),
                "count": len(chosen),
                "policy": policy,
                "numaNodes": per_numa,
            },
            indent=2,
        )
    )


@cpu.command()
@_hardware
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml")
def topology(profile: str | None, sysfs_root: Path | None, output: str) -> None:
    """Show the CPU topology discovery reads: sockets, NUMA nodes and distances, L3, SMT."""
    with _root(profile, sysfs_root) as root:
        topo = _topology(root)
        try:
            facts = read_cpu_facts(root, topo)
        except TopologyError as e:
            raise UserError(f"cannot read CPU facts under {root}: {e}") from None
    l3: dict[int, set[int]] = {}
    for c, cache in facts.l3_of.items():
        l3.setdefault(cache, set()).add(c)
    data: dict[str, Any] = {
        "model": facts.model,
        "vendor": facts.vendor,
        "cpus": len(topo.cpu_ids),
        "cores": topo.num_cores,
        "smt": facts.smt,
        "threadsPerCore": facts.threads_per_core,
        "isolated": format_cpulist(facts.isolated),
        "sockets": {s: format_cpulist(topo.cpus_in_socket(s)) for s in sorted(topo.sockets())},
        "numaNodes": {
            n: {
                "cpus": format_cpulist(topo.cpus_in_numa_node(n)),
                "distances": list(dict(topo.numa_distances).get(n, ())),
            }
            for n in sorted(topo.numa_nodes())
        },
        "l3": {u: format_cpulist(l3[u]) for u in sorted(l3)},
    }
    click.echo(dump(data, output), nl=output == "json")
