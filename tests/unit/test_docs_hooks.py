"""The hook docs stay in step with the hook specs and with the code they quote.

* every hook in :mod:`drakit.hookspecs` has a section in ``docs/hooks.md`` whose heading names
  it, and the page shows its exact signature ``name(arg1, arg2)`` (datasette's test);
* every hookspec has a docstring that states its call mode;
* each section's call mode agrees with the spec (``firstresult`` or collect);
* code quoted from a file (the line right before the block links to the file and ends with
  ``:``, as in "From [path](link):") still appears in that file, line for line, so examples
  cannot drift from tested code;
* free-standing Python examples compile, and relative links point at files that exist.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pluggy
import pytest

from drakit import hookspecs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HOOKS_MD = DOCS / "hooks.md"
PAGES = [HOOKS_MD]  # writing-plugins.md: tests/unit/test_docs_writing_plugins.py

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)]+)\)")


def _hook_specs() -> dict[str, pluggy.HookCaller]:
    pm = pluggy.PluginManager(hookspecs.PROJECT)  # noqa: TID251 - the bare specs, as docs see them
    pm.add_hookspecs(hookspecs)
    return {name: caller for name, caller in vars(pm.hook).items() if name.startswith("drakit_")}


HOOKS = _hook_specs()


def _signature(name: str) -> str:
    spec = HOOKS[name].spec
    assert spec is not None
    return f"{name}({', '.join(spec.argnames)})"


def _sections(text: str) -> dict[str, str]:
    """Heading line -> the text up to the next heading of the same or a higher level."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    heads = [
        (i, len(m.group(1))) for i, line in enumerate(lines) if (m := re.match(r"^(#+) ", line))
    ]
    for n, (i, level) in enumerate(heads):
        end = next((j for j, lv in heads[n + 1 :] if lv <= level), len(lines))
        out[lines[i]] = "\n".join(lines[i + 1 : end])
    return out


def _hook_section(name: str) -> tuple[str, str]:
    sections = _sections(HOOKS_MD.read_text(encoding="utf-8"))
    matches = [(h, body) for h, body in sections.items() if re.search(rf"\b{name}\b", h)]
    assert matches, f"docs/hooks.md has no heading for {name}; add a section"
    assert len(matches) == 1, f"docs/hooks.md has several headings for {name}"
    return matches[0]


def test_there_are_hooks() -> None:
    assert len(HOOKS) >= 10


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_is_documented_with_its_signature(name: str) -> None:
    heading, _ = _hook_section(name)
    text = HOOKS_MD.read_text(encoding="utf-8")
    assert _signature(name) in text, f"docs/hooks.md must show {_signature(name)}"
    assert _signature(name) in heading


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hookspec_docstring_states_its_call_mode(name: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, name))
    assert doc, f"hookspec {name} has no docstring"
    assert "Call mode" in doc, f"hookspec {name}'s docstring must say its call mode"


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_documented_call_mode_matches_the_spec(name: str) -> None:
    _, body = _hook_section(name)
    match = re.search(r"\*\*Call mode:\*\* ([^.]+)", body)
    assert match, f"the {name} section needs a '**Call mode:** ...' line"
    mode = match.group(1)
    spec = HOOKS[name].spec
    assert spec is not None
    if spec.opts.get("firstresult"):
        assert "firstresult" in mode, f"{name} is firstresult; the docs say {mode!r}"
    else:
        assert "collect" in mode, f"{name} collects results; the docs say {mode!r}"
    for part in ("**When:**", "**Parameters:**", "**Returns:**", "**Example:**"):
        assert part in body, f"the {name} section needs {part}"


def test_no_section_documents_a_hook_that_does_not_exist() -> None:
    for heading in _sections(HOOKS_MD.read_text(encoding="utf-8")):
        for name in re.findall(r"\bdrakit_\w+", heading):
            assert name in HOOKS, f"docs/hooks.md documents {name}, which drakit.hookspecs lacks"


def _quoted_blocks(page: Path) -> list[tuple[Path, str, str]]:
    """(quoted file, language, code) for blocks whose introducing line links a file."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].rstrip()
        links = [t.split("#", 1)[0] for t in LINK.findall(before) if "://" not in t]
        if before.endswith(":") and links:
            out.append(((page.parent / links[-1]).resolve(), m.group(1), m.group(2)))
    return out


QUOTED = [(page, *q) for page in PAGES for q in _quoted_blocks(page)]


def test_pages_quote_code() -> None:
    assert {page.name for page, *_ in QUOTED} == {"hooks.md"}


@pytest.mark.parametrize(
    ("page", "source", "lang", "code"),
    QUOTED,
    ids=[f"{p.name}:{s.relative_to(ROOT)}:{i}" for i, (p, s, _, _) in enumerate(QUOTED)],
)
def test_quoted_code_is_still_in_its_source(page: Path, source: Path, lang: str, code: str) -> None:
    assert source.is_file(), f"{page.name} quotes {source}, which does not exist"
    have = {line.strip() for line in source.read_text(encoding="utf-8").splitlines()}
    for line in code.splitlines():
        wanted = line.strip()
        if not wanted or wanted == "..." or wanted.startswith("#"):
            continue
        assert wanted in have, (
            f"{page.name} quotes {source.relative_to(ROOT)}, which no longer has the line "
            f"{wanted!r}; update the example"
        )


def _free_python(page: Path) -> list[str]:
    quoted = {code for _, _, code in _quoted_blocks(page)}
    text = page.read_text(encoding="utf-8")
    return [
        m.group(2)
        for m in FENCE.finditer(text)
        if m.group(1) == "python" and m.group(2) not in quoted
    ]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_free_standing_python_examples_compile(page: Path) -> None:
    blocks = _free_python(page)
    for i, code in enumerate(blocks):
        compile(code, f"{page.name}[python block {i}]", "exec")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        assert (page.parent / path).exists(), f"{page.name} links to missing {target}"
