"""``drakit.hookspecs.API_VERSION`` and the ``hook_api`` check when a plugin is loaded.

The plugins are real entry points (the ``entry_points`` fixture installs throwaway
distributions), loaded by the real plugin host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from drakit.errors import PluginLoadError
from drakit.hookspecs import API_VERSION
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.models import NodeInfo

if TYPE_CHECKING:
    from tests.conftest import EntryPoints

pytestmark = pytest.mark.usefixtures("clean_drakit_env")

NODE = NodeInfo(name="node-1", sysfs_root="/nonexistent")
MAJOR = Version(API_VERSION).major


def backend(api: str | None) -> str:
    """A minimal backend's source, declaring ``hook_api = api`` unless ``api`` is None."""
    declared = "" if api is None else f"hook_api = {api!r}"
    return f"""
        from drakit import PluginSettings
        class Plugin:
            settings_model = PluginSettings
            default_driver = "fpga.example.com"
            {declared}
            def __init__(self, context):
                self.context = context
        """


def host(name: str) -> PluginHost:
    return PluginHost(DrakitSettings(plugins={name: {}}), NODE)


def test_api_version_is_major_dot_minor() -> None:
    version = Version(API_VERSION)
    assert version.release[:2] == (version.major, version.minor)
    assert len(version.release) == 2


@pytest.mark.parametrize(
    "api", [None, f">={API_VERSION},<{MAJOR + 1}", f"~={API_VERSION}", f"=={MAJOR}.*"]
)
def test_a_plugin_made_for_this_api_loads(entry_points: EntryPoints, api: str | None) -> None:
    entry_points.install("drakit.plugins", "fits", backend(api))
    assert list(host("fits").backends) == ["fits"]


@pytest.mark.parametrize("api", [f">={MAJOR + 1}.0", f"<{API_VERSION}", f"=={MAJOR + 1}.*"])
def test_a_plugin_needing_another_api_is_refused_with_both_versions(
    entry_points: EntryPoints, api: str
) -> None:
    entry_points.install("drakit.plugins", "future_fpga", backend(api))
    with pytest.raises(PluginLoadError) as exc:
        host("future_fpga")
    message = str(exc.value)
    assert exc.value.plugin == "future_fpga"
    assert message.startswith("plugin 'future_fpga': needs drakit hook API ")
    assert f"needs drakit hook API {SpecifierSet(api)} " in message  # what it needs
    assert f"serves API {API_VERSION}" in message  # what is installed
    assert "docs/compatibility.md" in message


def test_a_malformed_specifier_is_refused_with_an_example(entry_points: EntryPoints) -> None:
    entry_points.install("drakit.plugins", "sloppy", backend("version one please"))
    with pytest.raises(PluginLoadError) as exc:
        host("sloppy")
    assert "'version one please' is not a version specifier" in str(exc.value)
    assert f"'>={API_VERSION},<{MAJOR + 1}'" in str(exc.value)


def test_a_strategy_needing_another_api_is_refused_when_selected(
    entry_points: EntryPoints,
) -> None:
    entry_points.install(
        "drakit.strategies",
        "later",
        f"""
        from drakit.strategies import Strategy
        class Plugin(Strategy):
            name = "later"
            hook_api = ">={MAJOR + 1}"
        """,
    )
    settings = DrakitSettings(plugins={"cpu": {"strategy": "later"}})
    with pytest.raises(PluginLoadError, match=r"plugin 'later': needs drakit hook API"):
        PluginHost(settings, NODE)
    # not selected: skipped (with a logged warning), like a strategy that fails to import
    assert "later" not in PluginHost(DrakitSettings(plugins={"cpu": {}}), NODE).strategies
