"""The backends' pod mutators for ``drakit webhook``: the ``drakit.admission`` entry points.

Loaded like backends and strategies (:func:`drakit.host.pluginhost.load_entry_points`, the only
code that builds stevedore managers), so the webhook never reads entry points itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata

from drakit.admission import MUTATOR_GROUP, PodMutator, WebhookOptions
from drakit.errors import PluginLoadError
from drakit.host.loader import load_entry_points

__all__ = ["load_mutators"]


def load_mutators(options: WebhookOptions, drivers: Mapping[str, str]) -> list[PodMutator]:
    """Every installed pod mutator, built for ``options``, in entry point name order.

    Args:
        options: the webhook's flags.
        drivers: configured backend -> driver name.

    Raises:
        PluginLoadError: a mutator fails to import, or its factory is not callable.
    """
    names = sorted({ep.name for ep in metadata.entry_points(group=MUTATOR_GROUP)})
    out: list[PodMutator] = []
    for name, factory in load_entry_points(MUTATOR_GROUP, names):
        if not callable(factory):
            raise PluginLoadError(name, f"{MUTATOR_GROUP} entry point is not a factory")
        out.append(factory(options, drivers))
    return out
