"""Where benchmark claims are stored: the claim source the node under test GETs from.

:class:`MemoryClaims` keeps them in drakit's in-memory claim source,
:class:`drakit.prepare.memory.ClaimStore` (no API server, no copy per GET);
:class:`benchmarks.cluster.ApiClaims` creates them in a real API server.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from drakit.models import ClaimRef
from drakit.prepare import memory

__all__ = ["NAMESPACE", "ClaimStore", "MemoryClaims", "claim_spec"]

NAMESPACE = "drakit-bench"


class ClaimStore(Protocol):
    """Creates allocated claims where the node under test will GET them."""

    source: str

    def add(self, name: str, results: Sequence[dict[str, Any]]) -> ClaimRef:
        """Store an allocated claim with these ``status.allocation.devices.results``."""
        ...


def claim_spec(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A claim spec with one ExactCount request per request name used in ``results``."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r["request"]] = counts.get(r["request"], 0) + 1
    return {
        "devices": {
            "requests": [
                {
                    "name": name,
                    "exactly": {
                        "deviceClassName": "drakit-bench",
                        "allocationMode": "ExactCount",
                        "count": n,
                    },
                }
                for name, n in counts.items()
            ]
        }
    }


class MemoryClaims:
    """Claims in a :class:`drakit.prepare.memory.ClaimStore` (no API server)."""

    source = "memory"

    def __init__(self) -> None:
        self.claims = memory.ClaimStore(copy=False)

    def add(self, name: str, results: Sequence[dict[str, Any]]) -> ClaimRef:
        """Store the claim in the dict the pipeline reads."""
        uid = str(uuid.uuid4())
        self.claims.add(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"namespace": NAMESPACE, "name": name, "uid": uid},
                "spec": claim_spec(results),
                "status": {"allocation": {"devices": {"results": list(results)}}},
            }
        )
        return ClaimRef(namespace=NAMESPACE, name=name, uid=uid)
