"""The CPU backend's prepare: turn each allocated device into concrete CPUs, never held ones.

A grouped device's share becomes CPUs by the claim's policy (:func:`select_cpus`, kubelet's
algorithms in :mod:`drakit_cpu.allocator`); an individual device is the CPU the scheduler
chose. The chosen cpuset reaches the container as ``DRAKIT_CPUSET_<DEVICE>[_<SHARE>]``
(:func:`cpuset_env_name`) through CDI.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drakit.cpuset import format_cpulist, parse_cpulist
from drakit.errors import PermanentError, RetryableError
from drakit.models import AllocatedDevice, CdiEdits, ClaimInfo, PreparedDevice
from drakit.preparekit import prepared_device, whole_quantity
from drakit_cpu.allocator import (
    AllocationError,
    SMTAlignmentError,
    take_distributed,
    take_packed,
    take_spread,
)
from drakit_cpu.config import CpuConfig
from drakit_cpu.devices import CAPACITY
from drakit_cpu.discovery import CpuFacts
from drakit_cpu.policy import CLAIM_FIELDS, Policy, PolicyOptions
from drakit_cpu.settings import CpuSettings
from drakit_cpu.topology import CpuTopology

__all__ = [
    "CPUSET_ENV_PREFIX",
    "CpuView",
    "cpuset_env_name",
    "prepare_devices",
    "resolve_options",
    "select_cpus",
]

log = logging.getLogger(__name__)

CPUSET_ENV_PREFIX = "DRAKIT_CPUSET_"
_GROUPED_ONLY = ("policy", "prefer_uncore", "group_size")


@dataclass(frozen=True)
class CpuView:
    """One discovery round's result, swapped in atomically (prepare reads one snapshot)."""

    topology: CpuTopology
    facts: CpuFacts
    groups: Mapping[str, frozenset[int]]
    grouped: bool


_MAX_CPUS = 1 << 20
"""More CPUs than any node has: a consumed count above it is refused, not computed with."""


def cpuset_env_name(device: str, share_id: str | None = None) -> str:
    """The CDI environment variable carrying one allocated device's cpuset.

    ``DRAKIT_CPUSET_<DEVICE>`` (device name upper-cased, ``-`` -> ``_``), plus ``_<SHARE>``
    (the share ID's hex digits) for a share of a grouped device, so two shares of one device
    reaching the same container never collide.
    """
    name = CPUSET_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", device.upper())
    if share_id:
        name += "_" + re.sub(r"[^A-Z0-9]", "", share_id.upper())
    return name


def resolve_options(
    settings: CpuSettings, dev: AllocatedDevice, where: str, *, grouped: bool
) -> PolicyOptions:
    """The policy for one allocated device: its ``CpuConfig`` objects over the node's.

    Configs are applied in order (class first, then claim; a later field wins). A claim
    that picks a policy other than the node's does not inherit the node's
    ``prefer_uncore``/``group_size`` (they belong to the node's policy);
    ``full_pcpus_only`` on the node applies to every claim.

    Raises:
        PermanentError: naming the ``CpuConfig`` field, for combinations the device mode,
            the node or kubelet's rules do not allow.
    """
    s = settings
    given: dict[str, Any] = {}
    for cfg in dev.config:
        if isinstance(cfg, CpuConfig):
            for key in CLAIM_FIELDS:
                value = getattr(cfg, key)
                if value is not None:
                    given[key] = value

    def fail(key: str, message: str) -> PermanentError:
        return PermanentError(f"{where}: CpuConfig {CLAIM_FIELDS[key]}: {message}")

    if not grouped:
        for key in _GROUPED_ONLY:
            if key in given:
                raise fail(
                    key,
                    "has no effect on individual CPU devices: the scheduler already chose "
                    "the CPUs (fullPCPUsOnly is the only CpuConfig option in individual "
                    "mode); remove it, or ask the node operator for grouped devices",
                )
    if s.full_pcpus_only and given.get("full_pcpus_only") is False:
        raise fail(
            "full_pcpus_only",
            "this node hands out whole physical cores only (plugins.cpu.full_pcpus_only); "
            "remove 'fullPCPUsOnly: false'",
        )
    policy: Policy = given.get("policy", s.policy)
    if s.full_pcpus_only and policy == "spread":
        raise fail(
            "policy",
            "'spread' cannot be used on this node, which hands out whole physical cores "
            "only (plugins.cpu.full_pcpus_only); use 'packed' or 'distributed'",
        )
    inherit = policy == s.policy
    opts = PolicyOptions(
        policy=policy,
        prefer_uncore=given.get("prefer_uncore", s.prefer_uncore if inherit else False),
        group_size=given.get("group_size", s.group_size if inherit else None),
        full_pcpus_only=s.full_pcpus_only or bool(given.get("full_pcpus_only")),
    )
    problems = opts.conflicts()
    if problems:
        raise PermanentError(
            f"{where}: " + "; ".join(f"CpuConfig {CLAIM_FIELDS[k]}: {m}" for k, m in problems)
        )
    return opts


