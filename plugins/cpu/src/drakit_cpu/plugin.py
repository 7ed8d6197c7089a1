"""drakit backend for CPUs: topology discovery, grouped or per-CPU devices, cpumanager parity.

Device modes (``plugins.cpu.mode``):

* ``grouped`` (default): one device per NUMA node, socket or L3 group (``group_by``), with a
  consumable ``cpu`` capacity (``allowMultipleAllocations``) equal to the group's allocatable
  CPUs. At prepare time the claim's share is turned into concrete CPUs by the claim's policy.
* ``individual``: one device per allocatable CPU; the scheduler picks the CPUs.

Policies (``policy``, per claim through a ``CpuConfig`` opaque object): ``packed``
(TakeByTopologyNUMAPacked, optional uncore alignment), ``distributed``
(takeByTopologyNUMADistributed with a CPU group size) and ``spread``
(distribute-cpus-across-cores). Reserved CPUs (and, by default, isolated ones) are never
published or handed out; CPUs held by other prepared claims are never handed out. The chosen
cpuset reaches the container as ``DRAKIT_CPUSET_<DEVICE>[_<SHARE>]`` through CDI.
``docs/cpu-backend.md`` is the user-facing description, including every (mode, policy) pair.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from drakit.config import PluginSettings, parse_opaque_config
from drakit.context import PluginContext
from drakit.cpuset import parse_cpulist
from drakit.deviceclasses import DeviceClassSpec, shared_driver_class
from drakit.errors import PermanentError
from drakit.hookspecs import hookimpl
from drakit.models import (
    AllocatedDevice,
    ClaimInfo,
    ContainerResources,
    ContainerView,
    DeviceInventory,
    NodeInfo,
    PreparedDevice,
)
from drakit.strategy_models import SelectionRequest, SelectionResult
from drakit_cpu.allocator import AllocationError
from drakit_cpu.config import CPU_CONFIG_API_VERSION, CpuConfig
from drakit_cpu.devices import CPU_TYPE, GROUP_TYPE, build_devices, shared
from drakit_cpu.discovery import CpuFacts, read_node
from drakit_cpu.policy import POLICIES, Policy, PolicyOptions
from drakit_cpu.prepare import CpuView, prepare_devices, resolve_options, select_cpus
from drakit_cpu.settings import CpuSettings
from drakit_cpu.topology import CpuTopology

__all__ = ["CpuPlugin"]

log = logging.getLogger(__name__)

_POLICIES: dict[str, Policy] = {p: p for p in POLICIES}


class CpuPlugin:
    """The CPU backend; see the module docstring and ``docs/cpu-backend.md``."""

    settings_model: ClassVar[type[PluginSettings]] = CpuSettings
    default_driver: ClassVar[str] = "cpu.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        if not isinstance(context.settings, CpuSettings):
            raise TypeError(f"expected CpuSettings, got {type(context.settings).__name__}")
        self.ctx = context
        self.settings = context.settings
        self.reserved = parse_cpulist(self.settings.reserved)
        self._view: CpuView | None = None

    # -- discovery -----------------------------------------------------------------------------

    @property
    def topology(self) -> CpuTopology | None:
        """The topology of the last discovery round (``None`` before the first)."""
        return self._view.topology if self._view is not None else None

    @property
    def facts(self) -> CpuFacts | None:
        """The extra CPU facts of the last discovery round."""
        return self._view.facts if self._view is not None else None

    @property
    def groups(self) -> Mapping[str, frozenset[int]]:
        """Device name -> the CPUs it stands for, from the last discovery round."""
        return self._view.groups if self._view is not None else {}

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """Read the CPU topology and publish grouped or individual devices."""
        topo, facts = read_node(Path(node.sysfs_root))
        devices, groups = build_devices(self.settings, self.reserved, topo, facts)
        grouped = self.settings.mode == "grouped"
        self._view = CpuView(topology=topo, facts=facts, groups=groups, grouped=grouped)
        log.debug("published %d CPU devices (%s mode)", len(devices), self.settings.mode)
        if self.ctx.shares_driver:
            return shared(devices)
        return DeviceInventory(devices=tuple(devices))

    # -- configuration -------------------------------------------------------------------------

    @hookimpl
    def drakit_parse_config(
        self, api_version: str, kind: str, parameters: Mapping[str, Any]
    ) -> BaseModel | None:
        """Validate a ``CpuConfig``; errors name the field (``policy: Input should be ...``)."""
        ours = (CPU_CONFIG_API_VERSION, "CpuConfig")
        return parse_opaque_config(CpuConfig, ours, api_version, kind, parameters)

    def resolve_options(self, dev: AllocatedDevice, where: str, *, grouped: bool) -> PolicyOptions:
        """The policy for one allocated device (see :func:`~drakit_cpu.prepare.resolve_options`).

        Raises:
            PermanentError: naming the ``CpuConfig`` field, for combinations the device mode,
                the node or kubelet's rules do not allow.
        """
        return resolve_options(self.settings, dev, where, grouped=grouped)

    # -- prepare -------------------------------------------------------------------------------

    @hookimpl
    def drakit_prepare_devices(
        self, claim: ClaimInfo, held: Sequence[PreparedDevice]
    ) -> list[PreparedDevice]:
        """Choose concrete CPUs for each allocated device, never ones another claim holds."""
        return prepare_devices(self.settings, self.reserved, self._view, claim, held)

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: list[PreparedDevice]) -> bool:
        """CPUs return to the free set when the checkpoint record goes; nothing else to undo."""
        return True

    # -- enforcement (NRI) ---------------------------------------------------------------------

    @hookimpl
    def drakit_container_resources(
        self,
        container: ContainerView,
        devices: Sequence[PreparedDevice],
        held: Sequence[PreparedDevice],
    ) -> ContainerResources | None:
        """The claim's CPUs for a container using CPU devices; else the shared pool.

        The shared pool is every online CPU minus those any prepared claim holds (reserved
        CPUs stay in it, as with cpumanager's static policy). The memory nodes are those of the
        CPUs (core applies them only with ``nri.memory_nodes``). ``None`` before the first
        discovery round, and for a container using CPU devices whose CPUs are unknown (a claim
        rebuilt from its CDI spec).
        """
        del container
        view = self._view
        if view is None:
            return None
        if devices:
            cpus = frozenset(
                c for d in devices for c in parse_cpulist(str(d.state.get("cpus", "")))
            )
            if not cpus:
                return None
        else:
            taken = {c for d in held for c in parse_cpulist(str(d.state.get("cpus", "")))}
            cpus = frozenset(c.cpu for c in view.topology.cpus) - taken
            if not cpus:  # never an empty cpuset: leave the container as the runtime made it
                log.warning("every CPU is held by a claim; containers without one keep theirs")
                return None
        mems = frozenset(c.numa_node for c in view.topology.cpus if c.cpu in cpus)
        return ContainerResources(cpus=cpus, mems=mems)

    @hookimpl
    def drakit_device_classes(self, driver: str) -> list[DeviceClassSpec] | None:
        """The default class; under a shared driver narrowed to CPU devices by ``type``."""
        return shared_driver_class(
            self.ctx.name, driver, (GROUP_TYPE, CPU_TYPE), shares_driver=self.ctx.shares_driver
        )

    @hookimpl
    def drakit_select_resources(
        self, strategy: str, request: SelectionRequest
    ) -> SelectionResult | None:
        """cpumanager-parity selection for ``kind == "cpu"``: packed, distributed, spread."""
        if request.kind != "cpu" or not isinstance(request.topology, CpuTopology):
            return None
        policy = _POLICIES.get(strategy)
        if policy is None:
            return None
        try:
            units = select_cpus(
                request.topology,
                request.available,
                request.count,
                PolicyOptions(
                    policy=policy,
                    prefer_uncore=bool(request.options.get("prefer_uncore")),
                    group_size=request.options.get("group_size"),
                    full_pcpus_only=bool(request.options.get("full_pcpus_only")),
                ),
                reserved=request.options.get("reserved", frozenset()),
            )
        except AllocationError as e:
            raise PermanentError(f"{strategy}: {e}") from e
        return SelectionResult(units=units)
