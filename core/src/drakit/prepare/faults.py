"""Fault injection for crash tests: ``DRAKIT_CRASH_AT`` names points where the process dies.

The crash tests start ``drakit node`` with ``DRAKIT_CRASH_AT=<point>[,<point>...]`` and repeat
the kubelet's call after the restart. A named point kills the process with SIGKILL (no cleanup,
exactly like ``kill -9``). Points: ``prepare-after-get``, ``prepare-after-plugin``,
``prepare-after-metadata`` (the claim's device metadata files written, its CDI spec not yet),
``prepare-after-cdi``, ``prepare-after-checkpoint``, ``unprepare-after-plugin``,
``unprepare-after-cdi``, ``unprepare-after-checkpoint``; and ``prepare-after-member``, after a
composite's member has prepared and been recorded (before the next member is asked; not in
:data:`CRASH_POINTS`, whose claims have no composite). The variable is read once,
when this module is imported (the tests set it in the node's environment): a point costs a set
lookup.
"""

from __future__ import annotations

import os
import signal

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


_WANTED = frozenset(p for p in os.environ.get("DRAKIT_CRASH_AT", "").split(",") if p)


def crash_point(name: str) -> None:
    """Die here with SIGKILL if ``DRAKIT_CRASH_AT`` names this point."""
    if name in _WANTED:
        os.kill(os.getpid(), signal.SIGKILL)
