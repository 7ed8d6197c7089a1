"""The API reference (``docs/api/``, ``mkdocs.yml``) builds, strictly, and covers the public API.

Every module ``docs/compatibility.md`` lists as public has a page that renders it with
mkdocstrings, and every name in its ``__all__`` has an entry (an anchor ``<module>.<name>``) in
the built site. The build is strict: a broken cross-reference or a warning fails it (checked on
a page with a reference to nothing).
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.public_api import REPO_ROOT, public_modules

MKDOCS_YML = REPO_ROOT / "mkdocs.yml"
API_DIR = REPO_ROOT / "docs" / "api"
MKDOCS = str(Path(sys.executable).parent / "mkdocs")


def _config() -> dict[str, object]:
    text = MKDOCS_YML.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MKDOCS, "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_every_public_module_has_a_page_in_the_nav() -> None:
    pages = set(_nav_pages(_config()["nav"]))
    for module in public_modules():
        page = f"{module}.md"
        assert page in pages, f"{page} is not in mkdocs.yml's nav"
        text = (API_DIR / page).read_text(encoding="utf-8")
        assert re.search(rf"^::: {re.escape(module)}$", text, re.MULTILINE), page
    extra = {p for p in pages if p != "index.md"} - {f"{m}.md" for m in public_modules()}
    assert not extra, f"pages for modules that are not public: {sorted(extra)}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("api-site")
    result = _build(MKDOCS_YML, out)
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def test_every_exported_name_has_a_reference_entry(site: Path) -> None:
    missing = []
    for module in public_modules():
        ids = set(re.findall(r'id="([^"]+)"', (site / module / "index.html").read_text()))
        exported = getattr(importlib.import_module(module), "__all__", ())
        missing += [f"{module}.{name}" for name in exported if f"{module}.{name}" not in ids]
    assert not missing, f"public names without an entry in the API reference: {missing}"


def test_a_broken_reference_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(API_DIR / "drakit.errors.md", docs / "drakit.errors.md")
    (docs / "index.md").write_text("See [the error][drakit.errors.NoSuchError].\n")
    config = _config()
    config.update(docs_dir=str(docs), nav=["index.md", "drakit.errors.md"])
    plugins = config["plugins"]
    assert isinstance(plugins, list)
    python = plugins[0]["mkdocstrings"]["handlers"]["python"]
    python["paths"] = [str(REPO_ROOT / "core" / "src")]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    result = _build(path, tmp_path / "site")
    assert result.returncode != 0
    assert "drakit.errors.NoSuchError" in result.stderr