def prepare_devices(
    settings: CpuSettings,
    reserved: frozenset[int],
    view: CpuView | None,
    claim: ClaimInfo,
    held: Sequence[PreparedDevice],
) -> list[PreparedDevice]:
    """Choose concrete CPUs for each allocated device, never ones another claim holds."""
    if view is None:
        raise RetryableError("the CPU topology has not been discovered yet")
    topo = view.topology
    taken: set[int] = set()
    for p in held:
        taken |= parse_cpulist(str(p.state.get("cpus", "")))
    out: list[PreparedDevice] = []
    whole_cores: dict[str, set[int]] = {}
    for dev in claim.devices:
        where = f"request {dev.request!r} device {dev.device!r}"
        group = view.groups.get(dev.device)
        if group is None:
            raise PermanentError(f"{where}: not a CPU device on this node")
        opts = resolve_options(settings, dev, where, grouped=view.grouped)
        if not view.grouped:
            if group & taken:
                raise PermanentError(
                    f"{where}: CPU {format_cpulist(group)} is held by another claim"
                )
            chosen = group
            if opts.full_pcpus_only:
                whole_cores.setdefault(dev.request, set()).update(group)
        else:
            chosen = _choose(view, dev, where, opts, frozenset(group - taken), reserved)
        taken |= chosen
        cpus = format_cpulist(chosen)
        out.append(
            prepared_device(
                dev,
                edits=CdiEdits(env=(f"{cpuset_env_name(dev.device, dev.share_id)}={cpus}",)),
                state={"cpus": cpus, "policy": opts.policy if view.grouped else "scheduler"},
            )
        )
    for request, request_cpus in whole_cores.items():
        _check_whole_cores(topo, request, frozenset(request_cpus))
    return out


def _choose(
    view: CpuView,
    dev: AllocatedDevice,
    where: str,
    opts: PolicyOptions,
    available: frozenset[int],
    reserved: frozenset[int],
) -> frozenset[int]:
    topo = view.topology
    group = view.groups[dev.device]
    n = whole_quantity(
        dev.consumed_capacity.get(CAPACITY, "1"),
        where,
        "cpu",
        unit=" of CPUs",
        most=_MAX_CPUS,
        holder="any node",
    )
    if n > len(group):
        raise PermanentError(
            f"{where}: asks for {n} CPUs but the device has {len(group)}; the allocation "
            "does not match the devices this node publishes"
        )
    if opts.policy == "distributed" and opts.full_pcpus_only and opts.group_size:
        per = topo.cpus_per_core()
        if per and opts.group_size % per:
            raise PermanentError(
                f"{where}: CpuConfig groupSize: {opts.group_size} is not a multiple of the "
                f"{per} CPUs per core, and whole physical cores are required (fullPCPUsOnly)"
            )
    if opts.policy == "distributed":
        numas = {topo.info(c).numa_node for c in group}
        if len(numas) == 1:
            log.info(
                "%s: policy 'distributed' inside one NUMA node allocates like 'packed' "
                "(kubelet parity); spread a claim over NUMA nodes with the numa-spread "
                "strategy",
                where,
            )
    try:  # this backend's own allocator, typed, without a round trip through core's hook
        return select_cpus(topo, available, n, opts, reserved=reserved)
    except AllocationError as e:
        held = len(group) - len(available)
        note = (
            f" ({held} of the device's {len(group)} CPUs are held by other claims)" if held else ""
        )
        raise PermanentError(f"{where}: {opts.policy}: {e}{note}") from e


def _check_whole_cores(topo: CpuTopology, request: str, cpus: frozenset[int]) -> None:
    per = topo.cpus_per_core()
    where = f"request {request!r}"
    if per > 1 and len(cpus) % per:
        raise PermanentError(f"{where}: {SMTAlignmentError(len(cpus), per)}")
    missing: set[int] = set()
    for cpu in cpus:
        missing |= topo.siblings(cpu) - cpus
    if missing:
        raise PermanentError(
            f"{where}: SMT Alignment Error: CPUs {format_cpulist(cpus)} are not whole "
            f"physical cores (siblings {format_cpulist(missing)} are not in the request); "
            "select whole cores, e.g. with a matchAttribute constraint on the 'core' attribute"
        )


def select_cpus(
    topo: CpuTopology,
    available: frozenset[int],
    count: int,
    options: PolicyOptions,
    *,
    reserved: frozenset[int] = frozenset(),
) -> frozenset[int]:
    """Run the kubelet algorithm ``options`` names (shared by prepare and ``drakit cpu``).

    Raises:
        AllocationError: kubelet's error (``not enough cpus available ...``,
            ``SMT Alignment Error: ...``) or a combination :mod:`drakit_cpu.policy` rejects.
    """
    problems = options.conflicts()
    if problems:
        raise AllocationError("; ".join(f"{k}: {m}" for k, m in problems))
    if options.policy == "packed":
        return take_packed(
            topo,
            available,
            count,
            prefer_uncore=options.prefer_uncore,
            full_pcpus_only=options.full_pcpus_only,
            reserved=reserved,
        )
    if options.policy == "distributed":
        return take_distributed(
            topo,
            available,
            count,
            group_size=options.group_size,
            full_pcpus_only=options.full_pcpus_only,
            reserved=reserved,
        )
    return take_spread(topo, available, count)
