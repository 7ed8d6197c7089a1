"""``NicConfig`` (``ainic.drakit.io/v1alpha1``): the per-claim opaque configuration.

Validated by ``drakit_parse_config`` on the node and by the admission webhook, with the same
model; every error names the field (``vf.vlan: ...``) and says how to fix it. Unknown fields are
errors. Example::

    apiVersion: ainic.drakit.io/v1alpha1
    kind: NicConfig
    queues: 8               # channels (queue pairs) on the function
    bandwidth: 50           # Gbps: the VF's max_tx_rate
    vf: {mac: "02:00:00:00:00:01", vlan: 100, trust: false, spoofChk: true, mtu: 9000}
    rdma: {enabled: true}   # hand over uverbsN and rdma_cm (default)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from drakit.config import parse_opaque_config

__all__ = ["NIC_CONFIG_API_VERSION", "NicConfig", "RdmaConfig", "VfConfig", "parse_nic_config"]

NIC_CONFIG_API_VERSION = "ainic.drakit.io/v1alpha1"
_MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class VfConfig(_Strict):
    """Settings applied to the claim's VF (``vf`` and ``shared`` modes only)."""

    mac: str | None = Field(default=None, description="Unicast MAC, lower-case, colon-separated")
    vlan: StrictInt | None = Field(
        default=None, ge=0, le=4094, description="802.1Q VLAN id (0: none)"
    )
    trust: StrictBool | None = None
    spoof_chk: StrictBool | None = Field(default=None, alias="spoofChk")
    mtu: StrictInt | None = Field(default=None, ge=68, le=9216)

    @field_validator("mac")
    @classmethod
    def _mac(cls, v: str | None) -> str | None:
        if v is None:
            return v
        low = v.lower()
        if not _MAC.match(low):
            raise ValueError(f"{v!r} is not a MAC address; write it as 02:00:00:00:00:01")
        if int(low[:2], 16) & 1:
            raise ValueError(f"{v!r} is a multicast address; the first octet must be even")
        if low == "00:00:00:00:00:00":
            raise ValueError("00:00:00:00:00:00 is not a usable address; leave mac out instead")
        return low


class RdmaConfig(_Strict):
    """Whether the container gets the function's RDMA char devices."""

    enabled: StrictBool = True


class NicConfig(_Strict):
    """The opaque config object (see the module docstring)."""

    api_version: Literal["ainic.drakit.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["NicConfig"]
    queues: StrictInt | None = Field(
        default=None, ge=1, le=256, description="Channels (queue pairs) on the function"
    )
    bandwidth: StrictInt | None = Field(
        default=None, ge=1, le=800, description="Maximum transmit rate of the VF, Gbps"
    )
    vf: VfConfig | None = None
    rdma: RdmaConfig = RdmaConfig()


def parse_nic_config(
    api_version: str, kind: str, parameters: Mapping[str, Any]
) -> NicConfig | None:
    """The validated config, or ``None`` when ``(api_version, kind)`` is not ours.

    Raises:
        ConfigInvalid: one ``(field, message)`` per problem.
    """
    ours = (NIC_CONFIG_API_VERSION, "NicConfig")
    return parse_opaque_config(NicConfig, ours, api_version, kind, parameters)


def merged(configs: tuple[Any, ...]) -> dict[str, Any]:
    """The effective settings of a device's ``NicConfig`` objects (class first; later wins)."""
    out: dict[str, Any] = {}
    vf: dict[str, Any] = {}
    for cfg in configs:
        if not isinstance(cfg, NicConfig):
            continue
        for key in ("queues", "bandwidth"):
            value = getattr(cfg, key)
            if value is not None:
                out[key] = value
        if "rdma" in cfg.model_fields_set:
            out["rdma"] = cfg.rdma.enabled
        if cfg.vf is not None:
            vf.update(cfg.vf.model_dump(exclude_none=True))
    if vf:
        out["vf"] = vf
    return out
