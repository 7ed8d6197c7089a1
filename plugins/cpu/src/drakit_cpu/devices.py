"""The CPU backend's devices: grouped (one per NUMA node, socket or L3 group) or one per CPU.

:func:`build_devices` turns one discovery round (:mod:`drakit_cpu.discovery`) into the
published devices and the CPUs each stands for; ``docs/cpu-backend.md`` lists the attributes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from drakit.cpuset import format_cpulist
from drakit.errors import ConfigInvalid
from drakit.models import (
    CounterConsumption,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceInventory,
    NodeAllocatableMapping,
    NodeAllocatableResource,
    RequestPolicy,
    ValidRange,
)
from drakit.sysfs import NUMA_NODE
from drakit_cpu.discovery import CpuFacts
from drakit_cpu.settings import CpuSettings
from drakit_cpu.topology import CpuTopology

__all__ = ["CAPACITY", "CPU_TYPE", "GROUP_TYPE", "allocatable", "build_devices", "shared"]

log = logging.getLogger(__name__)

CAPACITY = "cpu"
"""The consumable capacity of grouped devices (in the driver's domain)."""
GROUP_TYPE = "cpu-group"
CPU_TYPE = "cpu"
"""The ``type`` of grouped and individual devices under a shared driver (``docs/composite.md``)."""


def allocatable(
    settings: CpuSettings, reserved: frozenset[int], topo: CpuTopology, facts: CpuFacts
) -> tuple[frozenset[int], frozenset[int]]:
    """The CPUs that may be published: ``(regular, isolated)``.

    Reserved CPUs never; isolated CPUs only with ``isolated_cpus: publish`` (as a class of
    their own); with ``full_pcpus_only``, only cores whose every thread is in one class.
    """
    unknown = reserved - topo.cpu_ids
    if unknown:
        log.warning(
            "plugins.cpu.reserved names CPUs %s that are not online here",
            format_cpulist(unknown),
        )
    usable = topo.cpu_ids - reserved
    isolated = usable & facts.isolated if settings.isolated_cpus == "publish" else frozenset()
    regular = usable - facts.isolated
    if settings.full_pcpus_only:
        regular = frozenset(c for c in regular if topo.siblings(c) <= regular)
        isolated = frozenset(c for c in isolated if topo.siblings(c) <= isolated)
    return regular, isolated


def build_devices(
    settings: CpuSettings, reserved: frozenset[int], topo: CpuTopology, facts: CpuFacts
) -> tuple[list[Device], dict[str, frozenset[int]]]:
    """The devices to publish and, per device name, the CPUs it stands for.

    Raises:
        ConfigInvalid: ``group_size`` is not a multiple of this node's CPUs per core while
            ``full_pcpus_only`` hands out whole cores only.
    """
    size, per = settings.group_size, facts.threads_per_core
    if settings.full_pcpus_only and size and per > 1 and size % per:
        raise ConfigInvalid(
            [
                (
                    "plugins.cpu.group_size",
                    f"{size} is not a multiple of this node's {per} CPUs per core, and "
                    "full_pcpus_only hands out whole cores only",
                )
            ]
        )
    regular, isolated = allocatable(settings, reserved, topo, facts)
    groups: dict[str, frozenset[int]] = {}
    devices: list[Device] = []
    if settings.mode != "grouped":
        for cpu in sorted(regular | isolated):
            name = f"cpu-{cpu}"
            groups[name] = frozenset({cpu})
            devices.append(_individual(topo, facts, cpu, isolated=cpu in isolated))
    else:
        for name, cpus, is_isolated in _groups(settings, topo, facts, regular, isolated):
            device = _grouped(settings, topo, facts, name, cpus, isolated=is_isolated)
            if device is not None:
                groups[name] = cpus
                devices.append(device)
    if settings.node_allocatable:
        devices = [with_node_allocatable(d) for d in devices]
    return devices, groups


def with_node_allocatable(device: Device) -> Device:
    """The device with KEP-5517's ``nodeAllocatableResources``: what it counts as ``cpu``.

    A grouped device counts the ``cpu`` capacity a claim consumes, one node CPU per unit; an
    individual device counts one node CPU per allocation.
    """
    if CAPACITY in device.capacity:
        mapping = NodeAllocatableMapping(capacity_key=CAPACITY, capacity_multiplier="1")
    else:
        mapping = NodeAllocatableMapping(device_multiplier="1")
    return device.model_copy(
        update={"node_allocatable_resources": {"cpu": NodeAllocatableResource(mapping=mapping)}}
    )


def _common(facts: CpuFacts, *, isolated: bool) -> dict[str, DeviceAttribute]:
    attrs = {
        "smt": DeviceAttribute(bool=facts.smt),
        "isolated": DeviceAttribute(bool=isolated),
    }
    if facts.model:
        attrs["model"] = DeviceAttribute(string=facts.model)
    return attrs


def _individual(topo: CpuTopology, facts: CpuFacts, cpu: int, *, isolated: bool) -> Device:
    info = topo.info(cpu)
    attrs = _common(facts, isolated=isolated)
    attrs.update(
        {
            NUMA_NODE: DeviceAttribute(int=info.numa_node),
            "socket": DeviceAttribute(int=info.socket_id),
            "core": DeviceAttribute(int=info.core_id),
            "cpu": DeviceAttribute(int=cpu),
        }
    )
    if cpu in facts.die_of:
        attrs["die"] = DeviceAttribute(int=facts.die_of[cpu])
    if cpu in facts.l3_of:
        attrs["l3"] = DeviceAttribute(int=facts.l3_of[cpu])
    return Device(name=f"cpu-{cpu}", attributes=attrs)


def _groups(
    settings: CpuSettings,
    topo: CpuTopology,
    facts: CpuFacts,
    regular: frozenset[int],
    isolated: frozenset[int],
) -> list[tuple[str, frozenset[int], bool]]:
    by = settings.group_by
    if by == "numa":
        units = [(n, topo.cpus_in_numa_node(n)) for n in sorted(topo.numa_nodes())]
    elif by == "socket":
        units = [(s, topo.cpus_in_socket(s)) for s in sorted(topo.sockets())]
    elif facts.l3_of.keys() >= topo.cpu_ids:
        l3: dict[int, set[int]] = {}
        for cpu, cache in facts.l3_of.items():
            l3.setdefault(cache, set()).add(cpu)
        units = [(u, frozenset(l3[u])) for u in sorted(l3)]
    else:  # no L3 ids in sysfs: kubelet's uncore groups
        units = [(u, topo.cpus_in_uncore_cache(u)) for u in sorted(topo.uncore_caches())]
    out: list[tuple[str, frozenset[int], bool]] = []
    for unit, cpus in units:
        if cpus & regular:
            out.append((f"cpu-{by}-{unit}", cpus & regular, False))
        if cpus & isolated:
            out.append((f"cpu-{by}-{unit}-isolated", cpus & isolated, True))
    return out


def _grouped(
    settings: CpuSettings,
    topo: CpuTopology,
    facts: CpuFacts,
    name: str,
    cpus: frozenset[int],
    *,
    isolated: bool,
) -> Device | None:
    per = facts.threads_per_core if settings.full_pcpus_only else 1
    per = max(per, 1)
    if len(cpus) < per:
        log.warning("%s: %d CPUs, fewer than one whole core; not published", name, len(cpus))
        return None
    infos = [topo.info(c) for c in cpus]
    numas = {i.numa_node for i in infos}
    sockets = {i.socket_id for i in infos}
    attrs = _common(facts, isolated=isolated)
    attrs.update(
        {
            "cpuCount": DeviceAttribute(int=len(cpus)),
            "coreCount": DeviceAttribute(int=len({i.core_id for i in infos})),
            "numaNodeCount": DeviceAttribute(int=len(numas)),
            "threadsPerCore": DeviceAttribute(int=facts.threads_per_core),
        }
    )
    if len(numas) == 1:
        attrs[NUMA_NODE] = DeviceAttribute(int=next(iter(numas)))
    if len(sockets) == 1:
        attrs["socket"] = DeviceAttribute(int=next(iter(sockets)))
    for attr, values in (("die", facts.dies(cpus)), ("l3", facts.l3s(cpus))):
        if len(values) == 1:
            attrs[attr] = DeviceAttribute(int=next(iter(values)))
    # validRange rules: min + step <= value; with full_pcpus_only the scheduler rounds a
    # request up to whole cores.
    step = str(per) if len(cpus) >= 2 * per else None
    capacity = DeviceCapacity(
        value=str(len(cpus)),
        request_policy=RequestPolicy(
            default=str(per), valid_range=ValidRange(min=str(per), step=step)
        ),
    )
    return Device(
        name=name,
        attributes=attrs,
        capacity={CAPACITY: capacity},
        allow_multiple_allocations=True,
    )


def shared(devices: Sequence[Device]) -> DeviceInventory:
    """``devices`` as published under a driver another backend shares (a composite's).

    Every device gets a ``type`` (``cpu-group`` or ``cpu``), which the classes select by, and
    every CPU group is a counter set ``<device>-counters`` with its ``cpu`` count that the group
    consumes whole, so a composite's shares of it draw on the same counters
    (``docs/composite.md``).
    """
    out: list[Device] = []
    sets: list[CounterSet] = []
    for dev in devices:
        kind = GROUP_TYPE if CAPACITY in dev.capacity else CPU_TYPE
        attrs = {**dev.attributes, "type": DeviceAttribute(string=kind)}
        uses: tuple[CounterConsumption, ...] = ()
        if kind == GROUP_TYPE:
            cs = CounterSet(
                name=f"{dev.name}-counters", counters={CAPACITY: dev.capacity[CAPACITY].value}
            )
            sets.append(cs)
            uses = (CounterConsumption(counter_set=cs.name, counters=dict(cs.counters)),)
        out.append(dev.model_copy(update={"attributes": attrs, "consumes_counters": uses}))
    return DeviceInventory(devices=tuple(out), counter_sets=tuple(sets))
