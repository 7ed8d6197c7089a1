"""drakit backend for CPUs: topology discovery, grouped or per-CPU devices, cpumanager parity.

Device modes (``plugins.cpu.mode``):

* ``grouped`` (default): one device per NUMA node, socket or L3 group (``group_by``), with a
  consumable ``cpu`` capacity (``allowMultipleAllocations``) equal to the group's non-reserved
  CPUs. At prepare time the claim's share is turned into concrete CPUs by the claim's policy.
* ``individual``: one device per non-reserved CPU; the scheduler picks the CPUs.

Policies (``policy``, per claim through a ``CpuConfig`` opaque object): ``packed``
(TakeByTopologyNUMAPacked, optional uncore alignment), ``distributed``
(takeByTopologyNUMADistributed with a CPU group size) and ``spread``
(distribute-cpus-across-cores). CPUs held by other prepared claims are never handed out.
The chosen cpuset reaches the container as ``DRAKIT_CPUSET_<claim>`` through CDI
(``docs/cpu-allocation.md``, "Enforcement").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from drakit.config import PluginSettings, validation_errors
from drakit.context import PluginContext
from drakit.cpuset import CpuListError, format_cpulist, parse_cpulist
from drakit.errors import ConfigInvalid, PermanentError
from drakit.hookspecs import hookimpl
from drakit.models import (
    AllocatedDevice,
    CdiEdits,
    ClaimInfo,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceInventory,
    NodeInfo,
    PreparedDevice,
    RequestPolicy,
    ValidRange,
)
from drakit.strategy_models import SelectionRequest, SelectionResult
from drakit.sysfs import NUMA_NODE
from drakit_cpu.allocator import AllocationError, take_distributed, take_packed, take_spread
from drakit_cpu.topology import CpuTopology

__all__ = ["CPU_CONFIG_API_VERSION", "CpuConfig", "CpuPlugin", "CpuSettings"]

CPU_CONFIG_API_VERSION = "cpu.drakit.io/v1alpha1"
Policy = Literal["packed", "distributed", "spread"]


def _cpulist(v: Any) -> str:
    if isinstance(v, int):
        v = str(v)
    if not isinstance(v, str):
        raise ValueError(f'{v!r} is not a CPU list (example: "0-3,8")')
    try:
        return format_cpulist(parse_cpulist(v))
    except CpuListError as e:
        raise ValueError(str(e)) from None


class CpuSettings(PluginSettings):
    """``plugins.cpu``."""

    reserved: str = Field(default="", description="CPUs never published or handed out (CPU list)")
    mode: Literal["grouped", "individual"] = "grouped"
    group_by: Literal["numa", "socket", "l3"] = "numa"
    policy: Policy = Field(default="packed", description="Default per-claim policy")
    prefer_uncore: bool = Field(default=False, description="packed: align to L3 groups first")
    group_size: int = Field(default=1, ge=1, description="distributed: CPUs kept together (SMT)")
    full_pcpus_only: bool = Field(default=False, description="Hand out whole physical cores only")

    _reserved = field_validator("reserved", mode="before")(_cpulist)


class CpuConfig(BaseModel):
    """The per-claim opaque config (``apiVersion: cpu.drakit.io/v1alpha1``, ``kind: CpuConfig``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Literal["cpu.drakit.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["CpuConfig"]
    policy: Policy | None = None
    prefer_uncore: bool | None = Field(default=None, alias="preferUncore")
    group_size: int | None = Field(default=None, ge=1, le=64, alias="groupSize")
    full_pcpus_only: bool | None = Field(default=None, alias="fullPCPUsOnly")


def _whole_cpus(q: str, where: str) -> int:
    try:
        value = Decimal(q.removesuffix("m")) / (1000 if q.endswith("m") else 1)
    except InvalidOperation:
        raise PermanentError(f"{where}: consumed cpu {q!r} is not a quantity") from None
    if value <= 0 or value != value.to_integral_value():
        raise PermanentError(f"{where}: consumed cpu {q!r} must be a positive whole number of CPUs")
    return int(value)


class CpuPlugin:
    """The CPU backend; see the module docstring."""

    settings_model: ClassVar[type[PluginSettings]] = CpuSettings
    default_driver: ClassVar[str] = "cpu.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.settings = context.settings_as(CpuSettings)
        self.reserved = parse_cpulist(self.settings.reserved)
        self.topology: CpuTopology | None = None
        self.groups: dict[str, frozenset[int]] = {}

    # -- discovery -----------------------------------------------------------------------------

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """Read the CPU topology and publish grouped or individual devices."""
        topo = CpuTopology.from_sysfs(Path(node.sysfs_root))
        self.topology = topo
        smt = topo.cpus_per_core() > 1
        usable = topo.cpu_ids - self.reserved
        self.groups = {}
        devices: list[Device] = []
        if self.settings.mode == "individual":
            for cpu in sorted(usable):
                info = topo.info(cpu)
                name = f"cpu-{cpu}"
                self.groups[name] = frozenset({cpu})
                devices.append(
                    Device(
                        name=name,
                        attributes={
                            NUMA_NODE: DeviceAttribute(int=info.numa_node),
                            "socket": DeviceAttribute(int=info.socket_id),
                            "l3": DeviceAttribute(int=info.uncore_cache_id),
                            "core": DeviceAttribute(int=info.core_id),
                            "cpu": DeviceAttribute(int=cpu),
                            "smt": DeviceAttribute(bool=smt),
                        },
                    )
                )
            return DeviceInventory(devices=tuple(devices))
        groups: list[tuple[str, int, frozenset[int]]] = []
        if self.settings.group_by == "numa":
            groups = [("numa", n, topo.cpus_in_numa_node(n)) for n in sorted(topo.numa_nodes())]
        elif self.settings.group_by == "socket":
            groups = [("socket", s, topo.cpus_in_socket(s)) for s in sorted(topo.sockets())]
        else:
            groups = [("l3", u, topo.cpus_in_uncore_cache(u)) for u in sorted(topo.uncore_caches())]
        for kind, gid, cpus in groups:
            free = cpus & usable
            if not free:
                continue
            name = f"cpu-{kind}-{gid}"
            self.groups[name] = free
            first = topo.info(min(free))
            attrs: dict[str, DeviceAttribute] = {
                "socket": DeviceAttribute(int=first.socket_id),
                "cpuCount": DeviceAttribute(int=len(free)),
                "smt": DeviceAttribute(bool=smt),
            }
            numas = {topo.info(c).numa_node for c in free}
            if len(numas) == 1:
                attrs[NUMA_NODE] = DeviceAttribute(int=numas.pop())
            if kind == "l3":
                attrs["l3"] = DeviceAttribute(int=gid)
            devices.append(
                Device(
                    name=name,
                    attributes=attrs,
                    capacity={
                        "cpu": DeviceCapacity(
                            value=str(len(free)),
                            request_policy=RequestPolicy(
                                default="1", valid_range=ValidRange(min="1", step="1")
                            ),
                        )
                    },
                    allow_multiple_allocations=True,
                )
            )
        return DeviceInventory(devices=tuple(devices))

    # -- configuration -------------------------------------------------------------------------

    @hookimpl
    def drakit_parse_config(
        self, api_version: str, kind: str, parameters: Mapping[str, Any]
    ) -> BaseModel | None:
        """Validate a ``CpuConfig``."""
        if api_version != CPU_CONFIG_API_VERSION or kind != "CpuConfig":
            return None
        try:
            return CpuConfig.model_validate(dict(parameters))
        except ValidationError as e:
            raise ConfigInvalid(validation_errors(e)) from e

    # -- prepare -------------------------------------------------------------------------------

    def _options(self, dev: AllocatedDevice) -> dict[str, Any]:
        s = self.settings
        opts: dict[str, Any] = {
            "policy": s.policy,
            "prefer_uncore": s.prefer_uncore,
            "group_size": s.group_size,
            "full_pcpus_only": s.full_pcpus_only,
        }
        for cfg in dev.config:
            if isinstance(cfg, CpuConfig):
                for key in ("policy", "prefer_uncore", "group_size", "full_pcpus_only"):
                    value = getattr(cfg, key)
                    if value is not None:
                        opts[key] = value
        return opts

    @hookimpl
    def drakit_prepare_devices(
        self, claim: ClaimInfo, held: Sequence[PreparedDevice]
    ) -> list[PreparedDevice]:
        """Choose concrete CPUs for each allocated device, never ones another claim holds."""
        taken: set[int] = set()
        for p in held:
            taken |= set(parse_cpulist(str(p.state.get("cpus", ""))))
        out: list[PreparedDevice] = []
        for dev in claim.devices:
            where = f"request {dev.request!r} device {dev.device!r}"
            group = self.groups.get(dev.device)
            if group is None:
                raise PermanentError(f"{where}: not a CPU device on this node")
            if self.settings.mode == "individual":
                if group & taken:
                    raise PermanentError(
                        f"{where}: CPU {format_cpulist(group)} is held by another claim"
                    )
                chosen = group
            else:
                n = _whole_cpus(dev.consumed_capacity.get("cpu", "1"), where)
                opts = self._options(dev)
                available = group - taken
                chosen = self.ctx.select(
                    str(opts["policy"]),
                    SelectionRequest(
                        kind="cpu",
                        count=n,
                        available=frozenset(available),
                        topology=self.topology,
                        options=opts,
                    ),
                ).units
            taken |= chosen
            cpus = format_cpulist(chosen)
            out.append(
                PreparedDevice(
                    request=dev.request,
                    pool=dev.pool,
                    device=dev.device,
                    edits=CdiEdits(
                        env=(f"DRAKIT_CPUSET_{dev.device.upper().replace('-', '_')}={cpus}",)
                    ),
                    state={"cpus": cpus},
                )
            )
        return out

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: list[PreparedDevice]) -> bool:
        """CPUs return to the free set when the checkpoint record goes; nothing else to undo."""
        return True

    @hookimpl
    def drakit_select_resources(
        self, strategy: str, request: SelectionRequest
    ) -> SelectionResult | None:
        """cpumanager-parity selection for ``kind == "cpu"``."""
        if request.kind != "cpu" or not isinstance(request.topology, CpuTopology):
            return None
        topo, opts = request.topology, request.options
        try:
            if strategy == "packed":
                units = take_packed(
                    topo,
                    request.available,
                    request.count,
                    prefer_uncore=bool(opts.get("prefer_uncore")),
                    full_pcpus_only=bool(opts.get("full_pcpus_only")),
                )
            elif strategy == "distributed":
                units = take_distributed(
                    topo,
                    request.available,
                    request.count,
                    group_size=int(opts.get("group_size", 1)),
                )
            elif strategy == "spread":
                units = take_spread(topo, request.available, request.count)
            else:
                return None
        except AllocationError as e:
            raise PermanentError(f"{strategy}: {e}") from e
        return SelectionResult(units=units)
