"""docs/architecture.md's lifecycle table names packages and hooks that exist."""

from __future__ import annotations

import importlib.util
import pkgutil
import re
from pathlib import Path

import pytest
from tests.public_api import forbidden_modules

import drakit
from drakit import hookspecs

ARCHITECTURE_MD = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _table() -> list[tuple[str, str, list[str]]]:
    text = ARCHITECTURE_MD.read_text(encoding="utf-8")
    section = text.split("## Where each step lives", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`drakit"):
            continue
        step, package, hooks = cells
        rows.append((step, package.strip("`"), re.findall(r"`(drakit_\w+)`", hooks)))
    return rows


ROWS = _table()


def test_the_table_is_read() -> None:
    assert len(ROWS) >= 10
    assert ("prepare and unprepare claims", "drakit.prepare") in [(s, p) for s, p, _ in ROWS]


@pytest.mark.parametrize(("step", "package"), [(s, p) for s, p, _ in ROWS])
def test_every_package_in_the_table_exists(step: str, package: str) -> None:
    assert importlib.util.find_spec(package) is not None, f"{step!r}: no package {package}"


@pytest.mark.parametrize("hook", sorted({h for _, _, hooks in ROWS for h in hooks}))
def test_every_hook_in_the_table_is_declared(hook: str) -> None:
    assert callable(getattr(hookspecs, hook, None)), f"{hook} is not in drakit.hookspecs"


def test_every_internal_package_has_a_row() -> None:
    packages = {p for _, p, _ in ROWS}
    internal = {f"drakit.{m.name}" for m in pkgutil.iter_modules(drakit.__path__) if m.ispkg}
    internal &= set(forbidden_modules())
    assert internal - packages == set(), "add a row to docs/architecture.md for each"


def _modules_table() -> dict[str, list[str]]:
    text = ARCHITECTURE_MD.read_text(encoding="utf-8")
    section = text.split("Inside each package, one module per part:", 1)[1].split("\n\n`", 1)[0]
    out: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`drakit."):
            # a module is the first backquoted word of each comma-separated entry
            out[cells[0].strip("`")] = re.findall(r"(?:^|, )`(\w+)`", cells[1])
    return out


MODULES = _modules_table()


@pytest.mark.parametrize("package", sorted(MODULES))
def test_the_modules_of_each_package_are_the_ones_listed(package: str) -> None:
    spec = importlib.util.find_spec(package)
    assert spec is not None
    assert spec.submodule_search_locations is not None
    present = {m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)}
    assert set(MODULES[package]) == present - {"_proto"}
