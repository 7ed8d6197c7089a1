"""What runs when nothing is configured comes from what is installed (``drakit.presets``).

Core names no backend and no profile; ``drakit-sim-profiles`` ships the default backends and
the demo's choice, and without a preset core falls back to what is installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drakit.host import presets
from drakit.host.loader import installed_plugins
from drakit.host.presets import Preset, default_backends, demo_preset, preset
from drakit.host.settings import DrakitSettings
from drakit.host.startup import effective_settings
from drakit.simseam import PROFILE_GROUP, entries
from drakit_sim_profiles.presets import DEFAULT_BACKENDS, DEMO, DEMO_PROFILE

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_chart_orders_the_cli_default_and_enables_only_what_needs_no_privilege() -> None:
    """One default set (docs/operating.md, "Installing"): the chart's pluginOrder is the CLI's
    default backends; it enables by default exactly those that need no privileged container,
    host network or writable /sys and stand alone (the composite needs members)."""
    values = yaml.safe_load((ROOT / "deployments/helm/drakit/values.yaml").read_text())
    assert values["pluginOrder"] == list(DEFAULT_BACKENDS)
    backends = values["backends"]
    enabled = {b for b, v in backends.items() if v["enabled"]}
    unprivileged = {
        b
        for b, v in backends.items()
        if not (v.get("privileged") or v.get("hostNetwork") or v.get("writesSysfs"))
        and not v.get("members")
    }
    assert enabled == unprivileged == {"cpu"}
    doc = (ROOT / "docs/operating.md").read_text()
    assert "the one place where the\nchart and the command line differ" in doc
