"""Fault injection for crash tests: ``DRAKIT_CRASH_AT`` names points where the process dies.

The crash tests start ``drakit node`` with ``DRAKIT_CRASH_AT=<point>[,<point>...]`` and repeat
the kubelet's call after the restart. A named point kills the process with SIGKILL (no cleanup,
exactly like ``kill -9``). Points: ``prepare-after-get``, ``prepare-after-plugin``,
``prepare-after-metadata`` (the claim's device metadata files written, its CDI spec not yet),
``prepare-after-cdi``, ``prepare-after-checkpoint``, ``unprepare-after-plugin``,
``unprepare-after-cdi``, ``unprepare-after-checkpoint``; and ``prepare-after-member``, after a
composite's member has prepared and been recorded (before the next member is asked; not in
:data:`CRASH_POINTS`, whose claims have no composite). Backends mark the steps inside their own
prepares with the same function, public as :func:`drakit.preparekit.crash_point` (the AINIC
VF steps: ``drakit_amd_ainic.prepare.CRASH_POINTS``). The variable is read once, when drakit is
imported (the tests set it in the node's environment): a point costs a set lookup.
"""

from __future__ import annotations

from drakit.preparekit import crash_point

__all__ = ["CRASH_POINTS", "crash_point"]

CRASH_POINTS = (
    "prepare-after-get",
    "prepare-after-plugin",
    "prepare-after-metadata",
    "prepare-after-cdi",
    "prepare-after-checkpoint",
    "unprepare-after-plugin",
    "unprepare-after-cdi",
    "unprepare-after-checkpoint",
)
