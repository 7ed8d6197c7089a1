"""The CPU backend's node settings: ``plugins.cpu`` (:class:`CpuSettings`).

``docs/cpu-backend.md`` describes every field and each (mode, policy) pair.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from drakit.config import PluginSettings
from drakit.cpuset import CpuListError, format_cpulist, parse_cpulist
from drakit_cpu.config import policy_field_conflict
from drakit_cpu.policy import Policy

__all__ = ["CpuSettings"]


def _cpulist(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)
    if not isinstance(v, str):
        raise ValueError(f'{v!r} is not a CPU list (example: "0-3,8")')
    try:
        return format_cpulist(parse_cpulist(v))
    except CpuListError as e:
        raise ValueError(str(e)) from None


class CpuSettings(PluginSettings):
    """``plugins.cpu``: the node's CPU devices and its default allocation policy.

    ``policy``, ``prefer_uncore`` and ``group_size`` form the node's default policy for claims
    that do not choose one; ``full_pcpus_only`` is enforced for every claim.
    """

    reserved: str = Field(default="", description="CPUs never published or handed out (CPU list)")
    mode: Literal["grouped", "individual"] = "grouped"
    group_by: Literal["numa", "socket", "l3"] = "numa"
    policy: Policy = Field(default="packed", description="Default per-claim policy")
    prefer_uncore: bool = Field(default=False, description="packed: align to L3 groups first")
    group_size: int | None = Field(
        default=None, ge=1, le=64, description="distributed: CPUs kept together (default: SMT)"
    )
    full_pcpus_only: bool = Field(default=False, description="Hand out whole physical cores only")
    isolated_cpus: Literal["exclude", "publish"] = Field(
        default="exclude",
        description="CPUs in sys/devices/system/cpu/isolated: never publish, or publish apart",
    )
    node_allocatable: bool = Field(
        default=False,
        description=(
            "Publish KEP-5517 nodeAllocatableResources (cpu) on every device, so the scheduler "
            "counts a claim's CPUs against the node's allocatable CPU (Kubernetes 1.37 alpha "
            "gate DRANodeAllocatableResources on the API server and scheduler)"
        ),
    )

    _reserved = field_validator("reserved", mode="before")(_cpulist)

    @field_validator("group_by", "policy", "prefer_uncore", "group_size")
    @classmethod
    def _grouped_only(cls, v: Any, info: ValidationInfo) -> Any:
        if info.data.get("mode") == "individual":
            raise ValueError(
                "has no effect with mode 'individual', where the scheduler picks the CPUs; "
                "remove it or use mode 'grouped'"
            )
        if info.field_name in ("prefer_uncore", "group_size"):
            return policy_field_conflict(str(info.field_name), v, info)
        return v

    @field_validator("full_pcpus_only")
    @classmethod
    def _full(cls, v: bool, info: ValidationInfo) -> bool:
        return bool(policy_field_conflict("full_pcpus_only", v, info))
