"""``drakit explain``: per node, the allocation kube-scheduler would make for a claim, or why none.

The allocation comes from :mod:`drakit.allocator`. When a claim does not fit on a node, the
claim is taken apart to say why, in terms a user can act on:

* per request (and per ``firstAvailable`` subrequest): how many devices it needs and which
  devices were excluded by what: the class, a selector (quoted), a device in use by another
  claim (named), a taint nobody tolerates (``key=value:effect``), a capacity (how much is
  asked and how much is left), a shared counter (how much is left), per-device node selection,
  an incomplete or invalid pool;
* when each request can be met alone: which constraint cannot be met (the claim fits without
  it), with the devices per attribute value (``numaNode 0 has 2, numaNode 1 has 2``) and the
  allocation a *preferred* form of the constraint would get (a ``firstAvailable`` ladder, as
  drakit's ``numa-preferred`` strategy shapes it);
* otherwise, that the requests compete for the same devices.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from drakit.allocator import (
    AllocationError,
    Allocator,
    DeviceClass,
    Node,
    ResourceClaim,
    ResourceSlice,
)
from drakit.allocator.engine import (
    AllocatedState,
    RequestData,
    SearchCutOff,
    consumed_capacity,
    taint_blocking,
)
from drakit.allocator.engine import _violates as violates_policy
from drakit.allocator.pools import Candidate, node_matches
from drakit.allocator.quantity import format_quantity, parse_quantity

__all__ = [
    "Explanation",
    "NodeExplanation",
    "Reason",
    "explain",
    "explain_node",
    "explain_text",
    "render",
    "slices_by_node",
]

Kind = Literal[
    "pool",
    "class",
    "selector",
    "in-use",
    "taint",
    "capacity",
    "counter",
    "node",
    "count",
    "constraint",
    "conflict",
    "error",
]


class Reason(BaseModel):
    """One thing that keeps the claim off the node."""

    model_config = ConfigDict(frozen=True)

    request: str = Field(description="The request or request/subrequest, or '' for the claim")
    kind: Kind
    message: str
    devices: tuple[str, ...] = ()


class NodeExplanation(BaseModel):
    """The outcome on one node."""

    node: str
    fits: bool
    allocation: list[dict[str, Any]] = Field(default_factory=list)
    reasons: list[Reason] = Field(default_factory=list)


class Explanation(BaseModel):
    """The outcome on every node considered."""

    claim: str
    allocated: list[dict[str, Any]] | None = Field(
        default=None, description="The claim's existing allocation, if it has one"
    )
    nodes: list[NodeExplanation]


def _q(value: Fraction) -> str:
    return format_quantity(value)


def _short(names: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --- per request -------------------------------------------------------------------------------


def _exclusion(  # noqa: PLR0911 - one return per kind of exclusion
    alloc: Allocator, data: RequestData, cand: Candidate
) -> tuple[Kind, str] | None:
    """Why ``cand`` cannot serve ``data`` (in the scheduler's order of checks), or None."""
    for sel in data.class_selectors:
        if not cand.matches(sel):
            return "class", f"not in class {data.device_class.name}"
    if not data.admin_access and cand.id in alloc.state.devices:
        owners = ", ".join(alloc.state.owners.get(cand.id, [])) or "another claim"
        return "in-use", f"in use by {owners}"
    for sel in data.selectors:
        if not cand.matches(sel):
            return "selector", f"selector `{sel.expression}` is false"
    if cand.slice.spec.per_device_node_selection:
        d = cand.device
        if not node_matches(alloc.node, d.node_name, d.all_nodes, d.node_selector):
            return "node", "the device is not available on this node"
    capacity = _capacity_problem(alloc, data, cand)
    if capacity is not None:
        return "capacity", capacity
    counter = _counter_problem(alloc, cand)
    if counter is not None:
        return "counter", counter
    taint = taint_blocking(cand.device.taints, data.body.tolerations)
    if taint is not None:
        return "taint", f"taint {taint.show()} is not tolerated"
    return None


def _capacity_problem(alloc: Allocator, data: RequestData, cand: Candidate) -> str | None:
    consumed = consumed_capacity(data.body, cand)
    wanted = data.body.capacity.requests if data.body.capacity else {}
    if consumed is None:
        missing = sorted(n for n in wanted if n not in cand.device.capacity)
        return f"has no capacity {', '.join(missing)}"
    used = alloc.capacity_in_use(cand.id) if cand.device.allow_multiple_allocations else {}
    for name, cap in cand.device.capacity.items():
        need = consumed[name]
        if violates_policy(need, cap.request_policy):
            return f"capacity {name}: {_q(need)} is not allowed by the device's request policy"
        taken = used.get(name, Fraction(0))
        if taken + need > cap.amount:
            left = cap.amount - taken
            if taken:
                owners = ", ".join(alloc.state.owners.get(cand.id, [])) or "other claims"
                return (
                    f"capacity {name}: needs {_q(need)}, {_q(left)} left of {_q(cap.amount)} "
                    f"({_q(taken)} used by {owners})"
                )
            return f"capacity {name}: needs {_q(need)}, the device has {_q(cap.amount)}"
    return None


def _counter_problem(alloc: Allocator, cand: Candidate) -> str | None:
    if not cand.device.consumes_counters:
        return None
    available = alloc.pool_counters(cand.pool)
    for use in cand.device.consumes_counters:
        for name, c in use.counters.items():
            left = available.get(use.counter_set, {}).get(name, Fraction(0))
            need = parse_quantity(c.value)
            if need > left:
                return (
                    f"shared counter {use.counter_set}/{name}: needs {_q(need)}, "
                    f"{_q(max(left, Fraction(0)))} left (other partitions of the same device are "
                    "allocated)"
                )
    return None


def _request_reasons(alloc: Allocator, data: RequestData) -> tuple[list[Candidate], list[Reason]]:
    """The devices that could serve ``data`` alone, and a reason if too few."""
    eligible: list[Candidate] = []
    excluded: dict[tuple[Kind, str], list[str]] = {}
    reasons: list[Reason] = []
    for pool in alloc.pools:
        if pool.incomplete:
            reasons.append(
                Reason(
                    request=data.name,
                    kind="pool",
                    message=f"pool {pool.id} is incomplete (the driver is still publishing "
                    "it); nothing in it is allocated",
                )
            )
            continue
        if pool.invalid:
            reasons.append(
                Reason(
                    request=data.name,
                    kind="pool",
                    message=f"pool {pool.id} is invalid ({pool.invalid})",
                )
            )
            continue
        for cand in pool.candidates:
            why = _exclusion(alloc, data, cand)
            if why is None:
                eligible.append(cand)
            else:
                excluded.setdefault(why, []).append(str(cand))
    need = data.num_devices if data.all_devices is None else len(data.all_devices)
    short = len(eligible) < need
    if data.all_devices is not None and not data.all_devices:
        short = True
    if short or (data.all_devices is not None and len(eligible) < len(data.all_devices)):
        what = (
            "all matching devices"
            if data.all_devices is not None
            else f"{need} device{'s' if need != 1 else ''}"
        )
        reasons.append(
            Reason(
                request=data.name,
                kind="count",
                message=f"needs {what}, {len(eligible)} eligible on this node",
                devices=tuple(str(c) for c in eligible),
            )
        )
        for (kind, because), devs in sorted(excluded.items(), key=lambda kv: kv[0][0] == "class"):
            if kind == "class":
                continue
            reasons.append(
                Reason(
                    request=data.name,
                    kind=kind,
                    message=f"{_short(devs)}: {because}",
                    devices=tuple(devs),
                )
            )
    return eligible, reasons


# --- the claim ---------------------------------------------------------------------------------


def _attr_show(cand: Candidate, name: str) -> str:
    attrs = cand.device.attributes
    attr = attrs.get(name)
    domain, _, ident = name.partition("/")
    if attr is None and domain == cand.id[0]:
        attr = attrs.get(ident)
    return "(none)" if attr is None else attr.show()


def _without(claim: ResourceClaim, drop: Iterable[int]) -> ResourceClaim:
    gone = set(drop)
    devices = claim.spec.devices
    kept = tuple(c for i, c in enumerate(devices.constraints) if i not in gone)
    spec = claim.spec.model_copy(
        update={"devices": devices.model_copy(update={"constraints": kept})}
    )
    return claim.model_copy(update={"spec": spec})


EXPLAIN_STEPS = 50_000
"""Search steps for one node's explanation, shared by the allocation and every relaxation of it
(a second or two): an impossible constraint over many devices answers "search cut off
after N steps" instead of searching for minutes."""


def _fresh(alloc: Allocator) -> Allocator:
    """A clone of ``alloc`` for one relaxed search, with what is left of its step budget."""
    clone = Allocator.__new__(Allocator)
    clone.__dict__.update(
        {k: alloc.__dict__[k] for k in ("node", "classes", "state", "pools", "_share_id")}
    )
    clone.budget = max(alloc.budget - alloc.steps, 0)
    clone.steps = 0
    return clone


def _relaxed(alloc: Allocator, claim: ResourceClaim, cut: list[str]) -> Any:
    """Allocate ``claim`` on a clone of ``alloc``; its steps count against ``alloc``'s budget.

    ``None`` when it cannot be allocated or the search was cut off (then ``cut`` gets why).
    """
    clone = _fresh(alloc)
    try:
        return clone.allocate([claim])
    except SearchCutOff as e:
        cut.append(str(e))
        return None
    except AllocationError:
        return None
    finally:
        alloc.steps += clone.steps


def _results(out: Any) -> list[dict[str, Any]]:
    return [r.to_api() for r in out[0].devices.results]


def _constraint_reasons(
    alloc: Allocator, claim: ResourceClaim, eligible: Mapping[str, list[Candidate]]
) -> list[Reason]:
    constraints = claim.spec.devices.constraints
    reasons: list[Reason] = []
    cut: list[str] = []
    for i, c in enumerate(constraints):
        out = _relaxed(alloc, _without(claim, [i]), cut)
        if out is None:
            continue
        over = [
            n
            for n in eligible
            if not c.requests or n in c.requests or n.split("/")[0] in c.requests
        ]
        need = sum(
            alloc.requests[k].num_devices for k in alloc.requests if alloc.requests[k].name in over
        )
        values: Counter[str] = Counter()
        seen: set[tuple[str, str, str]] = set()
        for n in over:
            for cand in eligible[n]:
                if cand.id not in seen:
                    seen.add(cand.id)
                    values[_attr_show(cand, c.attribute)] += 1
        label = c.attribute.rsplit("/", 1)[-1]
        per = ", ".join(f"{label} {v} has {k}" for v, k in sorted(values.items()))
        if c.match_attribute:
            head = (
                f"constraint {c.show()} cannot be met on this node: no {label} has {need} free "
                f"devices for [{', '.join(over)}]; {per or 'no eligible device has it'}"
            )
        else:
            head = (
                f"constraint {c.show()} cannot be met on this node: {need} devices with different "
                f"{label} values needed, {len([v for v in values if v != '(none)'])} values "
                f"among eligible devices ({per})"
            )
        fit = ", ".join(f"{r['request']} -> {r['device']}" for r in _results(out))
        reasons.append(Reason(request="", kind="constraint", message=head))
        reasons.append(
            Reason(
                request="",
                kind="constraint",
                message=(
                    "the preferred policy would fit: with the constraint preferred instead of "
                    "required (a firstAvailable ladder [aligned, any], as drakit's "
                    f"`numa-preferred` strategy shapes a request) the claim gets {fit}"
                ),
            )
        )
    if reasons or not constraints:
        return reasons + _cut_reason(cut)
    out = _relaxed(alloc, _without(claim, range(len(constraints))), cut)
    if out is not None:
        return [
            Reason(
                request="",
                kind="constraint",
                message="the constraints together cannot be met on this node (each alone could): "
                + "; ".join(c.show() for c in constraints),
            )
        ]
    return _cut_reason(cut)


def _cut_reason(cut: list[str]) -> list[Reason]:
    if not cut:
        return []
    return [
        Reason(
            request="",
            kind="error",
            message=f"{cut[0]}; the reasons given may be incomplete (explain searches at most "
            f"{EXPLAIN_STEPS} steps per node)",
        )
    ]


def explain_node(alloc: Allocator, claim: ResourceClaim) -> NodeExplanation:
    """Allocate ``claim`` with ``alloc`` and explain the outcome."""
    node = alloc.node.name
    try:
        out = alloc.allocate([claim])
    except AllocationError as e:
        return NodeExplanation(
            node=node, fits=False, reasons=[Reason(request="", kind="error", message=str(e))]
        )
    if out is not None:
        return NodeExplanation(node=node, fits=True, allocation=_results(out))
    reasons: list[Reason] = []
    eligible: dict[str, list[Candidate]] = {}
    by_request: dict[int, list[tuple[RequestData, list[Reason]]]] = {}
    for (ci, ri, _si), data in sorted(alloc.requests.items()):
        if ci != 0:
            continue
        cands, why = _request_reasons(alloc, data)
        eligible[data.name] = cands
        by_request.setdefault(ri, []).append((data, why))
    alone_ok = True
    for ri, alts in by_request.items():
        if all(why for _, why in alts):
            alone_ok = False
            if len(alts) > 1:
                reasons.append(
                    Reason(
                        request=alts[0][0].base,
                        kind="count",
                        message=f"none of the {len(alts)} firstAvailable alternatives can be met",
                    )
                )
            for _, why in alts:
                reasons += why
        del ri
    if alone_ok:
        reasons += _constraint_reasons(alloc, claim, eligible)
        if not reasons:
            counts = ", ".join(f"{n}: {len(c)}" for n, c in eligible.items())
            reasons.append(
                Reason(
                    request="",
                    kind="conflict",
                    message="each request can be met alone, but not all together: they compete "
                    f"for the same devices, capacity or counters (eligible devices: {counts})",
                )
            )
    return NodeExplanation(node=node, fits=False, reasons=reasons)


def slices_by_node(slices: Sequence[ResourceSlice]) -> Callable[[str], list[ResourceSlice]]:
    """Node name -> the slices that can concern it, in their order: its own and the unnamed.

    A slice with ``spec.nodeName`` concerns that node alone; handing each node's allocator only
    those (and the slices for all nodes or a selector, which it checks itself) keeps explaining
    a claim over N nodes linear, not N x all slices (1,000 nodes: ``benchmarks/explain_fleet.py``).
    """
    named: dict[str, list[tuple[int, ResourceSlice]]] = {}
    unnamed: list[tuple[int, ResourceSlice]] = []
    for i, s in enumerate(slices):
        (named.setdefault(s.spec.node_name, []) if s.spec.node_name else unnamed).append((i, s))

    def mine(node: str) -> list[ResourceSlice]:
        return [s for _, s in heapq.merge(named.get(node, []), unnamed, key=lambda p: p[0])]

    return mine


def explain(
    claim: ResourceClaim,
    slices: Sequence[ResourceSlice],
    classes: Mapping[str, DeviceClass],
    allocated: Sequence[ResourceClaim] = (),
    nodes: Sequence[Node] | None = None,
) -> Explanation:
    """Explain ``claim`` on ``nodes`` (default: every node a slice names)."""
    if nodes is None:
        names = sorted({s.spec.node_name for s in slices if s.spec.node_name})
        nodes = [Node.named(n) for n in names]
    others = [
        c for c in allocated if c.metadata.uid != claim.metadata.uid or not claim.metadata.uid
    ]
    existing = claim.status.allocation
    state = AllocatedState.of(others)
    mine = slices_by_node(slices)
    return Explanation(
        claim=claim.ref,
        allocated=[r.to_api() for r in existing.devices.results] if existing else None,
        nodes=[
            explain_node(
                Allocator(n, mine(n.name), classes, state=state, budget=EXPLAIN_STEPS), claim
            )
            for n in nodes
        ],
    )


def explain_text(alloc: Allocator, claim: ResourceClaim) -> str:
    """The reasons on one node, one per line (after a failed ``alloc.allocate``)."""
    return "\n".join(f"  {_line(r)}" for r in explain_node(_fresh(alloc), claim).reasons)


def _line(r: Reason) -> str:
    return f"{r.request}: {r.message}" if r.request else r.message


def render(ex: Explanation) -> str:
    """Plain text for a terminal."""
    lines = [f"claim {ex.claim}"]
    if ex.allocated is not None:
        lines.append(
            "  already allocated: "
            + ", ".join(f"{r['request']} -> {r['pool']}/{r['device']}" for r in ex.allocated)
        )
    if not ex.nodes:
        lines.append("  no node has ResourceSlices")
    for n in ex.nodes:
        if n.fits:
            lines.append(f"node {n.node}: fits")
            for r in n.allocation:
                extra = ""
                if r.get("consumedCapacity"):
                    extra = (
                        " (" + ", ".join(f"{k} {v}" for k, v in r["consumedCapacity"].items()) + ")"
                    )
                lines.append(f"  {r['request']} -> {r['driver']} {r['pool']}/{r['device']}{extra}")
        else:
            lines.append(f"node {n.node}: does not fit")
            lines += [f"  {_line(r)}" for r in n.reasons]
    return "\n".join(lines)
