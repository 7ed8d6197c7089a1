"""``drakit plugin new``: names, refusals and what it writes (fast checks, in-process).

``tests/integration/test_scaffold.py`` installs a generated package in a fresh environment and
runs its tests, mypy, ruff and ``drakit plugins``; this module checks the parts that need no
installation, for several names.
"""

from __future__ import annotations

import ast
import stat
import tomllib
from pathlib import Path

import pytest
from tests.clirun import run_cli

from drakit.hookspecs import API_VERSION
from drakit.scaffold import ScaffoldError, local_drakit, new_plugin, render, scaffold_for


def test_names_derive_from_the_plugin_name() -> None:
    names = scaffold_for("acme-fpga")
    assert (names.plugin, names.dns, names.dist, names.module, names.cls) == (
        "acme_fpga",
        "acme-fpga",
        "drakit-acme-fpga",
        "drakit_acme_fpga",
        "AcmeFpga",
    )
    assert (names.driver, names.profile) == ("acme-fpga.example.com", "acme-fpga-4card")
    assert scaffold_for("acme_fpga", "fpga.acme.io").driver == "fpga.acme.io"


@pytest.mark.parametrize(
    "bad",
    ["Acme_FPGA", "../../x", "1fpga", "acme fpga", "acme__fpga", "acme-", "class", "é", "a" * 21],
)
def test_bad_names_are_refused_with_the_rule(bad: str) -> None:
    with pytest.raises(ScaffoldError, match="must be a Python identifier and a DNS label"):
        scaffold_for(bad)


@pytest.mark.parametrize("bad", ["Acme.example.com", "acme_fpga.example.com", "-x.io", "a" * 64])
def test_bad_driver_names_are_refused(bad: str) -> None:
    with pytest.raises(ScaffoldError, match="is not a DRA driver name"):
        scaffold_for("acme", bad)


@pytest.mark.parametrize(
    "name", ["acme_fpga", "x1", "big-card-v2", "tpu", "a" * 20, "ab-" * 6 + "ab"]
)
def test_every_generated_file_is_valid_for_any_name(name: str) -> None:
    files = render(scaffold_for(name))
    names = scaffold_for(name)
    assert Path("pyproject.toml") in files
    assert Path(f"src/{names.module}/plugin.py") in files
    for path, text in files.items():
        assert "${" not in text, f"{path}: unreplaced placeholder"
        if path.suffix == ".py":
            ast.parse(text, str(path))
            assert all(len(line) <= 100 for line in text.splitlines()), f"{path}: long line"
    project = tomllib.loads(files[Path("pyproject.toml")])
    assert project["project"]["entry-points"]["drakit.plugins"] == {
        names.plugin: f"{names.module}.plugin:{names.cls}Plugin"
    }
    assert list(project["project"]["entry-points"]["drakit.profiles"]) == [names.profile]
    [dep] = project["project"]["dependencies"]
    assert dep.startswith("drakit>=")
    assert "sources" not in project.get("tool", {}).get("uv", {})
    assert project["tool"]["mypy"]["plugins"] == ["pydantic.mypy"]
    assert (
        f'hook_api: ClassVar[str] = ">={API_VERSION},<'
        in files[Path(f"src/{names.module}/plugin.py")]
    )


def test_new_writes_the_package_not_writable_by_others(tmp_path: Path) -> None:
    where = new_plugin("acme_fpga", tmp_path / "pkg")
    files = [p for p in where.rglob("*") if p.is_file()]
    assert {p.relative_to(where) for p in files} == set(render(scaffold_for("acme_fpga")))
    assert (where / ".gitignore").is_file()
    for path in files:
        assert not path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH), path


def test_an_empty_target_directory_is_used(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert (new_plugin("acme", tmp_path / "empty") / "pyproject.toml").is_file()


def test_cli_creates_the_package(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["plugin", "new", "acme_fpga", "--dir", str(tmp_path / "p")], capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"created {tmp_path / 'p'}")
    assert (tmp_path / "p" / "src" / "drakit_acme_fpga" / "plugin.py").is_file()


def test_cli_default_directory_is_named_after_the_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, _ = run_cli(["plugin", "new", "acme-fpga"], capsys)
    assert code == 0
    assert (tmp_path / "drakit-acme-fpga" / "pyproject.toml").is_file()


@pytest.mark.parametrize(
    ("argv", "fix"),
    [
        (["plugin", "new", "Acme_FPGA"], "e.g. acme_fpga"),
        (["plugin", "new", "../../x"], "e.g. acme_fpga"),
        (["plugin", "new", "acme", "--driver", "ACME"], "e.g. acme-fpga.example.com"),
    ],
)
def test_cli_refuses_bad_input_in_one_line(
    argv: list[str], fix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli([*argv, "--dir", str(tmp_path / "p")], capsys)
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith("drakit: error: ")
    assert fix in line
    assert not (tmp_path / "p").exists()


def test_cli_refuses_a_non_empty_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "mine.txt").write_text("keep me", encoding="utf-8")
    code, _, err = run_cli(["plugin", "new", "acme", "--dir", str(tmp_path / "p")], capsys)
    assert code == 2
    [line] = err.splitlines()
    assert "already exists and is not an empty directory" in line
    assert "pass --dir with a new directory" in line
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["mine.txt"]


def test_uv_finds_drakit_through_a_path_source(tmp_path: Path) -> None:
    """`uv run` in the package works without drakit on an index: a path source to a checkout."""
    core = Path(__file__).resolve().parents[2] / "core"
    assert local_drakit() == core  # this workspace installs drakit editable from core/
    where = new_plugin("acme_fpga", tmp_path / "pkg", drakit_source=core)
    doc = tomllib.loads((where / "pyproject.toml").read_text())
    source = doc["tool"]["uv"]["sources"]["drakit"]
    assert source["editable"] is True
    assert (where / source["path"]).resolve() == core  # relative to the package
    assert not Path(source["path"]).is_absolute()
    assert "types-PyYAML>=6" in doc["dependency-groups"]["dev"]

    plain = new_plugin("acme_fpga", tmp_path / "plain")
    text = (plain / "pyproject.toml").read_text()
    assert "uv" not in tomllib.loads(text).get("tool", {})
    assert '# drakit = { path = "../drakit/core", editable = true }' in text

    with pytest.raises(ScaffoldError, match=r"no pyproject\.toml there"):
        new_plugin("acme_fpga", tmp_path / "bad", drakit_source=tmp_path)
