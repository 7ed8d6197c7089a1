"""The public API is an allow-list: every core module is public or forbidden to backends.

docs/compatibility.md lists the public modules; the ``plugins-public-api`` contract in
``.importlinter`` forbids backends every other one. A new core module that is in neither fails
here, so adding one means deciding whether plugin authors may use it.
"""

from __future__ import annotations

import pkgutil
import re

import pytest
from tests.public_api import COMPATIBILITY_MD, forbidden_modules, public_modules

import drakit
from drakit.hookspecs import API_VERSION

CORE_MODULES = sorted(f"drakit.{m.name}" for m in pkgutil.iter_modules(drakit.__path__))
CORE_PACKAGES = {f"drakit.{m.name}" for m in pkgutil.iter_modules(drakit.__path__) if m.ispkg}
PUBLIC = public_modules()
FORBIDDEN = forbidden_modules()


def test_the_lists_are_read() -> None:
    assert "drakit.models" in PUBLIC
    assert "drakit.host" in FORBIDDEN
    assert len(CORE_MODULES) > len(PUBLIC)


@pytest.mark.parametrize("module", CORE_MODULES)
def test_every_core_module_is_public_or_forbidden(module: str) -> None:
    assert module in PUBLIC or module in FORBIDDEN, (
        f"{module} is neither public (docs/compatibility.md, 'What is public') nor forbidden to "
        "backends (.importlinter, plugins-public-api): add it to one of them"
    )


@pytest.mark.parametrize("module", FORBIDDEN)
def test_internals_live_in_lifecycle_packages(module: str) -> None:
    """The top level of ``drakit`` is the public API: an internal module goes into a package."""
    assert module in CORE_PACKAGES, (
        f"{module} is internal but not a package: move it into the lifecycle package it serves "
        "(docs/architecture.md, 'Where each step lives')"
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
