"""The scheduler's allocation for tests: :func:`allocate` over slices and claims, in process.

A backend's strategy or partition test asks "would the scheduler give this claim these devices
on my node?" without a cluster and without shelling out to ``drakit explain``: the same
allocator (:mod:`drakit.allocator`, kube-scheduler 1.37's structured allocation, checked
against the real scheduler in drakit's e2e tests) and, when the claims do not fit, the same
reasons ``drakit explain`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from drakit.allocator import AllocationError, Allocator, DeviceClass, Node, ResourceClaim
from drakit.allocator import ResourceSlice as SliceModel
from drakit.config import validation_errors
from drakit.errors import ConfigInvalid
from drakit.explain.report import explain_node

__all__ = ["Allocation", "allocate"]


@dataclass(frozen=True)
class Allocation:
    """What the scheduler would do with the claims on one node.

    Attributes:
        node: the node allocated on.
        fits: whether every claim got its devices (the claims are allocated together, as the
            scheduler allocates a pod's claims).
        results: claim (``namespace/name``) -> its ``status.allocation.devices.results``
            entries (``request``, ``driver``, ``pool``, ``device``, ``shareID``,
            ``consumedCapacity``, ``adminAccess``), in request order; empty when not ``fits``.
        reasons: when not ``fits``, claim -> why it does not fit on its own (``request``,
            ``kind``, ``message``, ``devices``: what ``drakit explain -o json`` reports); a
            claim that fits alone has none (the claims do not fit together).
    """

    node: str
    fits: bool
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    reasons: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def devices(self, claim: str) -> list[str]:
        """The devices ``claim`` (``namespace/name``) got, in request order."""
        return [r["device"] for r in self.results.get(claim, [])]


def _parse(kind: type[Any], docs: Sequence[Any], what: str) -> list[Any]:
    out = []
    for i, doc in enumerate(docs):
        if isinstance(doc, kind):
            out.append(doc)
            continue
        try:
            out.append(kind.model_validate(doc))
        except ValidationError as e:
            name = (doc.get("metadata") or {}).get("name", f"#{i}") if isinstance(doc, dict) else i
            raise ConfigInvalid(validation_errors(e), source=f"{what} {name}") from None
    return out


def _driver_classes(slices: Sequence[SliceModel]) -> dict[str, DeviceClass]:
    drivers = sorted({s.spec.driver for s in slices})
    return {
        d: DeviceClass.model_validate(
            {
                "metadata": {"name": d},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{d}"'}}]},
            }
        )
        for d in drivers
    }


def allocate(
    claims: Sequence[Mapping[str, Any] | ResourceClaim],
    slices: Sequence[Mapping[str, Any] | SliceModel],
    classes: Sequence[Mapping[str, Any] | DeviceClass] = (),
    *,
    node: str | None = None,
    allocated: Sequence[Mapping[str, Any] | ResourceClaim] = (),
) -> Allocation:
    """Allocate ``claims`` together on one node as kube-scheduler 1.37 would.

    Args:
        claims: ResourceClaims (API JSON, e.g. ``{"metadata": {...}, "spec": {"devices":
            {...}}}``; a namespace defaults to ``default``).
        slices: the ResourceSlices (API JSON, e.g. :meth:`SimHost.slices` or
            :meth:`RunningNode.slices`).
        classes: DeviceClasses (API JSON). Besides these, a class named after each driver of
            the slices selects every device of that driver (``deviceClassName:
            gpu.acme.example.com``).
        node: the node (default: the one node the slices name).
        allocated: claims already allocated (with ``status.allocation``): their devices,
            shares and counters are in use.

    Raises:
        ConfigInvalid: an object does not parse (naming it and the field).
        ValueError: ``node`` is not given and the slices name no node or several.
    """
    slice_models: list[SliceModel] = _parse(SliceModel, slices, "ResourceSlice")
    if node is None:
        names = sorted({s.spec.node_name for s in slice_models if s.spec.node_name})
        if len(names) != 1:
            raise ValueError(
                f"the slices name {len(names)} nodes ({', '.join(names) or 'none'}); pass node="
            )
        node = names[0]
    by_name = _driver_classes(slice_models)
    by_name.update({c.name: c for c in _parse(DeviceClass, classes, "DeviceClass")})
    claim_models: list[ResourceClaim] = _parse(
        ResourceClaim, [_defaulted(c) for c in claims], "ResourceClaim"
    )
    held: list[ResourceClaim] = _parse(
        ResourceClaim, [_defaulted(c) for c in allocated], "ResourceClaim"
    )
    where = Node.named(node)

    def allocator() -> Allocator:
        return Allocator(where, slice_models, by_name, allocated=held)

    try:
        out = allocator().allocate(claim_models)
    except AllocationError as e:
        return Allocation(
            node=node,
            fits=False,
            reasons={
                c.ref: [{"request": "", "kind": "error", "message": str(e), "devices": []}]
                for c in claim_models
            },
        )
    if out is not None:
        return Allocation(
            node=node,
            fits=True,
            results={
                c.ref: [r.to_api() for r in res.devices.results]
                for c, res in zip(claim_models, out, strict=True)
            },
        )
    reasons = {}
    for c in claim_models:
        alone = explain_node(allocator(), c)
        reasons[c.ref] = [r.model_dump(mode="json") for r in alone.reasons]
    return Allocation(node=node, fits=False, reasons=reasons)


def _defaulted(claim: Mapping[str, Any] | ResourceClaim) -> Any:
    if isinstance(claim, ResourceClaim):
        return claim
    meta = dict(claim.get("metadata") or {})
    meta.setdefault("namespace", "default")
    return {**claim, "metadata": meta}
