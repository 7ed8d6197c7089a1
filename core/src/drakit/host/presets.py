"""Presets: the backend selections a distribution ships (``drakit.presets`` entry points).

Core names no backend and no simulated machine. What to run when nothing is configured comes
from what is installed: a distribution may register, under the ``drakit.presets`` entry point
group, a plain mapping (no import of drakit needed) naming a profile and backend sections::

    [project.entry-points."drakit.presets"]
    default = "drakit_sim_profiles.presets:DEFAULT"   # backends when the configuration names none
    demo = "drakit_sim_profiles.presets:DEMO"         # what `drakit demo` runs

Two names are read. ``default``: the backends enabled, in this order, when the configuration
names none (those of them installed); without it, every installed backend in name order.
``demo``: the profile and backend sections of ``drakit demo`` (unless ``--profile`` or
``--config`` says otherwise); without it, the first installed profile and the default backends.
The module an entry point names is imported, so keep it free of heavy imports.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from drakit.config import validation_errors
from drakit.errors import PluginLoadError
from drakit.host.loader import installed_plugins, load_entry_points
from drakit.simseam import PROFILE_GROUP, entries

__all__ = ["PRESET_GROUP", "Preset", "default_backends", "demo_preset", "preset"]

PRESET_GROUP = "drakit.presets"


class Preset(BaseModel):
    """A shipped selection: a simulated profile and backend sections, in order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str | None = None
    plugins: dict[str, dict[str, Any]] = {}


def preset(name: str) -> Preset | None:
    """The installed preset ``name`` (the first distribution's, by name), or ``None``.

    Raises:
        PluginLoadError: it fails to import or is not a valid preset.
    """
    if not any(ep.name == name for ep in metadata.entry_points(group=PRESET_GROUP)):
        return None
    [(_, data), *_] = load_entry_points(PRESET_GROUP, [name])
    try:
        return Preset.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{p}: {m}" if p else m for p, m in validation_errors(e))
        raise PluginLoadError(
            name, f"{PRESET_GROUP} entry point is not a preset: {problems}"
        ) from None


def default_backends() -> list[str]:
    """The backends enabled when the configuration names none, in order.

    The ``default`` preset's that are installed, else every installed backend in name order.
    """
    installed = [e.name for e in installed_plugins()]
    shipped = preset("default")
    if shipped is None:
        return installed
    return [n for n in shipped.plugins if n in installed]


def demo_preset() -> Preset:
    """What ``drakit demo`` runs.

    The ``demo`` preset, else the first installed profile with the default backends.
    """
    shipped = preset("demo")
    if shipped is not None:
        return shipped
    profiles = entries(PROFILE_GROUP)
    return Preset(
        profile=profiles[0].name if profiles else None,
        plugins={n: {} for n in default_backends()},
    )
