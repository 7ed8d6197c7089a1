"""Structured-parameters allocation as the 1.37 kube-scheduler does it, with no cluster.

Pure and typed: ResourceSlices, DeviceClasses and ResourceClaims go in as the API's JSON
(parsed by the models in :mod:`drakit.allocator.api`), allocation results come out the same
way. Used by ``drakit explain`` and ``drakit demo``, and checked against the real scheduler
by ``tests/e2e/test_allocator_differential.py``.

    >>> alloc = Allocator(Node.named("n1"), slices, classes, allocated=claims_on_node)
    >>> alloc.allocate([claim])   # [AllocationResult] or None when it does not fit
"""

from __future__ import annotations

from drakit.allocator.api import (
    AllocationResult,
    DeviceClass,
    Node,
    ResourceClaim,
    ResourceSlice,
)
from drakit.allocator.cel import CelError
from drakit.allocator.engine import AllocatedState, AllocationError, Allocator
from drakit.allocator.pools import gather_pools

__all__ = [
    "AllocatedState",
    "AllocationError",
    "AllocationResult",
    "Allocator",
    "CelError",
    "DeviceClass",
    "Node",
    "ResourceClaim",
    "ResourceSlice",
    "gather_pools",
]
