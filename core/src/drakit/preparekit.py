"""The prepare kit: what every backend's prepare hook does the same way.

A backend's ``prepare`` looks each allocated device up in what its last discovery round
published (:func:`published_device`), reads whole-unit consumed capacities of shared devices
(:func:`whole_quantity`), and answers one :class:`~drakit.models.PreparedDevice` per allocated
device (:func:`prepared_device`). Errors are :class:`~drakit.errors.PermanentError`: retrying
cannot make an unknown device known or a fractional CPU whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from drakit.errors import PermanentError
from drakit.models import AllocatedDevice, CdiEdits, NetworkData, PreparedDevice

__all__ = ["prepared_device", "published_device", "whole_quantity"]

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


def whole_quantity(q: str, where: str, what: str, *, unit: str = "") -> int:
    """A consumed capacity (``"4"``, ``"4000m"``) as a positive whole number.

    ``what`` names the capacity and ``unit`` ends the message (``" of CPUs"``), e.g.
    ``"<where>: consumed cpu '1500m' must be a positive whole number of CPUs"``.

    Raises:
        PermanentError: ``q`` is not a plain or milli quantity, or not a positive whole number.
    """
    if q.isdigit() and q.isascii() and int(q) > 0:  # what the scheduler writes ("4")
        return int(q)
    try:
        value = Decimal(q.removesuffix("m")) / (1000 if q.endswith("m") else 1)
    except InvalidOperation:
        raise PermanentError(f"{where}: consumed {what} {q!r} is not a quantity") from None
    if value <= 0 or value != value.to_integral_value():
        raise PermanentError(
            f"{where}: consumed {what} {q!r} must be a positive whole number{unit}"
        )
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
