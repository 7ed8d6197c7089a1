"""The search: kube-scheduler's structured-parameters allocator (1.37), in Python.

For one node and the claims of one pod, requests are worked through depth first: claim after
claim, request after request, device after device. Each device is the first candidate, in pool
and slice order, that is not in use, passes the class and request selectors, has the capacity
left, fits the shared counters, whose taints are tolerated and that keeps every constraint
satisfiable so far. A ``firstAvailable`` request tries its subrequests in order and the first
under which the whole rest of the search succeeds wins. When a later step fails, the search
backtracks. Within one request only combinations are tried, not permutations (a device is only
followed by devices after it). The first complete solution is the answer: nothing is scored
inside a node.

Claims already allocated on the node are input: their exclusive devices are in use, their
shares of multi-allocatable devices use capacity, and both use shared counters.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from drakit.allocator.api import (
    AllocationResult,
    DeviceClass,
    DeviceConstraint,
    DeviceRequestAllocationResult,
    DeviceTaint,
    DeviceToleration,
    Node,
    RequestPolicy,
    ResourceClaim,
    ResourceSlice,
)
from drakit.allocator.api import (
    _RequestBody as RequestBody,
)
from drakit.allocator.cel import CelError, Selector, compile_selector
from drakit.allocator.pools import Candidate, DeviceID, Pool, gather_pools, node_matches
from drakit.allocator.quantity import format_quantity, parse_quantity
from drakit.errors import DrakitError

__all__ = [
    "AllocatedState",
    "AllocationError",
    "Allocator",
    "RequestData",
    "SearchCutOff",
    "consumed_capacity",
    "taint_blocking",
]

_ZERO = 0

MAX_RESULTS = 32
"""``AllocationResultsMaxSize``."""

DEFAULT_BUDGET = 2_000_000
"""Search steps before giving up (kube-scheduler stops a Filter after 10 s instead)."""


class AllocationError(DrakitError):
    """Allocation on this node cannot even be attempted, or was aborted (like a Filter error)."""


class SearchCutOff(AllocationError):
    """The search spent its step budget without an answer (neither fits nor cannot fit)."""

    def __init__(self, steps: int) -> None:
        super().__init__(
            f"search cut off after {steps} steps: the claim has too many equivalent choices to "
            "try them all (kube-scheduler stops a Filter after 10 s); whether it fits is unknown"
        )
        self.steps = steps


class _Stop(Exception):
    """The result limit was reached (``errAllocationResultMaxSizeExceeded``)."""


# --- already allocated claims ------------------------------------------------------------------


@dataclass
class AllocatedState:
    """What claims allocated earlier hold (the scheduler's ``AllocatedState``)."""

    devices: set[DeviceID] = field(default_factory=set)
    shared: set[DeviceID] = field(default_factory=set)
    capacity: dict[DeviceID, dict[str, Fraction]] = field(default_factory=dict)
    owners: dict[DeviceID, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, claims: Iterable[ResourceClaim]) -> AllocatedState:
        """Collect from claims with ``status.allocation``; admin-access results hold nothing."""
        state = cls()
        for claim in claims:
            alloc = claim.status.allocation
            if alloc is None:
                continue
            ref = claim.ref
            for r in alloc.devices.results:
                if r.admin_access:
                    continue
                dev = (r.driver, r.pool, r.device)
                state.owners.setdefault(dev, []).append(ref)
                if r.share_id is None:
                    state.devices.add(dev)
                    continue
                state.shared.add(dev)
                total = state.capacity.setdefault(dev, {})
                for name, q in (r.consumed_capacity or {}).items():
                    total[name] = total.get(name, Fraction(0)) + parse_quantity(q)
        return state

    def holds(self, dev: DeviceID) -> bool:
        """``IsDeviceAllocated``: exclusively or by at least one share."""
        return dev in self.devices or dev in self.shared or dev in self.capacity


# --- requests ----------------------------------------------------------------------------------


@dataclass(eq=False)
class RequestData:
    """One request without subrequests, or one subrequest."""

    claim: int
    index: int
    sub: int
    base: str
    sub_name: str
    body: RequestBody
    admin_access: bool
    device_class: DeviceClass
    class_selectors: tuple[Selector, ...]
    selectors: tuple[Selector, ...]
    num_devices: int = 0
    all_devices: list[Candidate] | None = None
    parent: bool = False
    selected_sub: int = 0

    @property
    def name(self) -> str:
        """``request`` or ``request/subrequest``."""
        return f"{self.base}/{self.sub_name}" if self.parent else self.base


def taint_blocking(
    taints: Iterable[DeviceTaint], tolerations: Sequence[DeviceToleration]
) -> DeviceTaint | None:
    """The first ``NoSchedule``/``NoExecute`` taint no toleration covers (others are ignored)."""
    for taint in taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(
            t.tolerates(taint) for t in tolerations
        ):
            return taint
    return None


def _consume(  # noqa: PLR0911 - the cases of calculateConsumedCapacity
    requested: Fraction | None, cap_value: Fraction, policy: RequestPolicy | None
) -> Fraction:
    """``calculateConsumedCapacity``: what one allocation takes of one capacity."""
    pol = policy
    if requested is None:
        if pol is not None and pol.default is not None:
            return parse_quantity(pol.default)
        return cap_value
    if pol is None:
        return requested
    if pol.valid_range is not None:
        low = parse_quantity(pol.valid_range.min)
        if requested < low:
            return low
        if pol.valid_range.step is None:
            return requested
        step = parse_quantity(pol.valid_range.step)
        n = -(-(requested - low) // step)
        return low + step * n
    if pol.valid_values is not None:
        for v in pol.valid_values:
            if requested <= parse_quantity(v):
                return parse_quantity(v)
        return requested
    return requested


def _violates(consumed: Fraction, policy: RequestPolicy | None) -> bool:  # noqa: PLR0911
    if policy is None:
        return False
    if policy.default is not None and consumed == parse_quantity(policy.default):
        return False
    if policy.valid_range is not None:
        r = policy.valid_range
        if r.max is not None and consumed > parse_quantity(r.max):
            return True
        if r.step is not None:
            return (consumed - parse_quantity(r.min)) % parse_quantity(r.step) != 0
        return False
    if policy.valid_values:
        return all(consumed != parse_quantity(v) for v in policy.valid_values)
    return False


def consumed_capacity(body: RequestBody, cand: Candidate) -> dict[str, Fraction] | None:
    """What allocating ``cand`` for ``body`` takes of each capacity.

    ``None`` when the request names a capacity the device does not have.
    """
    wanted = body.capacity.requests if body.capacity is not None else {}
    caps = cand.device.capacity
    if any(name not in caps for name in wanted):
        return None
    return {
        name: _consume(
            parse_quantity(wanted[name]) if name in wanted else None, cap.amount, cap.request_policy
        )
        for name, cap in caps.items()
    }


# --- constraints -------------------------------------------------------------------------------


def lookup_attribute(cand: Candidate, name: str) -> frozenset[tuple[str, object]] | None:
    """The attribute's values (a set, for list attributes), by full name or driver-local id."""
    attrs = cand.device.attributes
    attr = attrs.get(name)
    if attr is None:
        domain, _, ident = name.partition("/")
        if domain == cand.id[0]:
            attr = attrs.get(ident)
    return None if attr is None else frozenset(attr.values())


class Constraint:
    """``matchAttribute`` or ``distinctAttribute`` tracked while devices are added."""

    def __init__(self, spec: DeviceConstraint) -> None:
        self.spec = spec
        self.requests = set(spec.requests)
        self.attribute = spec.attribute
        self.match = spec.match_attribute is not None
        self.stack: list[frozenset[tuple[str, object]]] = []

    def applies(self, base: str, sub: str) -> bool:
        """Whether a device for this request is subject to the constraint."""
        if not self.requests:
            return True
        return base in self.requests or (bool(sub) and f"{base}/{sub}" in self.requests)

    def add(self, base: str, sub: str, cand: Candidate) -> bool:
        """Add if the constraint still holds; False (nothing added) otherwise."""
        if not self.applies(base, sub):
            return True
        values = lookup_attribute(cand, self.attribute)
        if values is None:
            return False
        if self.stack:
            if self.match:
                common = frozenset.intersection(*self.stack)
                if not values & common:
                    return False
            elif any(values & seen for seen in self.stack):
                return False
        self.stack.append(values)
        return True

    def remove(self, base: str, sub: str) -> None:
        """Undo the matching :meth:`add`."""
        if self.applies(base, sub):
            self.stack.pop()


# --- the allocator -----------------------------------------------------------------------------


@dataclass
class _Result:
    data: RequestData
    cand: Candidate
    share_id: str | None
    consumed: dict[str, Fraction] | None


class Allocator:
    """Allocate claims on one node.

    Args:
        node: The node.
        slices: Every ResourceSlice in the cluster (those for other nodes are ignored).
        classes: DeviceClasses by name.
        allocated: Claims already allocated (their devices, shares and counters are in use).
        budget: Search steps before :class:`SearchCutOff` (an :class:`AllocationError`).
        share_ids: Makes share IDs (default: random UUIDs, as the scheduler).
        state: What ``allocated`` holds, when already collected (for many nodes at once).
    """

    def __init__(
        self,
        node: Node,
        slices: Sequence[ResourceSlice],
        classes: Mapping[str, DeviceClass],
        allocated: Iterable[ResourceClaim] = (),
        *,
        budget: int = DEFAULT_BUDGET,
        share_ids: Callable[[], str] | None = None,
        state: AllocatedState | None = None,
    ) -> None:
        self.node = node
        self.classes = dict(classes)
        self.state = state if state is not None else AllocatedState.of(allocated)
        self.pools: list[Pool] = gather_pools(slices, node)
        self.budget = budget
        self.steps = 0
        self._share_id = share_ids or (lambda: str(uuid.uuid4()))

    # -- entry point ----------------------------------------------------------------------------

    def allocate(self, claims: Sequence[ResourceClaim]) -> list[AllocationResult] | None:
        """One allocation result per claim, or ``None`` when they do not fit on this node.

        Raises:
            AllocationError: like a scheduler Filter error (unknown class, CEL runtime error,
                ``All`` over a pool being updated, the search budget spent).
        """
        self.claims = list(claims)
        self.requests: dict[tuple[int, int, int], RequestData] = {}
        self.constraints: list[list[Constraint]] = []
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, list[dict[str, Fraction]]] = {}
        self.consumed_counters: dict[str, dict[str, dict[str, Fraction | int]]] = {}
        self.available_counters: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.overdrawn: set[str] = set()
        self.results: list[list[_Result]] = [[] for _ in claims]
        for ci, claim in enumerate(self.claims):
            total = 0
            for ri, req in enumerate(claim.spec.devices.requests):
                if req.first_available:
                    least = MAX_RESULTS + 1
                    for si, sub in enumerate(req.first_available):
                        data = self._request(ci, ri, si, req.name, sub.name, sub, False, True)
                        least = min(least, data.num_devices)
                else:
                    if req.exactly is None:  # excluded by the model's validator
                        raise AllocationError(
                            f"request {req.name}: neither exactly nor firstAvailable"
                        )
                    data = self._request(
                        ci, ri, 0, req.name, "", req.exactly, bool(req.exactly.admin_access), False
                    )
                    least = data.num_devices
                if least > MAX_RESULTS - total:
                    raise AllocationError(
                        f"claim {claim.ref}, request {req.name}: adding {least} devices exceeds "
                        f"the claim limit of {MAX_RESULTS}, with {total} already accounted for"
                    )
                total += least
            self.constraints.append([Constraint(c) for c in claim.spec.devices.constraints])
        try:
            done = self._one(0, 0, 0, 0, False, (0, 0, 0))
        except _Stop:
            done = False
        if not done:
            return None
        return [self._build(ci) for ci in range(len(self.claims))]

    # -- request validation ---------------------------------------------------------------------

    def _request(
        self,
        ci: int,
        ri: int,
        si: int,
        base: str,
        sub: str,
        body: RequestBody,
        admin: bool,
        parent: bool,
    ) -> RequestData:
        claim = self.claims[ci]
        label = f"{base}/{sub}" if parent else base
        cls = self.classes.get(body.device_class_name)
        if cls is None:
            raise AllocationError(
                f"claim {claim.ref}, request {label}: device class "
                f"{body.device_class_name} not found"
            )
        try:
            class_sel = tuple(compile_selector(s.cel.expression) for s in cls.spec.selectors)
        except CelError as e:
            raise AllocationError(f"class {cls.name}: {e}") from None
        try:
            req_sel = tuple(compile_selector(s.cel.expression) for s in body.selectors)
        except CelError as e:
            raise AllocationError(f"claim {claim.ref}, request {label}: {e}") from None
        data = RequestData(
            ci, ri, si, base, sub, body, admin, cls, class_sel, req_sel, parent=parent
        )
        if body.allocation_mode == "ExactCount":
            data.num_devices = body.device_count
        else:
            data.all_devices = []
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {claim.ref}, request {label}: asks for all devices, but resource "
                        f"pool {pool.id} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {claim.ref}, request {label}: asks for all devices, but resource "
                        f"pool {pool.id} is currently invalid"
                    )
                for cand in pool.candidates:
                    if self.selectable(data, cand) and self._capacity_fits(data, cand, static=True):
                        data.all_devices.append(cand)
            data.num_devices = len(data.all_devices)
        self.requests[(ci, ri, si)] = data
        return data

    # -- checks ---------------------------------------------------------------------------------

    def selectable(self, data: RequestData, cand: Candidate) -> bool:
        """Class and request selectors, and per-device node selection.

        Raises:
            AllocationError: a CEL runtime error (the scheduler aborts the node too).
        """
        for sel in data.class_selectors:
            if not self._eval(sel, cand, f"class {data.device_class.name}"):
                return False
        for sel in data.selectors:
            if not self._eval(sel, cand, f"claim {self.claims[data.claim].ref}"):
                return False
        if cand.slice.spec.per_device_node_selection:
            d = cand.device
            return node_matches(self.node, d.node_name, d.all_nodes, d.node_selector)
        return True

    @staticmethod
    def _eval(sel: Selector, cand: Candidate, where: str) -> bool:
        try:
            return cand.matches(sel)
        except CelError as e:
            raise AllocationError(f"{where}: device {'/'.join(cand.id)}: {e}") from None

    def capacity_in_use(self, dev: DeviceID) -> dict[str, Fraction]:
        """Capacity of ``dev`` taken by allocated claims and by this search so far."""
        total = dict(self.state.capacity.get(dev, {}))
        for share in self.allocating_capacity.get(dev, []):
            for k, v in share.items():
                total[k] = total.get(k, Fraction(0)) + v
        return total

    def _capacity_fits(self, data: RequestData, cand: Candidate, *, static: bool = False) -> bool:
        consumed = consumed_capacity(data.body, cand)
        if consumed is None:
            return False
        used = {} if static else self.capacity_in_use(cand.id)
        for name, cap in cand.device.capacity.items():
            if _violates(consumed[name], cap.request_policy):
                return False
            if used.get(name, Fraction(0)) + consumed[name] > cap.amount:
                return False
        return True

    def in_use(self, dev: DeviceID) -> bool:
        """``deviceInUse``: allocated exclusively, or picked exclusively in this search."""
        return dev in self.state.devices or bool(self.allocating.get(dev))

    def _shared_in_use(self, dev: DeviceID) -> bool:
        return (
            dev in self.state.capacity
            or dev in self.state.shared
            or dev in self.allocating_capacity
        )

    def pool_counters(self, pool: Pool) -> dict[str, dict[str, Fraction]]:
        """The pool's counters less what allocated claims' devices draw."""
        have = self.available_counters.get(pool.id)
        if have is None:
            have = {name: dict(cs) for name, cs in pool.counter_sets.items()}
            for dev, device in pool.all_devices():
                if not self.state.holds(dev):
                    continue
                for use in device.consumes_counters:
                    cs = have.get(use.counter_set, {})
                    for name, c in use.counters.items():
                        if name in cs:
                            cs[name] -= parse_quantity(c.value)
            self.available_counters[pool.id] = have
            if any(v < 0 for cs in have.values() for v in cs.values()):
                self.overdrawn.add(pool.id)
        return have

    def _take_counters(self, cand: Candidate, sign: int) -> None:
        used = self.consumed_counters.setdefault(cand.pool.id, {})
        for set_name, name, value in cand.draws:
            cs = used.setdefault(set_name, {})
            cs[name] = cs.get(name, _ZERO) + value if sign > 0 else cs.get(name, _ZERO) - value

    def _counters_fit(self, cand: Candidate) -> bool:
        """Whether every counter of the pool covers what this search draws, with ``cand``.

        Only the counters ``cand`` draws from are compared, unless allocated claims overdraw
        one of the pool's (then all are, as each addition then fails): draws are added and
        taken back last in, first out, so every earlier state of the search passed this check
        over all counters, and the others did not change.
        """
        pool_id = cand.pool.id
        available = self.pool_counters(cand.pool)
        self._take_counters(cand, +1)
        used = self.consumed_counters[pool_id]
        checks: Iterable[tuple[str, str]] = (
            [(s, n) for s, counters in available.items() for n in counters]
            if pool_id in self.overdrawn
            else [(s, n) for s, n, _ in cand.draws]
        )
        for set_name, name in checks:
            value = available.get(set_name, {}).get(name)
            if value is not None and value < used.get(set_name, {}).get(name, _ZERO):
                self._take_counters(cand, -1)
                return False
        return True

    # -- the search -----------------------------------------------------------------------------

    def _one(  # noqa: PLR0911, PLR0912, PLR0915 - one step of the scheduler's search, kept whole
        self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: tuple[int, int, int]
    ) -> bool:
        self.steps += 1
        if self.steps > self.budget:
            raise SearchCutOff(self.budget)
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        if ri >= len(claim.spec.devices.requests):
            try:
                return self._one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _Stop:
                return False
        data = self.requests[(ci, ri, si)]
        if not in_sub and data.parent:
            all_stopped = True
            sub = 0
            while (ci, ri, sub) in self.requests:
                try:
                    ok = self._one(ci, ri, sub, 0, True, (0, 0, 0))
                except _Stop:
                    sub += 1
                    continue
                all_stopped = False
                if ok:
                    self.requests[(ci, ri, 0)].selected_sub = sub
                    return True
                sub += 1
            if all_stopped:
                raise _Stop
            return False
        if data.all_devices is not None and not data.all_devices:
            return False
        if di >= data.num_devices:
            return self._one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if data.num_devices - di > MAX_RESULTS - len(self.results[ci]):
            raise _Stop
        if data.all_devices is not None:
            cand = data.all_devices[di]
            undo = self._allocate_device(data, cand, must=True)
            if undo is None:
                return False
            try:
                ok = self._one(ci, ri, si, di + 1, in_sub, (0, 0, 0))
            except BaseException:
                undo()
                raise
            if not ok:
                undo()
            return ok
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            first = start[1] if pi == start[0] else 0
            for k in range(first, len(pool.candidates)):
                cand = pool.candidates[k]
                if data.admin_access and ci in self.allocating.get(cand.id, ()):
                    continue
                if not data.admin_access and self.in_use(cand.id):
                    continue
                if not self.selectable(data, cand):
                    continue
                if not self._capacity_fits(data, cand):
                    continue
                undo = self._allocate_device(data, cand, must=False)
                if undo is None:
                    continue
                try:
                    ok = self._one(ci, ri, si, di + 1, in_sub, (pi, k + 1, 0))
                except BaseException:
                    undo()
                    raise
                if ok:
                    return True
                undo()
        return False

    def _allocate_device(  # noqa: PLR0911 - the rejection paths of allocateDevice
        self, data: RequestData, cand: Candidate, *, must: bool
    ) -> Callable[[], None] | None:
        ci = data.claim
        multi = bool(cand.device.allow_multiple_allocations)
        if not multi and data.admin_access and ci in self.allocating.get(cand.id, ()):
            return None
        if not data.admin_access and self.in_use(cand.id):
            return None
        reserved = False
        if cand.device.consumes_counters and not (multi and self._shared_in_use(cand.id)):
            if not self._counters_fit(cand):
                return None
            reserved = True
        undo_steps: list[Callable[[], None]] = []
        if reserved:
            undo_steps.append(lambda: self._take_counters(cand, -1))

        def rollback() -> None:
            for step in reversed(undo_steps):
                step()

        if taint_blocking(cand.device.taints, data.body.tolerations) is not None:
            rollback()
            return None
        for c in self.constraints[ci]:
            if not c.add(data.base, data.sub_name, cand):
                rollback()
                if must:
                    raise AllocationError(
                        f"claim {self.claims[ci].ref}, request {data.name}: cannot add device "
                        f"{'/'.join(cand.id)} because a claim constraint would not be satisfied"
                    )
                return None
            undo_steps.append(lambda c=c: c.remove(data.base, data.sub_name))  # type: ignore[misc]
        if not multi:
            self.allocating.setdefault(cand.id, set()).add(ci)
            undo_steps.append(lambda: self.allocating[cand.id].discard(ci))
        if not self._capacity_fits(data, cand):
            rollback()
            return None
        share_id: str | None = None
        consumed: dict[str, Fraction] | None = None
        if multi:
            consumed = consumed_capacity(data.body, cand) or {}
            share_id = self._share_id()
            existed = cand.id in self.allocating_capacity
            shares = self.allocating_capacity.setdefault(cand.id, [])
            shares.append(consumed)

            def unshare() -> None:
                shares.remove(consumed)
                # the entry marks the device as shared (its counters taken) while a share is left
                if not existed and not shares:
                    del self.allocating_capacity[cand.id]

            undo_steps.append(unshare)
        self.results[ci].append(_Result(data, cand, share_id, consumed or None))
        undo_steps.append(lambda: self._drop_result(ci))
        return rollback

    def _drop_result(self, ci: int) -> None:
        self.results[ci].pop()

    # -- results --------------------------------------------------------------------------------

    def _selected(self, ci: int, ri: int) -> RequestData:
        data = self.requests[(ci, ri, 0)]
        if data.parent:
            return self.requests[(ci, ri, data.selected_sub)]
        return data

    def _build(self, ci: int) -> AllocationResult:
        claim = self.claims[ci]
        results = [
            DeviceRequestAllocationResult.model_validate(
                {
                    "request": r.data.name,
                    "driver": r.cand.id[0],
                    "pool": r.cand.id[1],
                    "device": r.cand.id[2],
                    "adminAccess": True if r.data.admin_access else None,
                    "tolerations": [
                        t.model_dump(by_alias=True, exclude_defaults=True)
                        for t in r.data.body.tolerations
                    ],
                    "shareID": r.share_id,
                    "consumedCapacity": (
                        {k: format_quantity(v) for k, v in r.consumed.items()}
                        if r.consumed
                        else None
                    ),
                    "bindingConditions": r.cand.device.binding_conditions,
                    "bindingFailureConditions": r.cand.device.binding_failure_conditions,
                }
            )
            for r in self.results[ci]
        ]
        config: list[dict[str, object]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        requests = claim.spec.devices.requests
        for ri in range(len(requests)):
            data = self._selected(ci, ri)
            cls = data.device_class
            if cls.name in class_ranges:
                lo, hi = class_ranges[cls.name]
                for entry in config[lo:hi]:
                    entry["requests"].append(data.name)  # type: ignore[attr-defined]
                continue
            lo = len(config)
            for c in cls.spec.config:
                config.append(
                    {
                        "source": "FromClass",
                        "requests": [data.name],
                        "opaque": c.opaque.model_dump(),
                    }
                )
            class_ranges[cls.name] = (lo, len(config))
        chosen = {
            ri: f"{req.name}/{self._selected(ci, ri).sub_name}"
            for ri, req in enumerate(requests)
            if req.first_available
        }
        for cc in claim.spec.devices.config:
            entry = {
                "source": "FromClaim",
                "requests": list(cc.requests),
                "opaque": cc.opaque.model_dump(),
            }
            if not cc.requests or any(
                req.name in cc.requests or chosen.get(ri) in cc.requests
                for ri, req in enumerate(requests)
            ):
                config.append(entry)
        for entry in config:
            names = entry["requests"]
            if names and all(
                req.name in names or chosen.get(ri) in names  # type: ignore[operator]
                for ri, req in enumerate(requests)
            ):
                entry["requests"] = []
        for entry in config:
            if not entry["requests"]:
                del entry["requests"]
        return AllocationResult.model_validate(
            {
                "devices": {"results": [r.to_api() for r in results], "config": config},
                "nodeSelector": self._node_selector(ci),
            }
        )

    def _node_selector(self, ci: int) -> dict[str, object] | None:
        fields: list[dict[str, object]] = []
        exprs: list[dict[str, object]] = []
        for r in self.results[ci]:
            spec = r.cand.slice.spec
            dev = r.cand.device
            name, selector = (
                (dev.node_name, dev.node_selector)
                if spec.per_device_node_selection
                else (spec.node_name, spec.node_selector)
            )
            if name:
                return {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": [self.node.name],
                                }
                            ]
                        }
                    ]
                }
            if selector is not None and selector.node_selector_terms:
                term = selector.node_selector_terms[0]
                for src, dst in ((term.match_fields, fields), (term.match_expressions, exprs)):
                    for req in src:
                        dumped = req.model_dump(by_alias=True)
                        if dumped not in dst:
                            dst.append(dumped)
        if not fields and not exprs:
            return None
        term_out: dict[str, object] = {}
        if fields:
            term_out["matchFields"] = fields
        if exprs:
            term_out["matchExpressions"] = exprs
        return {"nodeSelectorTerms": [term_out]}
