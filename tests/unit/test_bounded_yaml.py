"""YAML alias bombs are refused before they expand (issue 30, class 6).

A few hundred bytes of nested aliases expand to billions of values; ``drakit config validate``,
``drakit claim validate`` and ``drakit explain``'s file sources must answer at once, in one line
naming the line, without echoing expanded values. Real CLI, real files.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.clirun import run_cli

from drakit.errors import ConfigInvalid
from drakit.explain.sources import read_objects
from drakit.host import settings
from drakit.host.settings import yaml_shape_problem


def bomb(levels: int = 9) -> str:
    """The classic "billion laughs": each level names the one before ten times."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


def test_the_bomb_is_small() -> None:
    assert len(bomb()) < 1000


@pytest.mark.parametrize("command", [["config", "validate"], ["claim", "validate"]])
def test_validate_refuses_an_alias_bomb_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(), encoding="utf-8")
    start = time.monotonic()
    code, out, err = run_cli([*command, str(path)], capsys)
    assert time.monotonic() - start < 5
    assert code != 0
    text = out + err
    assert "aliases (*name) expand to more than 1000000 values at line" in text
    assert "lol" not in text


def test_explain_sources_refuse_an_alias_bomb(tmp_path: Path) -> None:
    path = tmp_path / "slices.yaml"
    path.write_text(bomb(), encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(ConfigInvalid) as exc:
        read_objects([path])
    assert time.monotonic() - start < 5
    assert "expand to more than" in str(exc.value)


def test_ordinary_aliases_are_fine() -> None:
    text = "a: &a {x: 1, y: [1, 2, 3]}\nb: *a\nc: [*a, *a, *a]\n"
    assert yaml_shape_problem(text) is None
    assert yaml_shape_problem(bomb(5)) is None  # 100 000 values: large, but bounded


def test_a_large_file_without_aliases_is_not_blamed_on_aliases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cluster's objects written as YAML pass the value bound without any alias: the message
    says so and points at JSON, which is read without it (the bound lowered to keep it quick)."""
    monkeypatch.setattr(settings, "MAX_YAML_NODES", 1000)
    plain = "items:\n" + "".join(f"- {{name: d{i}, value: {i}}}\n" for i in range(600))
    problem = yaml_shape_problem(plain, max_bytes=1 << 20)
    assert problem is not None
    assert "holds more than 1000 values" in problem
    assert "aliases" not in problem
    assert "-o json" in problem
    bomb_text = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: [" + ", ".join(["*a"] * 200) + "]\n"
    assert "aliases (*name) expand" in str(yaml_shape_problem(bomb_text))
