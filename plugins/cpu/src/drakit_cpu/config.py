"""The CPU backend's per-claim opaque config: ``CpuConfig`` (``cpu.drakit.io/v1alpha1``).

Its option rules are :mod:`drakit_cpu.policy`'s, shared with the node's settings
(:mod:`drakit_cpu.settings`), so a combination is rejected the same way wherever it is written.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
)

from drakit_cpu.policy import Policy, policy_conflicts

__all__ = ["CPU_CONFIG_API_VERSION", "CpuConfig", "policy_field_conflict"]

CPU_CONFIG_API_VERSION = "cpu.drakit.io/v1alpha1"


def policy_field_conflict(option: str, value: Any, info: ValidationInfo) -> Any:
    """Field validator body: reject ``option=value`` if it breaks a rule with ``policy``."""
    policy = info.data.get("policy")
    kwargs: dict[str, Any] = {"prefer_uncore": None, "group_size": None, "full_pcpus_only": None}
    kwargs[option] = value
    for _, message in policy_conflicts(policy, **kwargs):
        raise ValueError(message)
    return value


class CpuConfig(BaseModel):
    """The per-claim opaque config (``apiVersion: cpu.drakit.io/v1alpha1``, ``kind: CpuConfig``).

    Every field is optional; a field that is not set takes the node's value. Combinations that
    kubelet rejects are rejected here with the field's name (``preferUncore: only applies to
    policy 'packed' ...``); so are unknown fields.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Literal["cpu.drakit.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["CpuConfig"]
    policy: Policy | None = None
    prefer_uncore: StrictBool | None = Field(default=None, alias="preferUncore")
    group_size: StrictInt | None = Field(default=None, ge=1, le=64, alias="groupSize")
    full_pcpus_only: StrictBool | None = Field(default=None, alias="fullPCPUsOnly")

    @field_validator("prefer_uncore", "group_size", "full_pcpus_only")
    @classmethod
    def _combination(cls, v: Any, info: ValidationInfo) -> Any:
        return policy_field_conflict(str(info.field_name), v, info)
