"""The ``drakit`` command line, run in-process through ``drakit.cli.main``.

A user error is one line on stderr and exit code 2; ``--verbose`` gives the traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from tests.clirun import run_cli, run_cli_process

from drakit.commands.cli import cli, main
from drakit.sim import UnknownProfileError, list_profiles

pytestmark = pytest.mark.usefixtures("clean_drakit_env")


def test_discover_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["discover", "--profile", "minimal-1s", "-o", "json"], capsys)
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert [(r["driver"], r["pool"], r["plugin"]) for r in rows] == [
        ("cpu.drakit.io", "minimal-1s", "cpu")
    ]
    [row] = rows
    assert set(row) == {"driver", "pool", "device", "plugin", "attributes", "capacity"}
    assert row["attributes"]["resource.kubernetes.io/numaNode"] == 0
    assert row["capacity"]["cpu"] == "8"


def test_discover_yaml_and_node_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        ["discover", "--profile", "h200-8gpu-8ainic", "--node-name", "gpu-node-7", "-o", "yaml"],
        capsys,
    )
    assert code == 0
    rows = yaml.safe_load(out)
    assert {r["pool"] for r in rows} == {"gpu-node-7"}
    plugins = {r["plugin"] for r in rows}
    assert plugins == {"cpu", "nvidia_gpu", "amd_ainic", "composite"}


def test_discover_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["discover", "--profile", "minimal-1s"], capsys)
    assert code == 0
    assert "devices on minimal-1s" in out
    assert "cpu.drakit.io" in out


def _slices(out: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(out) if d is not None]
    for d in docs:
        assert d["apiVersion"] == "resource.k8s.io/v1"
        assert d["kind"] == "ResourceSlice"
        assert set(d["spec"]["pool"]) == {"name", "generation", "resourceSliceCount"}
    return docs


def test_slices_yaml_are_resource_slices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["slices", "--profile", "h200-8gpu-8ainic", "-o", "yaml"], capsys)
    assert (code, err) == (0, "")
    docs = _slices(out)
    devices = [d for d in docs if "sharedCounters" not in d["spec"]]
    # the GPUs, NICs and pairs share the composite's driver and pool (8 + 8 + 8 devices), every
    # GPU and NIC a counter set (16, at most 8 per slice)
    assert {d["spec"]["driver"]: len(d["spec"]["devices"]) for d in devices} == {
        "cpu.drakit.io": 2,
        "pairs.composite.drakit.io": 24,
    }
    counters = [d["spec"] for d in docs if "sharedCounters" in d["spec"]]
    assert [(c["driver"], len(c["sharedCounters"])) for c in counters] == [
        ("pairs.composite.drakit.io", 8),
        ("pairs.composite.drakit.io", 8),
    ]
    assert {d["spec"]["nodeName"] for d in docs} == {"h200-8gpu-8ainic"}
    names = [d["metadata"]["name"] for d in docs]
    assert len(set(names)) == len(names)


def test_slices_json_is_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["slices", "--profile", "minimal-1s", "-o", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    [item] = doc["items"]
    assert item["kind"] == "ResourceSlice"


def test_slices_are_the_same_twice(capsys: pytest.CaptureFixture[str]) -> None:
    _, first, _ = run_cli(["slices", "--profile", "mi300x-8gpu-8ainic"], capsys)
    _, second, _ = run_cli(["slices", "--profile", "mi300x-8gpu-8ainic"], capsys)
    assert first == second


def test_sysfs_root_reads_the_same_hardware_as_the_profile(
    profile_root: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = profile_root("h200-8gpu-8ainic")
    _, by_profile, _ = run_cli(["slices", "--profile", "h200-8gpu-8ainic"], capsys)
    code, by_root, err = run_cli(
        ["slices", "--sysfs-root", str(root), "--node-name", "h200-8gpu-8ainic"], capsys
    )
    assert (code, err) == (0, "")
    assert by_root == by_profile


def test_config_file_selects_plugins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "drakit.yaml"
    config.write_text("plugins:\n  example_fpga:\n    count: 2\n", encoding="utf-8")
    code, out, _ = run_cli(
        ["discover", "--config", str(config), "--profile", "minimal-1s", "-o", "json"], capsys
    )
    assert code == 0
    assert [r["device"] for r in json.loads(out)] == ["fpga-0", "fpga-1"]


def test_profiles_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["profiles"], capsys)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == list_profiles()


def test_unknown_profile_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["discover", "--profile", "h100-16gpu"], capsys)
    assert code == 2
    assert out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("drakit: error: ")
    assert "h100-16gpu" in line
    assert "minimal-1s" in line  # the known profiles are listed
    assert "Traceback" not in err


def test_bad_config_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "drakit.yaml"
    config.write_text("plugins:\n  cpu:\n    reserved: lots\n", encoding="utf-8")
    code, _, err = run_cli(["slices", "--config", str(config), "--profile", "minimal-1s"], capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert "plugins.cpu.reserved" in line


def test_plugin_not_installed_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "drakit.yaml"
    config.write_text("plugins: [cpu, tpu]\n", encoding="utf-8")
    code, _, err = run_cli(["discover", "--config", str(config), "--profile", "minimal-1s"], capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert line.startswith("drakit: error: plugin 'tpu': not installed")


def test_missing_sysfs_root_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["discover", "--sysfs-root", "/nonexistent/drakit"], capsys)
    assert code == 2
    assert "/nonexistent/drakit" in err


def test_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["discovr"], capsys)
    assert code == 2
    assert "discovr" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0
    for command in ("discover", "slices", "plugins", "profiles", "config"):
        assert command in out


def test_verbose_raises_instead_of_one_line() -> None:
    with pytest.raises(UnknownProfileError):
        main(["--verbose", "discover", "--profile", "h100-16gpu"])


def test_verbose_prints_a_traceback_in_a_real_process() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAKIT_")}
    quiet = run_cli_process(["discover", "--profile", "h100-16gpu"], env=env)
    loud = run_cli_process(["-v", "discover", "--profile", "h100-16gpu"], env=env)
    assert quiet.returncode == 2
    assert "Traceback" not in quiet.stderr
    assert len(quiet.stderr.strip().splitlines()) == 1
    assert loud.returncode != 0
    assert "Traceback (most recent call last)" in loud.stderr
    assert "UnknownProfileError" in loud.stderr


def test_every_command_comes_through_the_drakit_cli_entry_points() -> None:
    """Core's commands are registered as a backend's are: one mechanism, imported when run."""
    declared = {ep.name for ep in metadata.entry_points(group="drakit.cli")}
    core = {
        ep.name
        for ep in metadata.entry_points(group="drakit.cli")
        if ep.dist is not None and ep.dist.metadata["Name"] == "drakit"
    }
    assert {"node", "webhook", "demo", "explain", "slices", "sim"} <= core
    assert set(cli.list_commands(click.Context(cli))) == declared
    assert cli.commands == {}  # none added by decorator
