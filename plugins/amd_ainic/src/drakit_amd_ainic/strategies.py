"""VF selection strategies for shared AINICs (``drakit_select_resources``, kind ``ainic-vf``).

``least-loaded`` (the default ``selection``): the free VF holding the fewest shares, the lowest
index on ties. A contributor adds a strategy by answering the hook for another name and
``request.kind == "ainic-vf"``; ``request.options["loads"]`` maps each free VF index to its
current share count and ``request.options["pf"]`` names the PF.
"""

from __future__ import annotations

from collections.abc import Mapping

from drakit.errors import PermanentError
from drakit.strategy_models import SelectionRequest, SelectionResult

__all__ = ["LEAST_LOADED", "least_loaded"]

LEAST_LOADED = "least-loaded"


def least_loaded(request: SelectionRequest) -> SelectionResult:
    """The least-loaded free VF (see the module docstring)."""
    loads: Mapping[int, int] = request.options.get("loads", {})
    free = sorted(request.available, key=lambda i: (loads.get(i, 0), i))
    if len(free) < request.count:
        raise PermanentError(f"{request.count} VFs asked for, {len(free)} free")
    return SelectionResult(units=frozenset(free[: request.count]))
