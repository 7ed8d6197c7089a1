"""drakit's NRI plugin as ``/readyz`` reports it (no NRI import)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["NriState"]


class NriState(StrEnum):
    """drakit's NRI plugin as ``/readyz`` reports it."""

    DISABLED = "disabled"
    ABSENT = "absent"  # no NRI socket (the runtime has NRI off, or is not running)
    CONNECTING = "connecting"  # not registered and synchronized yet (or the node lock not tried)
    CONNECTED = "connected"
    STANDBY = "standby"  # another drakit instance on the node holds NRI (a rolling update)
