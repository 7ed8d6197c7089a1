"""The prepare kit: what every backend's prepare hook does the same way.

A backend's ``prepare`` looks each allocated device up in what its last discovery round
published (:func:`published_device`), reads whole-unit consumed capacities of shared devices
(:func:`whole_quantity`), and answers one :class:`~drakit.models.PreparedDevice` per allocated
device (:func:`prepared_device`). Errors are :class:`~drakit.errors.PermanentError`: retrying
cannot make an unknown device known or a fractional CPU whole.

A backend whose prepare takes several steps that change the host (create VFs, record them,
configure them) marks each with :func:`crash_point`, so the crash tests can ``kill -9`` the
node between any two of them (``DRAKIT_CRASH_AT``, :mod:`drakit.prepare.faults`).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Any, TypeVar

from drakit.errors import PermanentError
from drakit.models import AllocatedDevice, CdiEdits, NetworkData, PreparedDevice, quantity_value

__all__ = ["crash_point", "prepared_device", "published_device", "whole_quantity"]

_CRASH_AT = frozenset(p for p in os.environ.get("DRAKIT_CRASH_AT", "").split(",") if p)


def crash_point(name: str) -> None:
    """Die here with SIGKILL (exactly ``kill -9``) if ``DRAKIT_CRASH_AT`` names this point.

    ``DRAKIT_CRASH_AT`` (comma-separated point names) is read once, when drakit is imported:
    the crash tests set it in the node's environment; a point costs a set lookup. Name a
    backend's points ``<plugin>-after-<step>`` and list them where its crash test finds them.
    """
    if name in _CRASH_AT:
        os.kill(os.getpid(), signal.SIGKILL)


_T = TypeVar("_T")


def published_device(published: Mapping[str, _T], device: str, problem: str) -> _T:
    """``published[device]``, or a :class:`PermanentError` naming what this node does publish.

    ``problem`` says what is wrong (``"claim ns/a request 'gpu': 'gpu-9' is not an NVIDIA
    device on this node"``); the error appends `` (known: gpu-0, gpu-1)`` (or ``none``).
    """
    found = published.get(device)
    if found is None:
        raise PermanentError(f"{problem} (known: {', '.join(sorted(published)) or 'none'})")
    return found


#: A consumed amount longer than this is refused unread (the scheduler writes "4").
_MAX_QUANTITY_CHARS = 64
#: Plain digits up to this length are read directly (the common case, no parser).
_MAX_PLAIN_DIGITS = 18


def whole_quantity(q: str, where: str, what: str, *, unit: str = "", most: int, holder: str) -> int:
    """A consumed capacity (``"4"``, ``"4000m"``) as a positive whole number, at most ``most``.

    Exact and bounded: an exponent beyond 64 or a string over 64 characters is refused, never
    expanded (a forged ``"1e999999"`` must not hold the driver's lock). ``what`` names the
    capacity, ``unit`` ends the message (``" of CPUs"``) and ``holder`` names what nothing exceeds,
    e.g. ``"<where>: consumed cpu '1500m' must be a positive whole number of CPUs"``,
    ``"<where>: consumed cpu '1e9' is more than any node has"``.

    Raises:
        PermanentError: ``q`` is not a quantity, not a positive whole number, or above ``most``.
    """
    if q.isdigit() and q.isascii() and len(q) <= _MAX_PLAIN_DIGITS and 0 < int(q) <= most:
        return int(q)  # what the scheduler writes
    value = quantity_value(q) if len(q) <= _MAX_QUANTITY_CHARS else None
    shown = q if len(q) <= _MAX_QUANTITY_CHARS else q[:40] + "..."
    if value is None:
        raise PermanentError(f"{where}: consumed {what} {shown!r} is not a quantity")
    if value <= 0 or value.denominator != 1:
        raise PermanentError(
            f"{where}: consumed {what} {shown!r} must be a positive whole number{unit}"
        )
    if value > most:
        raise PermanentError(f"{where}: consumed {what} {shown!r} is more than {holder} has")
    return int(value)


def prepared_device(
    dev: AllocatedDevice,
    edits: CdiEdits | None = None,
    state: Mapping[str, Any] | None = None,
    network_data: NetworkData | None = None,
) -> PreparedDevice:
    """The :class:`PreparedDevice` answering ``dev`` (its request, pool and device)."""
    return PreparedDevice(
        request=dev.request,
        pool=dev.pool,
        device=dev.device,
        edits=edits if edits is not None else CdiEdits(),
        state=dict(state) if state is not None else {},
        network_data=network_data,
    )
