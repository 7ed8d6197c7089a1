"""Models exchanged with allocation strategies (see the strategy hooks in :mod:`drakit.hookspecs`).

A strategy acts at up to three points: *publishing* (ordering devices in slices), *claim
shaping* (turning a simple request into DRA requests and constraints) and *node-side selection*
(choosing concrete resources inside an allocated device at prepare time).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["SelectionRequest", "SelectionResult", "ShapedClaim", "SimpleRequest"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _qualified(v: str) -> str:
    if "/" not in v:
        raise ValueError(f"{v!r} must be fully qualified, e.g. 'resource.kubernetes.io/numaNode'")
    return v


class SimpleRequest(BaseModel):
    """What a user asks for in one line: ``count`` devices of ``device_class``.

    ``align_attribute`` is the fully qualified attribute the strategy aligns on (same value for
    ``packed``, distinct values for ``distributed``). The shipped strategies make that
    constraint a *preference* (a ``firstAvailable`` ladder that ends unconstrained) unless
    ``required`` is set; ``fallback_attributes`` are looser alignments tried in between (e.g.
    the socket after the NUMA node).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="devices", description="Request name (a DNS label)")
    device_class: str = Field(description="DeviceClass name")
    count: int = Field(ge=1, le=128)
    align_attribute: str = "resource.kubernetes.io/numaNode"
    selectors: tuple[str, ...] = Field(default=(), description="Extra CEL selector expressions")
    required: bool = Field(
        default=False,
        description="Make the topology constraint hard: the claim waits until a node meets it",
    )
    fallback_attributes: tuple[str, ...] = Field(
        default=(),
        max_length=6,
        description="Looser alignments tried after align_attribute, before any placement",
    )

    @field_validator("name")
    @classmethod
    def _dns_label(cls, v: str) -> str:
        if not _DNS_LABEL.match(v):
            raise ValueError(f"{v!r} is not a DNS label (lower case, digits, '-'; e.g. 'gpus')")
        return v

    @field_validator("align_attribute")
    @classmethod
    def _qualified(cls, v: str) -> str:
        return _qualified(v)

    @field_validator("fallback_attributes")
    @classmethod
    def _all_qualified(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_qualified(a) for a in v)


class ShapedClaim(BaseModel):
    """``spec.devices`` of a ResourceClaim (``resource.k8s.io/v1`` JSON): requests + constraints."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: tuple[dict[str, Any], ...]
    constraints: tuple[dict[str, Any], ...] = ()

    def to_api(self) -> dict[str, Any]:
        """The ``spec.devices`` JSON object."""
        out: dict[str, Any] = {"requests": [dict(r) for r in self.requests]}
        if self.constraints:
            out["constraints"] = [dict(c) for c in self.constraints]
        return out


class SelectionRequest(BaseModel):
    """Choose ``count`` units (e.g. CPUs) out of ``available`` inside one allocated device.

    ``topology`` is backend-specific (the CPU backend passes its CPU topology); ``options``
    carries per-claim knobs such as ``prefer_uncore`` or ``group_size``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    kind: str
    count: int = Field(ge=1)
    available: frozenset[int]
    topology: Any = None
    options: Mapping[str, Any] = Field(default_factory=dict)


class SelectionResult(BaseModel):
    """The units a strategy chose."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    units: frozenset[int]
