"""Claim-shaping strategies contributed by the CPU backend.

``numa-spread`` answers issue "distributed CPU allocation" the DRA-native way: instead of a
node-side policy, or one hand-written request per NUMA node (which hard-codes the machine), a
claim for ``N`` CPUs becomes one request with a ``firstAvailable`` list of *even splits*::

    requests:
    - name: cpus
      firstAvailable:
      - {name: split-4, deviceClassName: cpu, count: 4, capacity: {requests: {cpu: "N/4"}}}
      - {name: split-2, deviceClassName: cpu, count: 2, capacity: {requests: {cpu: "N/2"}}}
      - {name: split-1, deviceClassName: cpu, count: 1, capacity: {requests: {cpu: "N"}}}
    constraints:
    - {requests: [cpus/split-4], distinctAttribute: resource.kubernetes.io/numaNode}
    - {requests: [cpus/split-2], distinctAttribute: resource.kubernetes.io/numaNode}

A ``k``-way subrequest asks for ``k`` NUMA-group devices, each consuming ``N/k`` of its ``cpu``
capacity, and its ``distinctAttribute`` constraint (which names the subrequest, so it only
binds when that alternative is tried) makes the ``k`` devices lie on ``k`` different NUMA
nodes. The scheduler takes the first alternative the node can satisfy, i.e. the widest even
split this node has room for: 4 ways on a 4-NUMA node, 2 on a 2-NUMA node, 1 on a 1-NUMA node,
from the same claim. Widths that do not divide ``N`` are left out (splits are always even).
The last choice, ``split-1``, has no constraint, so the claim is never unsatisfiable because
of the spread; a request with ``required`` set leaves it out (the CPUs must then span at
least two NUMA nodes, and the claim waits until a node can do that).
Needs grouped CPU devices with ``group_by: numa`` (the capacity) and DRAConsumableCapacity
(``distinctAttribute``, capacity requests); see ``docs/cpu-backend.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from drakit.strategies import Strategy
from drakit.strategy_models import ShapedClaim, SimpleRequest
from drakit_cpu.devices import CAPACITY

__all__ = ["MAX_SUBREQUESTS", "NumaSpread"]

MAX_SUBREQUESTS = 8
"""``firstAvailable`` holds at most 8 subrequests."""


class NumaSpread(Strategy):
    """Spread ``count`` CPUs evenly over as many NUMA nodes as the node has room for.

    Args:
        widths: the splits to offer, widest first; 1 is always added last. Default
            ``(8, 4, 2, 1)``: the NUMA counts of common 1- and 2-socket servers.
        capacity: the consumable capacity to request on each device (the CPU backend's
            ``cpu``).
    """

    name = "numa-spread"
    backends: ClassVar[tuple[str, ...]] = ("cpu",)  # a `cpu` capacity per NUMA-group device
    default_widths: ClassVar[tuple[int, ...]] = (8, 4, 2, 1)

    def __init__(self, widths: Sequence[int] | None = None, capacity: str = CAPACITY) -> None:
        chosen = sorted({int(w) for w in (widths or self.default_widths)} | {1}, reverse=True)
        if chosen[-1] < 1:
            raise ValueError(f"split widths must be positive, got {list(widths or ())}")
        if len(chosen) > MAX_SUBREQUESTS:
            raise ValueError(
                f"at most {MAX_SUBREQUESTS} split widths fit in firstAvailable, got {chosen}"
            )
        self.widths = tuple(chosen)
        self.capacity = capacity

    def splits(self, count: int) -> list[int]:
        """The widths offered for ``count`` CPUs, widest first (only even splits)."""
        return [w for w in self.widths if w <= count and count % w == 0]

    def _body(self, request: SimpleRequest, devices: int, cpus_each: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "deviceClassName": request.device_class,
            "count": devices,
            "capacity": {"requests": {self.capacity: str(cpus_each)}},
        }
        if request.selectors:
            body["selectors"] = [{"cel": {"expression": e}} for e in request.selectors]
        return body

    def shape(self, request: SimpleRequest) -> ShapedClaim:
        """``firstAvailable`` of k-way splits, each constrained to k distinct NUMA nodes.

        ``request.count`` is the number of CPUs; ``request.align_attribute`` the attribute
        the split devices must differ in (``resource.kubernetes.io/numaNode``);
        ``request.required`` drops the unconstrained ``split-1`` fallback.
        """
        n = request.count
        widths = self.splits(n)
        if request.required and widths != [1]:
            widths = [w for w in widths if w > 1]
        if widths == [1]:
            return ShapedClaim(
                requests=({"name": request.name, "exactly": self._body(request, 1, n)},)
            )
        subrequests = [{"name": f"split-{w}", **self._body(request, w, n // w)} for w in widths]
        constraints = tuple(
            {
                "requests": [f"{request.name}/split-{w}"],
                "distinctAttribute": request.align_attribute,
            }
            for w in widths
            if w > 1
        )
        return ShapedClaim(
            requests=({"name": request.name, "firstAvailable": subrequests},),
            constraints=constraints,
        )
