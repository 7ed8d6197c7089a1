"""The member session: how a composing plugin prepares its members' devices.

A composite backend prepares some devices through other enabled plugins of its driver (its
members, :attr:`drakit.context.PluginContext.members`). It may do so only during its own prepare
call, and the prepare pipeline records each member's result in the checkpoint: the pipeline
lends a :class:`MemberSession` for the call, kept per thread (prepare calls of different drivers
run on different threads at once).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Protocol

from drakit.context import PluginContext
from drakit.errors import PermanentError
from drakit.models import ClaimInfo, PreparedDevice

__all__ = ["MemberCalls", "MemberSession"]


class MemberSession(Protocol):
    """What the prepare pipeline lends a plugin's prepare call for its members' devices."""

    def prepare(self, plugin: str, claim: ClaimInfo) -> list[PreparedDevice]:
        """Prepare ``claim`` through ``plugin`` and record the result."""
        ...

    def unprepare(self, plugin: str, claim_uid: str, prepared: Sequence[PreparedDevice]) -> None:
        """Undo ``prepared`` through ``plugin`` and forget it."""
        ...


_Lent = tuple[str, MemberSession] | None
"""(the plugin whose prepare call runs here, the session lent to it), or none."""


class MemberCalls:
    """The member session lent to the prepare call running on each thread.

    Args:
        contexts: every backend's context by plugin name (members are the other plugins of the
            caller's driver); read at each call, so it may be filled after this is built.
    """

    def __init__(self, contexts: Mapping[str, PluginContext]) -> None:
        self._contexts = contexts
        self._local = threading.local()

    def lend(self, plugin: str, members: MemberSession | None) -> _Lent:
        """Lend ``members`` to ``plugin``'s call on this thread; returns what to :meth:`restore`."""
        outer: _Lent = getattr(self._local, "session", None)
        self._local.session = (plugin, members) if members is not None else None
        return outer

    def restore(self, outer: _Lent) -> None:
        """End the call :meth:`lend` began (``outer`` is what it returned)."""
        self._local.session = outer

    def _session(self, caller: str, member: str) -> MemberSession:
        session: _Lent = getattr(self._local, "session", None)
        if session is None or session[0] != caller:
            raise PermanentError(
                f"plugin {caller!r} asked for member {member!r} outside its own prepare call"
            )
        driver = self._contexts[caller].driver_name
        ctx = self._contexts.get(member)
        if member == caller or ctx is None or ctx.driver_name != driver:
            others = [
                p for p, c in self._contexts.items() if c.driver_name == driver and p != caller
            ]
            raise PermanentError(
                f"plugin {caller!r} cannot prepare through {member!r}: members are the other "
                f"enabled plugins of driver {driver!r} ({', '.join(others) or 'none'})"
            )
        return session[1]

    def prepare(self, caller: str, member: str, claim: ClaimInfo) -> list[PreparedDevice]:
        """``caller``'s request to prepare ``claim`` through ``member``.

        Raises:
            PermanentError: outside ``caller``'s prepare call, or ``member`` is not one of the
                other enabled plugins of its driver.
        """
        return self._session(caller, member).prepare(member, claim)

    def unprepare(
        self, caller: str, member: str, claim_uid: str, prepared: Sequence[PreparedDevice]
    ) -> None:
        """``caller``'s request to undo ``prepared`` through ``member`` (checked as prepare)."""
        self._session(caller, member).unprepare(member, claim_uid, prepared)
