"""The simulator as the runtime reaches it: the ``drakit.simulator`` entry point's object.

:mod:`drakit.host.startup` (what ``drakit node``, ``demo``, ``slices``... start through) never
imports :mod:`drakit.sim`; it loads :data:`SIMULATOR` by entry point when a ``--profile`` or a
simulated ``--sysfs-root`` asks for it. Vendor-library stand-ins come from the
``drakit.sim_libraries`` entry point group, one factory per backend that has some (the NVIDIA
backend's fake NVML), so core knows no vendor's library; what a simulated root does on its
own (the AINIC backend's SR-IOV kernel) from ``drakit.sim_behaviours``, run while the root is
used (:func:`simulated_behaviours`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import cast

from drakit.sim.profiles import materialize
from drakit.simseam import SIM_BEHAVIOUR_GROUP, SIM_LIBRARY_GROUP, entries, load

__all__ = ["SIMULATOR", "DrakitSimulator", "simulated_behaviours", "simulated_libraries"]

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


BehaviourFactory = Callable[[Path], AbstractContextManager[object] | None]


@contextmanager
def simulated_behaviours(root: Path) -> Iterator[list[str]]:
    """Run every installed ``drakit.sim_behaviours`` factory's behaviour for ``root``.

    Yields the names of the entry points that run one (a factory returns ``None`` when the root
    holds nothing of its vendor); they stop, in reverse order, on exit.
    """
    with ExitStack() as stack:
        running = []
        for entry in entries(SIM_BEHAVIOUR_GROUP):
            factory = cast(BehaviourFactory, load(SIM_BEHAVIOUR_GROUP, entry.name))
            behaviour = factory(Path(root))
            if behaviour is not None:
                stack.enter_context(behaviour)
                running.append(entry.name)
        yield running


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

    def behaviours(self, root: Path) -> AbstractContextManager[list[str]]:
        """See :func:`simulated_behaviours`."""
        return simulated_behaviours(root)


SIMULATOR = DrakitSimulator()
"""Registered as entry point ``drakit`` of group ``drakit.simulator``."""
