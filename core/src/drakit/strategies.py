"""Allocation strategies shipped with drakit: ``packed``, ``distributed`` and ``numa-preferred``.

None of them makes a claim unsatisfiable by accident: a topology constraint is a preference (a
``firstAvailable`` ladder whose last choice is unconstrained) unless the request says
``required``.

A strategy is a plugin found through the ``drakit.strategies`` entry point group and selected by
name in the configuration (``plugins.<name>.strategy`` or ``publish_strategy``), or per claim
where a backend allows it. Subclass :class:`Strategy`, set ``name`` and override any of
:meth:`Strategy.order` (publishing), :meth:`Strategy.shape` (claim shaping) and
:meth:`Strategy.select` (node-side selection); the base class answers the hooks only for its
own name and returns ``None`` for the acts it does not implement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from drakit.hookspecs import hookimpl
from drakit.models import Device
from drakit.strategy_models import SelectionRequest, SelectionResult, ShapedClaim, SimpleRequest

__all__ = ["NUMA_ATTRIBUTE", "Distributed", "NumaPreferred", "Packed", "Strategy"]

NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"


class Strategy:
    """Base class of allocation strategies; see the module docstring."""

    name: ClassVar[str] = ""
    backends: ClassVar[tuple[str, ...]] = ()
    """The backends whose devices the claims it shapes can fit (empty: any). ``drakit config
    validate`` refuses the strategy as another backend's ``strategy``."""

    def order(self, devices: Sequence[Device]) -> Sequence[Device] | None:
        """Publishing: return ``devices`` reordered, or ``None`` to leave them as they are."""
        return None

    def shape(self, request: SimpleRequest) -> ShapedClaim | None:
        """Claim shaping: return DRA requests and constraints, or ``None`` if not supported."""
        return None

    def select(self, request: SelectionRequest) -> SelectionResult | None:
        """Node-side selection: return chosen units, or ``None`` if not supported here."""
        return None

    @hookimpl
    def drakit_publish_order(
        self, strategy: str, devices: Sequence[Device]
    ) -> Sequence[Device] | None:
        """Answer for this strategy's name only."""
        return self.order(devices) if strategy == self.name else None

    @hookimpl
    def drakit_shape_request(self, strategy: str, request: SimpleRequest) -> ShapedClaim | None:
        """Answer for this strategy's name only."""
        return self.shape(request) if strategy == self.name else None

    @hookimpl
    def drakit_select_resources(
        self, strategy: str, request: SelectionRequest
    ) -> SelectionResult | None:
        """Answer for this strategy's name only."""
        return self.select(request) if strategy == self.name else None


def _numa_of(device: Device) -> int:
    """The device's NUMA node, or a large number (sorts last) if it has none."""
    attr = device.attributes.get(NUMA_ATTRIBUTE) or device.attributes.get("numaNode")
    value = attr.value if attr is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 1 << 30


def _exact(request: SimpleRequest, count: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "deviceClassName": request.device_class,
        "count": count or request.count,
    }
    if request.selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in request.selectors]
    return body


def _ladder(request: SimpleRequest, rungs: Sequence[tuple[str, str, str]]) -> ShapedClaim:
    """``firstAvailable`` of ``rungs`` (``(name, constraint kind, attribute)``), then ``any``.

    Each rung's constraint names only its own subrequest, so it binds only while the scheduler
    tries that rung; the last rung is unconstrained, so the claim is never unsatisfiable
    because of the preference. The scheduler scores nodes by the rung they can meet
    (DRAPrioritizedList), so a node that meets the first rung wins.
    """
    subrequests = [{"name": name, **_exact(request)} for name, _, _ in rungs]
    subrequests.append({"name": "any", **_exact(request)})
    return ShapedClaim(
        requests=({"name": request.name, "firstAvailable": subrequests},),
        constraints=tuple(
            {"requests": [f"{request.name}/{name}"], kind: attribute}
            for name, kind, attribute in rungs
        ),
    )


def _hard(request: SimpleRequest, kind: str) -> ShapedClaim:
    return ShapedClaim(
        requests=({"name": request.name, "exactly": _exact(request)},),
        constraints=({"requests": [request.name], kind: request.align_attribute},),
    )


def _plain(request: SimpleRequest) -> ShapedClaim:
    return ShapedClaim(requests=({"name": request.name, "exactly": _exact(request)},))


class Packed(Strategy):
    """Keep a claim's devices together on one NUMA node (or whatever ``align_attribute`` names).

    * publishing: devices sorted by NUMA node, so the scheduler's first fit fills one node
      before the next;
    * shaping: a ``firstAvailable`` ladder: all devices with the same ``align_attribute``
      (``aligned``), then the same value of each ``fallback_attributes`` entry
      (``fallback-1``...), then anywhere (``any``). With ``required`` it is one request with a
      hard ``matchAttribute`` constraint instead: the claim waits until one node has room.
    """

    name = "packed"

    def order(self, devices: Sequence[Device]) -> Sequence[Device]:
        """NUMA-ordered, stable within a node."""
        return sorted(devices, key=_numa_of)

    def shape(self, request: SimpleRequest) -> ShapedClaim:
        """``firstAvailable: [aligned, fallback-1.., any]``, or ``matchAttribute`` if required."""
        if request.count == 1:
            return _plain(request)
        if request.required:
            return _hard(request, "matchAttribute")
        rungs = [("aligned", "matchAttribute", request.align_attribute)]
        rungs += [
            (f"fallback-{i}", "matchAttribute", a)
            for i, a in enumerate(request.fallback_attributes, 1)
        ]
        return _ladder(request, rungs)


class Distributed(Strategy):
    """Spread a claim's devices over NUMA nodes (or ``align_attribute`` values).

    * publishing: devices interleaved round-robin over NUMA nodes, so first fit spreads;
    * shaping: a ``firstAvailable`` ladder: every device on a different ``align_attribute``
      value (``spread``), else anywhere (``any``), so a node with fewer NUMA nodes than devices
      still serves the claim. With ``required`` it is one request with a hard
      ``distinctAttribute`` constraint (needs as many NUMA nodes as devices).
    """

    name = "distributed"

    def order(self, devices: Sequence[Device]) -> Sequence[Device]:
        """Round-robin over NUMA nodes, each node's devices in discovery order."""
        groups: dict[int, list[Device]] = {}
        for d in devices:
            groups.setdefault(_numa_of(d), []).append(d)
        queues = [groups[k] for k in sorted(groups)]
        out: list[Device] = []
        while any(queues):
            for q in queues:
                if q:
                    out.append(q.pop(0))
        return out

    def shape(self, request: SimpleRequest) -> ShapedClaim:
        """``firstAvailable: [spread, any]``, or ``distinctAttribute`` if required."""
        if request.count == 1:
            return _plain(request)
        if request.required:
            return _hard(request, "distinctAttribute")
        return _ladder(request, [("spread", "distinctAttribute", request.align_attribute)])


class NumaPreferred(Packed):
    """``packed`` under the name that says what it does: prefer one NUMA node, never wait for it.

    Publishing and shaping are ``packed``'s: a ``firstAvailable`` request whose first choice is
    constrained with ``matchAttribute`` and whose last choice is unconstrained. The scheduler
    tries the aligned subrequest first and falls back to any placement (DRAPrioritizedList).
    """

    name = "numa-preferred"
