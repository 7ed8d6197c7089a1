"""The fixture backend is installed for drakit's tests and nowhere else (issue 10, item 7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.fixtures.install import FIXTURES, install_fixture_distributions

from drakit.host.loader import installed_plugins, installed_strategies

ROOT = FIXTURES.parents[1]


def test_the_tests_see_the_fixture_distribution() -> None:
    assert install_fixture_distributions() == ["drakit-example-thirdparty"]  # done by conftest
    [entry] = [e for e in installed_plugins() if e.name == "example_fpga"]
    assert (entry.distribution, entry.version) == ("drakit-example-thirdparty", "0.0.1")
    assert "reverse" in {e.name for e in installed_strategies()}


def test_drakit_plugins_outside_the_tests_does_not_list_it() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from drakit.commands.cli import main; main()",
            "plugins",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path.home(),  # not the checkout: nothing of it on sys.path
        timeout=120,
        check=True,
    )
    names = {row["name"] for row in json.loads(proc.stdout)}
    assert "cpu" in names  # the workspace's own backends are installed
    assert not names & {"example_fpga", "reverse"}


def test_no_fixture_is_a_workspace_member_or_a_dependency() -> None:
    root = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    members = root["tool"]["uv"]["workspace"]["members"]
    assert not any(m.startswith("tests/") for m in members)
    fixtures = {
        tomllib.loads(p.read_text(encoding="utf-8"))["project"]["name"]
        for p in FIXTURES.glob("*/pyproject.toml")
    }
    assert fixtures
    declared = set(root["tool"]["uv"].get("sources", {})) | {
        dep for group in root.get("dependency-groups", {}).values() for dep in group
    }
    assert not fixtures & declared
