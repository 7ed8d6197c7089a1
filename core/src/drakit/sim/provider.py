"""The simulator as the runtime reaches it: the ``drakit.simulator`` entry point's object.

:mod:`drakit.host.startup` (what ``drakit node``, ``demo``, ``slices``... start through) never
imports :mod:`drakit.sim`; it loads :data:`SIMULATOR` by entry point when a ``--profile`` or a
simulated ``--sysfs-root`` asks for it. Vendor-library stand-ins come from the
``drakit.sim_libraries`` entry point group, one factory per backend that has some (the NVIDIA
backend's fake NVML), so core knows no vendor's library.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from drakit.sim.profiles import materialize
from drakit.simseam import SIM_LIBRARY_GROUP, entries, load

__all__ = ["SIMULATOR", "DrakitSimulator", "simulated_libraries"]

LibraryFactory = Callable[[Path], dict[str, object]]


def simulated_libraries(root: Path) -> dict[str, object]:
    """Every installed ``drakit.sim_libraries`` factory's stand-ins for ``root``, merged.

    A factory returns ``{}`` when the root holds nothing of its vendor (no ``nvml.json``).
    """
    out: dict[str, object] = {}
    for entry in entries(SIM_LIBRARY_GROUP):
        factory = cast(LibraryFactory, load(SIM_LIBRARY_GROUP, entry.name))
        out.update(factory(Path(root)))
    return out


class DrakitSimulator:
    """:class:`drakit.simseam.Simulator` over :mod:`drakit.sim`'s profiles."""

    @contextmanager
    def materialize(self, name: str) -> Iterator[Path]:
        """Build the named profile in a temporary root (see :func:`drakit.sim.materialize`)."""
        with materialize(name) as root:
            yield root

    def libraries(self, root: Path) -> dict[str, object]:
        """See :func:`simulated_libraries`."""
        return simulated_libraries(root)


SIMULATOR = DrakitSimulator()
"""Registered as entry point ``drakit`` of group ``drakit.simulator``."""
