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
    interface:              # move the netdev into the pod's network namespace (needs NRI)
      name: net1            # its name there (default: the host's name)
      mtu: 9000             # its MTU there (default: unchanged)
      addresses: ["10.0.0.5/24", "fd00::5/64"]   # added there (default: none)
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from drakit.config import parse_opaque_config

__all__ = [
    "NIC_CONFIG_API_VERSION",
    "InterfaceConfig",
    "NicConfig",
    "RdmaConfig",
    "VfConfig",
    "parse_nic_config",
]

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


_IFNAMSIZ = 16
"""The kernel's limit on an interface name, with its terminating NUL (``IFNAMSIZ``)."""


class InterfaceConfig(_Strict):
    """The claim's netdev inside the pod: moved into the pod's network namespace at sandbox start.

    Present (even empty) means "move it": drakit's NRI plugin moves the function's netdev into
    the pod's network namespace when the pod's sandbox starts, names and configures it there,
    and moves it back, under its host name and settings, when the sandbox stops
    (``docs/ainic-backend.md``, "Netdev moves").
    """

    name: str | None = Field(
        default=None, description="The interface's name in the pod (default: the host's name)"
    )
    mtu: StrictInt | None = Field(default=None, ge=68, le=9216, description="Its MTU in the pod")
    addresses: tuple[str, ...] = Field(
        default=(), description="Addresses added in the pod, CIDR (10.0.0.5/24, fd00::5/64)"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not 0 < len(v.encode()) < _IFNAMSIZ:
            raise ValueError(
                f"{v!r} is not 1 to {_IFNAMSIZ - 1} bytes long, as the kernel requires of an "
                "interface name; pick a shorter name such as net1"
            )
        if v in (".", "..") or any(c in v for c in "/: ") or not v.isprintable():
            raise ValueError(
                f"{v!r} is not a valid interface name (no '/', ':', spaces or control "
                "characters, not '.' or '..'); use letters, digits, '-' or '_', e.g. net1"
            )
        if v == "lo":
            raise ValueError("'lo' is the pod's loopback interface; pick another name, e.g. net1")
        return v

    @field_validator("addresses")
    @classmethod
    def _addresses(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        out: list[str] = []
        for text in v:
            if "/" not in text:
                raise ValueError(
                    f"{text!r} has no prefix length; write the address in CIDR form, "
                    "e.g. 10.0.0.5/24 or fd00::5/64"
                )
            try:
                iface = ipaddress.ip_interface(text)
            except ValueError as e:
                raise ValueError(f"{text!r} is not an IP address in CIDR form ({e})") from e
            ip = iface.ip
            if ip.is_loopback or ip.is_multicast or ip.is_unspecified:
                raise ValueError(
                    f"{text!r} is a loopback, multicast or unspecified address; give the "
                    "interface a unicast address"
                )
            if iface.with_prefixlen in out:
                raise ValueError(f"{text!r} is listed twice; list each address once")
            out.append(iface.with_prefixlen)
        return tuple(out)


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
    interface: InterfaceConfig | None = Field(
        default=None,
        description="Move the netdev into the pod's network namespace, named and set up so",
    )


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
    interface: dict[str, Any] | None = None
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
        if cfg.interface is not None:
            interface = interface or {}
            interface.update(cfg.interface.model_dump(exclude_unset=True, mode="json"))
    if vf:
        out["vf"] = vf
    if interface is not None:
        out["interface"] = interface
    return out
