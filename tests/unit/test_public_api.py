"""The public API is an allow-list: every core module is public or forbidden to backends.

docs/compatibility.md lists the public modules; the ``plugins-public-api`` contract in
``.importlinter`` forbids backends every other one. A new core module that is in neither fails
here, so adding one means deciding whether plugin authors may use it.
"""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest
from tests.public_api import COMPATIBILITY_MD, forbidden_modules, public_modules

import drakit
from drakit.hookspecs import API_VERSION

CORE_MODULES = sorted(f"drakit.{m.name}" for m in pkgutil.iter_modules(drakit.__path__))
PUBLIC = public_modules()
BEHIND_PUBLIC = {"drakit.simseam"}
"""Internal modules that a public one imports (``drakit.sim`` reads its entry points through
``drakit.simseam``), so a forbidden contract would flag every backend's sim package through the
public module; docs/compatibility.md names them as internal."""
FORBIDDEN = forbidden_modules()


def test_the_lists_are_read() -> None:
    assert "drakit.models" in PUBLIC
    assert "drakit.pluginhost" in FORBIDDEN
    assert len(CORE_MODULES) > len(PUBLIC)


@pytest.mark.parametrize("module", [m for m in CORE_MODULES if m not in BEHIND_PUBLIC])
def test_every_core_module_is_public_or_forbidden(module: str) -> None:
    assert module in PUBLIC or module in FORBIDDEN, (
        f"{module} is neither public (docs/compatibility.md, 'What is public') nor forbidden to "
        "backends (.importlinter, plugins-public-api): add it to one of them"
    )


def test_no_module_is_both_public_and_forbidden() -> None:
    assert set(PUBLIC) & set(FORBIDDEN) == set()


def test_every_listed_module_exists() -> None:
    listed = {*PUBLIC, *FORBIDDEN} - {"drakit"}
    assert listed <= set(CORE_MODULES), f"listed but not in core: {listed - set(CORE_MODULES)}"


def test_where_each_public_module_may_be_used_is_one_of_three() -> None:
    assert set(PUBLIC.values()) == {
        "anywhere",
        "tests only",
        "tests and simulated-profile modules only",
    }
    assert PUBLIC["drakit.testing"] == "tests only"


def test_the_package_docstring_names_the_same_public_modules() -> None:
    doc = drakit.__doc__ or ""
    named = {f"drakit.{m}" for m in re.findall(r":mod:`drakit\.(\w+)`", doc)}
    assert named == set(PUBLIC) - {"drakit"}


def test_api_version_is_documented() -> None:
    text = COMPATIBILITY_MD.read_text(encoding="utf-8")
    assert f"`{API_VERSION}` today" in text


def test_internal_modules_behind_a_public_one_are_documented_as_internal() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "compatibility.md").read_text()
    for module in BEHIND_PUBLIC:
        assert module in CORE_MODULES
        assert f"`{module}`" in doc
        assert "is internal" in doc
