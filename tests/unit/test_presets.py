"""What runs when nothing is configured comes from what is installed (``drakit.presets``).

Core names no backend and no profile; ``drakit-sim-profiles`` ships the default backends and
the demo's choice, and without a preset core falls back to what is installed.
"""

from __future__ import annotations

import pytest

from drakit.host import presets
from drakit.host.loader import installed_plugins
from drakit.host.presets import Preset, default_backends, demo_preset, preset
from drakit.host.settings import DrakitSettings
from drakit.host.startup import effective_settings
from drakit.simseam import PROFILE_GROUP, entries
from drakit_sim_profiles.presets import DEFAULT_BACKENDS, DEMO, DEMO_PROFILE


def test_the_shipped_presets_are_read() -> None:
    assert default_backends() == list(DEFAULT_BACKENDS)
    assert demo_preset() == Preset.model_validate(DEMO)
    assert demo_preset().profile == DEMO_PROFILE
    assert preset("no-such-preset") is None


def test_no_configured_backend_means_the_default_presets() -> None:
    settings = effective_settings(DrakitSettings())
    assert list(settings.plugins) == list(DEFAULT_BACKENDS)


def test_without_presets_core_falls_back_to_what_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(presets, "preset", lambda name: None)
    installed = [e.name for e in installed_plugins()]
    assert default_backends() == installed
    fallback = demo_preset()
    assert fallback.profile == entries(PROFILE_GROUP)[0].name
    assert list(fallback.plugins) == installed
