"""drakit-sim-profiles registers exactly its machines, each under its spec's name."""

from __future__ import annotations

from importlib import metadata

from drakit.sim import get_profile, profile_source
from drakit_sim_profiles.profiles import PROFILES


def test_entry_points_are_the_profiles_table() -> None:
    eps = {
        ep.name: ep.value
        for ep in metadata.entry_points(group="drakit.profiles")
        if ep.dist is not None and ep.dist.metadata["Name"] == "drakit-sim-profiles"
    }
    assert eps == {
        name: f"drakit_sim_profiles.profiles:{factory.__name__}"
        for name, factory in PROFILES.items()
    }


def test_every_machine_is_named_as_registered_and_found_by_core() -> None:
    for name, factory in PROFILES.items():
        assert factory().name == name
        assert get_profile(name).name == name
        assert profile_source(name) == "drakit-sim-profiles"
