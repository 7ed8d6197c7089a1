"""``plugins.amd_ainic``: which NICs drakit manages, in which mode, and their fabric identity.

Each PF is in exactly one mode. ``nics`` rules select PFs by PCI address, interface-name glob
or PF name; a PF that no rule selects takes ``default_mode``. Mode ``none`` leaves the PF (and
its VFs) to another agent, e.g. the classic AMD device plugin (``docs/ainic-backend.md``,
"Coexistence").
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from drakit.config import PluginSettings

__all__ = [
    "AmdAinicSettings",
    "CapacityPolicy",
    "Mode",
    "NicRule",
    "NicSelector",
]

Mode = Literal["pf", "vf", "shared", "none"]
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_DNS = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NicSelector(_Strict):
    """Which PFs a rule applies to: any listed PCI address, ifName glob or PF name matches."""

    pci_addresses: tuple[str, ...] = Field(default=(), description="PF BDFs (0000:18:00.0)")
    if_names: tuple[str, ...] = Field(default=(), description="PF netdev globs (enp1*s0)")
    pf_names: tuple[str, ...] = Field(default=(), description="Exact PF netdev names")

    @field_validator("pci_addresses")
    @classmethod
    def _bdfs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [a for a in v if not _BDF.match(a)]
        if bad:
            raise ValueError(
                f"{bad} are not PCI addresses; write them as sysfs does, e.g. 0000:18:00.0"
            )
        return v

    @model_validator(mode="after")
    def _something(self) -> NicSelector:
        if not (self.pci_addresses or self.if_names or self.pf_names):
            raise ValueError("selects nothing; set pci_addresses, if_names or pf_names")
        return self


class CapacityPolicy(_Strict):
    """The request policy of one consumable capacity of a shared PF (whole units)."""

    default: int = Field(ge=1, description="What a request that names no amount consumes")
    min: int = Field(default=1, ge=1)
    step: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _default_in_range(self) -> Self:
        # the published requestPolicy's validRange must hold its default, or the API server
        # refuses the slice and no claim can ever get a share
        if self.default < self.min:
            raise ValueError(
                f"default {self.default} is below min {self.min}: a request that names no "
                "amount could never be allocated; raise default or lower min"
            )
        if (self.default - self.min) % self.step:
            raise ValueError(
                f"default {self.default} is not min {self.min} plus a multiple of step "
                f"{self.step}; pick a default on the step"
            )
        return self


class NicRule(_Strict):
    """One entry of ``nics``: a selector and the mode (and pool limits) of the PFs it selects."""

    select: NicSelector
    mode: Mode
    vf_limit: int | None = Field(
        default=None,
        ge=0,
        le=256,
        description="shared: most VFs created on demand (default: plugins' vf_limit)",
    )


class AmdAinicSettings(PluginSettings):
    """``plugins.amd_ainic`` (every key optional; the default publishes every PF whole)."""

    default_mode: Mode = Field(default="pf", description="Mode of PFs that no rule selects")
    nics: tuple[NicRule, ...] = Field(default=(), description="Per-NIC mode rules")
    vf_limit: int | None = Field(
        default=None,
        ge=0,
        le=256,
        description="shared: VFs created on demand per PF (default: sriov_totalvfs; 0: never)",
    )
    whole_device_counters: bool = Field(
        default=False,
        description="Make every whole NIC (pf and shared modes) consume a counter set of its "
        "own, also without a composite, for a Kueue that charges counters "
        "(docs/multi-node.md#kueue); an adminAccess claim on a NIC "
        "another claim holds is then never allocated",
    )
    queues: CapacityPolicy = CapacityPolicy(default=1)
    bandwidth_gbps: CapacityPolicy = CapacityPolicy(default=10)
    selection: str = Field(
        default="least-loaded", description="drakit_select_resources strategy for shared VFs"
    )
    shares_per_vf: int = Field(default=1, ge=1, le=64, description="shared: shares on one VF")
    rails: dict[str, int] = Field(
        default_factory=dict, description="PF BDF or ifName -> rail number"
    )
    fabric: str | None = Field(default=None, description="Fabric name of every NIC here")
    fabrics: dict[str, str] = Field(
        default_factory=dict, description="PF BDF or ifName -> fabric name (over 'fabric')"
    )
    topology_file: str | None = Field(
        default=None,
        description="JSON a fabric manager writes: {BDF or ifName: {rail, fabric}}",
    )
    node_labels: str | None = Field(
        default="ainic.drakit.io",
        description=(
            "Label prefix of the Node labels a fabric manager writes: <prefix>/rail.<ifName>, "
            "<prefix>/fabric.<ifName>, <prefix>/fabric (null: do not read labels)"
        ),
    )
    netlink: Literal["auto", "pyroute2", "tree"] = Field(
        default="auto",
        description="VF settings through pyroute2, or into a simulated tree (auto: by root)",
    )
    state_dir: None = Field(
        default=None,
        description=(
            "Removed: the VF ledger is always <state-dir>/plugin_state/amd_ainic/vf-ledger.json "
            "under the node's --state-dir"
        ),
    )
    move_netdevs: Literal["configured", "always", "never"] = Field(
        default="configured",
        description=(
            "Move a claim's netdev into its pod's network namespace at sandbox start (needs the "
            "node's NRI plugin): 'configured' when the claim's NicConfig has 'interface', "
            "'always' for every claim whose function has a netdev, 'never' (a claim asking is "
            "refused at prepare)"
        ),
    )
    rdma_netns_mode: Literal["shared", "exclusive"] = Field(
        default="shared",
        description=(
            "The kernel's RDMA netns mode on this node (rdma system show netns). drakit moves "
            "netdevs, not RDMA devices: under 'exclusive' a claim that moves its netdev and "
            "keeps rdma.enabled is refused at prepare"
        ),
    )
    vf_ready_timeout: float = Field(
        default=10.0, gt=0, le=300, description="Seconds to wait for VFs after sriov_numvfs"
    )

    @field_validator("state_dir", mode="before")
    @classmethod
    def _state_dir(cls, v: object) -> None:
        if v is not None:
            raise ValueError(
                "removed: the VF ledger is always under the node's --state-dir "
                "(<state-dir>/plugin_state/amd_ainic/vf-ledger.json, the chart's stateDir), so "
                "a changed directory can no longer lose it; delete this key"
            )

    @field_validator("fabric")
    @classmethod
    def _fabric(cls, v: str | None) -> str | None:
        if v is not None and not 0 < len(v) <= 64:  # noqa: PLR2004 - attribute value limit
            raise ValueError("must be 1 to 64 characters (a DRA string attribute)")
        return v

    @field_validator("node_labels")
    @classmethod
    def _prefix(cls, v: str | None) -> str | None:
        if v is not None and not _DNS.match(v):
            raise ValueError(
                f"{v!r} is not a label prefix; use a DNS subdomain such as ainic.drakit.io, "
                "or null to not read labels"
            )
        return v

    @field_validator("rails")
    @classmethod
    def _rails(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: r for k, r in v.items() if r < 0}
        if bad:
            raise ValueError(f"rail numbers must be >= 0 (got {bad})")
        return v
