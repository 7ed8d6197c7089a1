"""``drakit explain job``: which topology domains can hold a job's pods, and why the others cannot.

A job here is ``pods`` pods whose claims all come from one ResourceClaimTemplate (or claim),
all of which must land in one domain of a node label (the topology key: the PodGroup
constraint ``topology.drakit.io/fabric`` of ``docs/multi-node.md``, or a Kueue TAS level).
Nodes are grouped by that label; per domain the pods are placed one after another, each on
the first node (by name) where its claim can be allocated as kube-scheduler's allocator would
(:mod:`drakit.allocator`), with the devices earlier pods took counted as in use. A domain
holds the job when every pod is placed; otherwise the report says how many pods it holds and,
per node, why the next one does not fit (:func:`drakit.explain.report.explain_node`). Nodes
without the label are in no domain: a topology-constrained job never lands there.

The placement is first fit, pod after pod. The scheduler tries each domain with the same
allocator but may put the pods on the domain's nodes in another order, so in a tight packing
the two can differ; the reasons name the devices either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from drakit.allocator import (
    AllocatedState,
    AllocationError,
    Allocator,
    DeviceClass,
    Node,
    ResourceClaim,
    ResourceSlice,
)
from drakit.allocator.api import ClaimStatus
from drakit.explain.report import EXPLAIN_STEPS, NodeExplanation, explain_node, slices_by_node

__all__ = ["DomainExplanation", "JobExplanation", "PodPlacement", "explain_job", "render_job"]


class PodPlacement(BaseModel):
    """Where one pod of the job goes in a domain."""

    pod: int
    node: str
    allocation: list[dict[str, Any]] = Field(default_factory=list)


class DomainExplanation(BaseModel):
    """One value of the topology key: its nodes, and how much of the job it holds."""

    domain: str
    nodes: list[str]
    fits: bool
    pods: int = Field(description="How many of the job's pods it holds")
    placements: list[PodPlacement] = Field(default_factory=list)
    blocked: list[NodeExplanation] = Field(
        default_factory=list, description="Per node, why the next pod does not fit"
    )


class JobExplanation(BaseModel):
    """Every domain of the topology key, for a job of ``pods`` pods."""

    claim: str
    pods: int
    topology_key: str
    domains: list[DomainExplanation]
    unlabelled: list[str] = Field(
        default_factory=list, description="Nodes without the topology key: in no domain"
    )


def _pod_claim(claim: ResourceClaim, pod: int) -> ResourceClaim:
    meta = claim.metadata.model_copy(
        update={"name": f"{claim.metadata.name}-pod-{pod}", "uid": f"drakit-explain-job-{pod}"}
    )
    return claim.model_copy(update={"metadata": meta, "status": ClaimStatus()})


def _place(
    claim: ResourceClaim,
    slices: Sequence[ResourceSlice],
    classes: Mapping[str, DeviceClass],
    allocated: Sequence[ResourceClaim],
    domain: str,
    nodes: Sequence[Node],
    pods: int,
) -> DomainExplanation:
    held = list(allocated)
    placed: list[PodPlacement] = []
    blocked: list[NodeExplanation] = []
    mine_of = slices_by_node(slices)
    node_slices = {node.name: mine_of(node.name) for node in nodes}
    # Nodes where a pod did not fit: the next pods' claims are the same and only more is in use,
    # so they do not fit there either (a search cut off or aborted is tried again).
    full: set[str] = set()
    for i in range(pods):
        mine = _pod_claim(claim, i)
        state = AllocatedState.of(held)
        for node in nodes:
            if node.name in full:
                continue
            alloc = Allocator(
                node, node_slices[node.name], classes, state=state, budget=EXPLAIN_STEPS
            )
            try:
                out = alloc.allocate([mine])
            except AllocationError:
                out = None  # explained below, with the rest of the nodes' reasons
            else:
                if out is None:
                    full.add(node.name)
            if out is not None:
                placed.append(
                    PodPlacement(
                        pod=i,
                        node=node.name,
                        allocation=[r.to_api() for r in out[0].devices.results],
                    )
                )
                held.append(mine.model_copy(update={"status": ClaimStatus(allocation=out[0])}))
                break
        else:
            blocked = [
                explain_node(
                    Allocator(
                        node, node_slices[node.name], classes, state=state, budget=EXPLAIN_STEPS
                    ),
                    mine,
                )
                for node in nodes
            ]
            break
    return DomainExplanation(
        domain=domain,
        nodes=[n.name for n in nodes],
        fits=len(placed) == pods,
        pods=len(placed),
        placements=placed,
        blocked=blocked,
    )


def explain_job(
    claim: ResourceClaim,
    slices: Sequence[ResourceSlice],
    classes: Mapping[str, DeviceClass],
    allocated: Sequence[ResourceClaim],
    nodes: Sequence[Node],
    *,
    pods: int,
    topology_key: str,
) -> JobExplanation:
    """Per domain of ``topology_key`` among ``nodes``: whether ``pods`` claims like ``claim`` fit.

    Args:
        claim: The claim every pod gets (from the template).
        slices: The cluster's ResourceSlices.
        classes: DeviceClasses by name.
        allocated: Claims already allocated (their devices are in use).
        nodes: The nodes, with their labels.
        pods: How many pods the job has (at least 1).
        topology_key: The node label whose values are the domains.

    Raises:
        ValueError: ``pods`` is less than 1.
    """
    if pods < 1:
        raise ValueError(f"a job has at least one pod (got {pods})")
    by_domain: dict[str, list[Node]] = {}
    unlabelled: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        value = node.metadata.labels.get(topology_key)
        if value is None:
            unlabelled.append(node.name)
        else:
            by_domain.setdefault(value, []).append(node)
    return JobExplanation(
        claim=claim.ref,
        pods=pods,
        topology_key=topology_key,
        domains=[
            _place(claim, slices, classes, allocated, domain, members, pods)
            for domain, members in sorted(by_domain.items())
        ],
        unlabelled=unlabelled,
    )


def render_job(ex: JobExplanation) -> str:
    """Plain text for a terminal."""
    fitting = [d.domain for d in ex.domains if d.fits]
    lines = [
        f"job of {ex.pods} pods, each with a claim like {ex.claim}, in one {ex.topology_key}: "
        + (f"fits in {', '.join(fitting)}" if fitting else "no domain can hold it")
    ]
    if not ex.domains:
        lines.append(f"  no node has the label {ex.topology_key}")
    for d in ex.domains:
        head = (
            f"{ex.topology_key}={d.domain} ({len(d.nodes)} node{'' if len(d.nodes) == 1 else 's'})"
        )
        if d.fits:
            lines.append(f"{head}: holds the job")
        else:
            lines.append(f"{head}: holds {d.pods} of {ex.pods} pods")
        for p in d.placements:
            devices = ", ".join(f"{r['pool']}/{r['device']}" for r in p.allocation)
            lines.append(f"  pod {p.pod} -> {p.node}: {devices}")
        for n in d.blocked:
            lines.append(f"  pod {d.pods} does not fit on {n.node}:")
            lines += [f"    {r.request + ': ' if r.request else ''}{r.message}" for r in n.reasons]
    if ex.unlabelled:
        lines.append(f"in no domain (no {ex.topology_key} label): {', '.join(ex.unlabelled)}")
    return "\n".join(lines)
