"""Allocation policies and the rules for combining their options.

One rule set, used by the node configuration (``plugins.cpu``), the per-claim ``CpuConfig`` and
``drakit cpu allocate``, so a combination is rejected the same way wherever it is written. The
rules are kubelet's (its mutually exclusive ``cpuManagerPolicyOptions``, sources in
``docs/references.md``) plus two of drakit's own (an option that only one policy reads is an
error with another policy, never ignored):

* ``prefer_uncore`` only with ``packed`` (kubelet: ``prefer-align-cpus-by-uncorecache`` excludes
  ``distribute-cpus-across-numa`` and ``distribute-cpus-across-cores``);
* ``group_size`` only with ``distributed`` (kubelet's ``cpuGroupSize``);
* ``full_pcpus_only`` not with ``spread`` (kubelet: ``full-pcpus-only`` excludes
  ``distribute-cpus-across-cores``, which deliberately uses one thread per core).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "CLAIM_FIELDS",
    "POLICIES",
    "Policy",
    "PolicyOptions",
    "policy_conflicts",
]

Policy = Literal["packed", "distributed", "spread"]
POLICIES: tuple[Policy, ...] = get_args(Policy)

CLAIM_FIELDS: Mapping[str, str] = {
    "policy": "policy",
    "prefer_uncore": "preferUncore",
    "group_size": "groupSize",
    "full_pcpus_only": "fullPCPUsOnly",
}
"""Option name -> its field name in a ``CpuConfig`` (what per-claim errors name)."""


@dataclass(frozen=True)
class PolicyOptions:
    """A policy with its options, ready for :func:`drakit_cpu.allocator` calls.

    Attributes:
        policy: ``packed``, ``distributed`` or ``spread``.
        prefer_uncore: packed: align to uncore (L3) caches first.
        group_size: distributed: CPUs handed out together; ``None`` is kubelet's default
            (the SMT level with ``full_pcpus_only``, else 1).
        full_pcpus_only: whole physical cores only (kubelet's SMT alignment check).
    """

    policy: Policy = "packed"
    prefer_uncore: bool = False
    group_size: int | None = None
    full_pcpus_only: bool = False

    def conflicts(self) -> list[tuple[str, str]]:
        """``(option, message)`` for every rule this combination breaks (see the module)."""
        return policy_conflicts(
            self.policy, self.prefer_uncore, self.group_size, self.full_pcpus_only
        )


def policy_conflicts(
    policy: Policy | None,
    prefer_uncore: bool | None,
    group_size: int | None,
    full_pcpus_only: bool | None,
) -> list[tuple[str, str]]:
    """Check a (possibly partial) combination; ``None`` means "not given".

    Returns:
        ``(option, message)`` pairs, ``option`` being the snake_case option name. Empty when
        the combination is valid or the policy is not given.
    """
    if policy is None:
        return []
    out: list[tuple[str, str]] = []
    if prefer_uncore and policy != "packed":
        out.append(
            (
                "prefer_uncore",
                f"only applies to policy 'packed', not {policy!r} (kubelet: "
                "prefer-align-cpus-by-uncorecache cannot be combined with "
                "distribute-cpus-across-numa or -cores); remove it or use policy 'packed'",
            )
        )
    if group_size is not None and policy != "distributed":
        out.append(
            (
                "group_size",
                f"only applies to policy 'distributed', not {policy!r}; remove it or use "
                "policy 'distributed'",
            )
        )
    if full_pcpus_only and policy == "spread":
        out.append(
            (
                "full_pcpus_only",
                "cannot be combined with policy 'spread', which uses one thread per core "
                "(kubelet: full-pcpus-only and distribute-cpus-across-cores are mutually "
                "exclusive); use policy 'packed' or 'distributed'",
            )
        )
    return out
