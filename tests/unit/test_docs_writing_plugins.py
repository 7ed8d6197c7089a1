"""docs/writing-plugins.md runs: its quotes match a generated package, its examples execute.

* A block introduced by ``From `<path>`:`` quotes the package ``drakit plugin new acme_fpga``
  writes; every quoted line must be in that file of a freshly generated package.
* A block introduced by a link to a file of this repository quotes that file.
* Every other Python block is executed, and every block imports only public modules.
* The shell commands are run by ``tests/integration/test_scaffold.py`` against a generated
  package in a clean environment.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from tests.public_api import REPO_ROOT, drakit_imports, public_modules, top_level

from drakit.scaffold import new_plugin

PAGE = REPO_ROOT / "docs" / "writing-plugins.md"
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
GENERATED = re.compile(r"`([\w./-]+)`:$")
LINKED = re.compile(r"\]\(([^)]+)\):$")


def blocks() -> list[tuple[str, str, str]]:
    """``(introducing line, language, dedented code)`` of every fenced block, in order."""
    text = PAGE.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        out.append((before, m.group(2), textwrap.dedent(m.group(3))))
    return out


BLOCKS = blocks()
GENERATED_QUOTES = [
    (m.group(1), code) for intro, _, code in BLOCKS if (m := GENERATED.search(intro))
]
REPO_QUOTES = [
    (m.group(1), code)
    for intro, _, code in BLOCKS
    if (m := LINKED.search(intro)) and "://" not in m.group(1)
]
FREE_PYTHON = [
    code
    for intro, lang, code in BLOCKS
    if lang == "python" and not GENERATED.search(intro) and not LINKED.search(intro)
]


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return new_plugin("acme_fpga", tmp_path_factory.mktemp("scaffold") / "drakit-acme-fpga")


def _missing(code: str, source: str) -> list[str]:
    have = {line.strip() for line in source.splitlines()}
    return [
        line.strip()
        for line in code.splitlines()
        if line.strip() and line.strip() != "..." and line.strip() not in have
    ]


def test_the_page_quotes_the_generated_package() -> None:
    quoted = {path for path, _ in GENERATED_QUOTES}
    assert {"src/drakit_acme_fpga/plugin.py", "tests/test_contract.py", "pyproject.toml"} <= quoted


@pytest.mark.parametrize(
    ("path", "code"),
    GENERATED_QUOTES,
    ids=[f"{p}:{i}" for i, (p, _) in enumerate(GENERATED_QUOTES)],
)
def test_quotes_of_the_generated_package_match_it(package: Path, path: str, code: str) -> None:
    source = package / path
    assert source.is_file(), f"writing-plugins.md quotes {path}, which drakit plugin new lacks"
    missing = _missing(code, source.read_text(encoding="utf-8"))
    assert not missing, f"{path} no longer has {missing[0]!r}; update writing-plugins.md"


@pytest.mark.parametrize(
    ("path", "code"), REPO_QUOTES, ids=[f"{p}:{i}" for i, (p, _) in enumerate(REPO_QUOTES)]
)
def test_quotes_of_repository_files_match_them(path: str, code: str) -> None:
    source = (PAGE.parent / path.split("#", 1)[0]).resolve()
    assert source.is_file(), f"writing-plugins.md quotes {path}, which does not exist"
    missing = _missing(code, source.read_text(encoding="utf-8"))
    assert not missing, f"{path} no longer has {missing[0]!r}; update writing-plugins.md"


def test_there_are_runnable_examples() -> None:
    assert len(FREE_PYTHON) >= 3


@pytest.mark.parametrize("code", FREE_PYTHON, ids=[f"example-{i}" for i in range(len(FREE_PYTHON))])
def test_python_examples_run(code: str) -> None:
    exec(compile(code, str(PAGE), "exec"), {"__name__": "writing_plugins_example"})  # noqa: S102


def test_python_blocks_import_only_public_modules() -> None:
    public = public_modules()
    for _, lang, code in BLOCKS:
        if lang != "python":
            continue
        source = code if not code.startswith(" ") else textwrap.dedent(code)
        try:
            imported = drakit_imports(source)
        except SyntaxError:  # a quoted fragment of a method: it imports nothing
            continue
        for module in imported:
            assert top_level(module) in public, f"writing-plugins.md imports internal {module}"


def test_relative_links_resolve() -> None:
    for target in re.findall(r"\]\(([^)]+)\)", PAGE.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        assert (PAGE.parent / path).exists(), f"writing-plugins.md links to missing {target}"
