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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from drakit.config import PluginSettings, validation_errors
from drakit.context import PluginContext
from drakit.cpuset import CpuListError, format_cpulist, parse_cpulist
from drakit.deviceclasses import DeviceClassSpec, shared_driver_class
from drakit.errors import ConfigInvalid, PermanentError, RetryableError
from drakit.hookspecs import hookimpl
from drakit.models import (
    AllocatedDevice,
    CdiEdits,
    ClaimInfo,
    CounterConsumption,
    CounterSet,
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
from drakit_cpu.allocator import (
    AllocationError,
    SMTAlignmentError,
    take_distributed,
    take_packed,
    take_spread,
)
from drakit_cpu.discovery import CpuFacts, read_cpu_facts
from drakit_cpu.policy import CLAIM_FIELDS, POLICIES, Policy, PolicyOptions, policy_conflicts
from drakit_cpu.topology import CpuTopology

__all__ = [
    "CAPACITY",
    "CPUSET_ENV_PREFIX",
    "CPU_CONFIG_API_VERSION",
    "CPU_TYPE",
    "GROUP_TYPE",
    "CpuConfig",
    "CpuPlugin",
    "CpuSettings",
    "cpuset_env_name",
]

log = logging.getLogger(__name__)

CPU_CONFIG_API_VERSION = "cpu.drakit.io/v1alpha1"
CAPACITY = "cpu"
"""The consumable capacity of grouped devices (in the driver's domain)."""
CPUSET_ENV_PREFIX = "DRAKIT_CPUSET_"
GROUP_TYPE = "cpu-group"
CPU_TYPE = "cpu"
"""The ``type`` of grouped and individual devices under a shared driver (``docs/composite.md``)."""
_GROUPED_ONLY = ("policy", "prefer_uncore", "group_size")
_POLICIES: dict[str, Policy] = {p: p for p in POLICIES}


def _cpulist(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)
    if not isinstance(v, str):
        raise ValueError(f'{v!r} is not a CPU list (example: "0-3,8")')
    try:
        return format_cpulist(parse_cpulist(v))
    except CpuListError as e:
        raise ValueError(str(e)) from None


def _conflict(option: str, value: Any, info: ValidationInfo) -> Any:
    """Field validator body: reject ``option=value`` if it breaks a rule with ``policy``."""
    policy = info.data.get("policy")
    kwargs: dict[str, Any] = {"prefer_uncore": None, "group_size": None, "full_pcpus_only": None}
    kwargs[option] = value
    for _, message in policy_conflicts(policy, **kwargs):
        raise ValueError(message)
    return value


class CpuSettings(PluginSettings):
    """``plugins.cpu``: the node's CPU devices and its default allocation policy.

    ``policy``, ``prefer_uncore`` and ``group_size`` form the node's default policy for claims
    that do not choose one; ``full_pcpus_only`` is enforced for every claim.
    """

    reserved: str = Field(default="", description="CPUs never published or handed out (CPU list)")
    mode: Literal["grouped", "individual"] = "grouped"
    group_by: Literal["numa", "socket", "l3"] = "numa"
    policy: Policy = Field(default="packed", description="Default per-claim policy")
    prefer_uncore: bool = Field(default=False, description="packed: align to L3 groups first")
    group_size: int | None = Field(
        default=None, ge=1, le=64, description="distributed: CPUs kept together (default: SMT)"
    )
    full_pcpus_only: bool = Field(default=False, description="Hand out whole physical cores only")
    isolated_cpus: Literal["exclude", "publish"] = Field(
        default="exclude",
        description="CPUs in sys/devices/system/cpu/isolated: never publish, or publish apart",
    )

    _reserved = field_validator("reserved", mode="before")(_cpulist)

    @field_validator("group_by", "policy", "prefer_uncore", "group_size")
    @classmethod
    def _grouped_only(cls, v: Any, info: ValidationInfo) -> Any:
        if info.data.get("mode") == "individual":
            raise ValueError(
                "has no effect with mode 'individual', where the scheduler picks the CPUs; "
                "remove it or use mode 'grouped'"
            )
        if info.field_name in ("prefer_uncore", "group_size"):
            return _conflict(str(info.field_name), v, info)
        return v

    @field_validator("full_pcpus_only")
    @classmethod
    def _full(cls, v: bool, info: ValidationInfo) -> bool:
        return bool(_conflict("full_pcpus_only", v, info))


class CpuConfig(BaseModel):
    """The per-claim opaque config (``apiVersion: cpu.drakit.io/v1alpha1``, ``kind: CpuConfig``).

    Every field is optional; a field that is not set takes the node's value. Combinations that
    kubelet rejects are rejected here with the field's name (``preferUncore: only applies to
    policy 'packed' ...``); so are unknown fields.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Literal["cpu.drakit.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["CpuConfig"]
    policy: Policy | None = None
    prefer_uncore: bool | None = Field(default=None, alias="preferUncore")
    group_size: int | None = Field(default=None, ge=1, le=64, alias="groupSize")
    full_pcpus_only: bool | None = Field(default=None, alias="fullPCPUsOnly")

    @field_validator("prefer_uncore", "group_size", "full_pcpus_only")
    @classmethod
    def _combination(cls, v: Any, info: ValidationInfo) -> Any:
        return _conflict(str(info.field_name), v, info)


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


def _whole_cpus(q: str, where: str) -> int:
    try:
        value = Decimal(q.removesuffix("m")) / (1000 if q.endswith("m") else 1)
    except InvalidOperation:
        raise PermanentError(f"{where}: consumed cpu {q!r} is not a quantity") from None
    if value <= 0 or value != value.to_integral_value():
        raise PermanentError(f"{where}: consumed cpu {q!r} must be a positive whole number of CPUs")
    return int(value)


@dataclass(frozen=True)
class _View:
    """One discovery round's result, swapped in atomically (prepare reads one snapshot)."""

    topology: CpuTopology
    facts: CpuFacts
    groups: Mapping[str, frozenset[int]]
    grouped: bool


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
        self._view: _View | None = None

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

    def allocatable(
        self, topo: CpuTopology, facts: CpuFacts
    ) -> tuple[frozenset[int], frozenset[int]]:
        """The CPUs that may be published: ``(regular, isolated)``.

        Reserved CPUs never; isolated CPUs only with ``isolated_cpus: publish`` (as a class of
        their own); with ``full_pcpus_only``, only cores whose every thread is in one class.
        """
        unknown = self.reserved - topo.cpu_ids
        if unknown:
            log.warning(
                "plugins.cpu.reserved names CPUs %s that are not online here",
                format_cpulist(unknown),
            )
        usable = topo.cpu_ids - self.reserved
        isolated = (
            usable & facts.isolated if self.settings.isolated_cpus == "publish" else frozenset()
        )
        regular = usable - facts.isolated
        if self.settings.full_pcpus_only:
            regular = frozenset(c for c in regular if topo.siblings(c) <= regular)
            isolated = frozenset(c for c in isolated if topo.siblings(c) <= isolated)
        return regular, isolated

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """Read the CPU topology and publish grouped or individual devices."""
        root = Path(node.sysfs_root)
        topo = CpuTopology.from_sysfs(root)
        facts = read_cpu_facts(root, topo)
        size, per = self.settings.group_size, facts.threads_per_core
        if self.settings.full_pcpus_only and size and per > 1 and size % per:
            raise ConfigInvalid(
                [
                    (
                        "plugins.cpu.group_size",
                        f"{size} is not a multiple of this node's {per} CPUs per core, and "
                        "full_pcpus_only hands out whole cores only",
                    )
                ]
            )
        regular, isolated = self.allocatable(topo, facts)
        grouped = self.settings.mode == "grouped"
        groups: dict[str, frozenset[int]] = {}
        devices: list[Device] = []
        if not grouped:
            for cpu in sorted(regular | isolated):
                name = f"cpu-{cpu}"
                groups[name] = frozenset({cpu})
                devices.append(self._individual(topo, facts, cpu, isolated=cpu in isolated))
        else:
            for name, cpus, is_isolated in self._groups(topo, facts, regular, isolated):
                device = self._grouped(topo, facts, name, cpus, isolated=is_isolated)
                if device is not None:
                    groups[name] = cpus
                    devices.append(device)
        self._view = _View(topology=topo, facts=facts, groups=groups, grouped=grouped)
        log.debug("published %d CPU devices (%s mode)", len(devices), self.settings.mode)
        if self.ctx.shares_driver:
            return _shared(devices)
        return DeviceInventory(devices=tuple(devices))

    def _common(self, facts: CpuFacts, *, isolated: bool) -> dict[str, DeviceAttribute]:
        attrs = {
            "smt": DeviceAttribute(bool=facts.smt),
            "isolated": DeviceAttribute(bool=isolated),
        }
        if facts.model:
            attrs["model"] = DeviceAttribute(string=facts.model)
        return attrs

    def _individual(
        self, topo: CpuTopology, facts: CpuFacts, cpu: int, *, isolated: bool
    ) -> Device:
        info = topo.info(cpu)
        attrs = self._common(facts, isolated=isolated)
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
        self, topo: CpuTopology, facts: CpuFacts, regular: frozenset[int], isolated: frozenset[int]
    ) -> list[tuple[str, frozenset[int], bool]]:
        by = self.settings.group_by
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
        self,
        topo: CpuTopology,
        facts: CpuFacts,
        name: str,
        cpus: frozenset[int],
        *,
        isolated: bool,
    ) -> Device | None:
        per = facts.threads_per_core if self.settings.full_pcpus_only else 1
        per = max(per, 1)
        if len(cpus) < per:
            log.warning("%s: %d CPUs, fewer than one whole core; not published", name, len(cpus))
            return None
        infos = [topo.info(c) for c in cpus]
        numas = {i.numa_node for i in infos}
        sockets = {i.socket_id for i in infos}
        attrs = self._common(facts, isolated=isolated)
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

    # -- configuration -------------------------------------------------------------------------

    @hookimpl
    def drakit_parse_config(
        self, api_version: str, kind: str, parameters: Mapping[str, Any]
    ) -> BaseModel | None:
        """Validate a ``CpuConfig``; errors name the field (``policy: Input should be ...``)."""
        if api_version != CPU_CONFIG_API_VERSION or kind != "CpuConfig":
            return None
        try:
            return CpuConfig.model_validate(dict(parameters))
        except ValidationError as e:
            raise ConfigInvalid(validation_errors(e)) from e

    def resolve_options(self, dev: AllocatedDevice, where: str, *, grouped: bool) -> PolicyOptions:
        """The policy for one allocated device: its ``CpuConfig`` objects over the node's.

        Configs are applied in order (class first, then claim; a later field wins). A claim
        that picks a policy other than the node's does not inherit the node's
        ``prefer_uncore``/``group_size`` (they belong to the node's policy);
        ``full_pcpus_only`` on the node applies to every claim.

        Raises:
            PermanentError: naming the ``CpuConfig`` field, for combinations the device mode,
                the node or kubelet's rules do not allow.
        """
        s = self.settings
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

    # -- prepare -------------------------------------------------------------------------------

    @hookimpl
    def drakit_prepare_devices(
        self, claim: ClaimInfo, held: Sequence[PreparedDevice]
    ) -> list[PreparedDevice]:
        """Choose concrete CPUs for each allocated device, never ones another claim holds."""
        view = self._view
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
            opts = self.resolve_options(dev, where, grouped=view.grouped)
            if not view.grouped:
                if group & taken:
                    raise PermanentError(
                        f"{where}: CPU {format_cpulist(group)} is held by another claim"
                    )
                chosen = group
                if opts.full_pcpus_only:
                    whole_cores.setdefault(dev.request, set()).update(group)
            else:
                chosen = self._choose(view, dev, where, opts, frozenset(group - taken))
            taken |= chosen
            cpus = format_cpulist(chosen)
            out.append(
                PreparedDevice(
                    request=dev.request,
                    pool=dev.pool,
                    device=dev.device,
                    edits=CdiEdits(env=(f"{cpuset_env_name(dev.device, dev.share_id)}={cpus}",)),
                    state={"cpus": cpus, "policy": opts.policy if view.grouped else "scheduler"},
                )
            )
        for request, request_cpus in whole_cores.items():
            self._check_whole_cores(topo, request, frozenset(request_cpus))
        return out

    def _choose(
        self,
        view: _View,
        dev: AllocatedDevice,
        where: str,
        opts: PolicyOptions,
        available: frozenset[int],
    ) -> frozenset[int]:
        topo = view.topology
        group = view.groups[dev.device]
        n = _whole_cpus(dev.consumed_capacity.get(CAPACITY, "1"), where)
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
            return select_cpus(topo, available, n, opts, reserved=self.reserved)
        except AllocationError as e:
            held = len(group) - len(available)
            note = (
                f" ({held} of the device's {len(group)} CPUs are held by other claims)"
                if held
                else ""
            )
            raise PermanentError(f"{where}: {opts.policy}: {e}{note}") from e

    @staticmethod
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

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: list[PreparedDevice]) -> bool:
        """CPUs return to the free set when the checkpoint record goes; nothing else to undo."""
        return True

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


def _shared(devices: Sequence[Device]) -> DeviceInventory:
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
