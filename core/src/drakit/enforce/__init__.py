"""Enforcement through the container runtime (NRI): the claims' effects inside containers.

``views``: the runtime's pods and containers as drakit's public views, and the claims' devices
a container uses (from its CDI device names); ``merge``: plugins' answers into one cpuset and
NRI adjustments and updates (pure); ``enforcer``: the NRI event handlers inside ``drakit node``
that call the enforcement hooks. See docs/nri.md.
"""

from drakit.enforce.enforcer import Enforcer, NriState
from drakit.enforce.merge import GUARD_DIR, Wanted, guard_mount, merge_answers

__all__ = ["GUARD_DIR", "Enforcer", "NriState", "Wanted", "guard_mount", "merge_answers"]
