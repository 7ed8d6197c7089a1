"""Admin-facing fixes of the CLI: plain text in tables, and ``--sysfs-root`` given ``/sys``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.clirun import run_cli

pytestmark = pytest.mark.usefixtures("clean_drakit_env")


def test_table_cells_are_not_markup(capsys: pytest.CaptureFixture[str]) -> None:
    """``0000:cd:00.0`` holds ``:cd:``, rich's emoji code for an optical disc."""
    code, out, err = run_cli(["discover", "--profile", "mi300x-8gpu-8ainic"], capsys)
    assert (code, err) == (0, "")
    assert "0000:cd:00.0" in out
    assert "\U0001f4bf" not in out


def test_sysfs_root_accepts_the_sysfs_directory_itself(
    profile_root: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = profile_root("minimal-1s")
    by_root = run_cli(["slices", "--sysfs-root", str(root), "--node-name", "n1"], capsys)
    by_sys = run_cli(["slices", "--sysfs-root", str(root / "sys"), "--node-name", "n1"], capsys)
    assert by_root[0] == 0
    assert by_sys == by_root


def test_a_sysfs_tree_not_named_sys_is_a_clear_error(
    profile_root: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "mysysfs"
    (elsewhere / "devices" / "system").mkdir(parents=True)
    code, _, err = run_cli(["discover", "--sysfs-root", str(elsewhere)], capsys)
    assert code == 2
    assert err == (
        f"drakit: error: --sysfs-root {elsewhere}: this is a sysfs directory, but drakit reads"
        " <root>/sys and <root>/proc; pass the directory that holds it as sys/\n"
    )
    code, _, err = run_cli(
        ["discover", "--sysfs-root", str(tmp_path / "mysysfs" / "devices")], capsys
    )
    assert code == 2
    assert "no sys/ directory in it; pass the host root (/)" in err
