"""The examples of docs/testing.md's drakit.testing section run, as written, under pytest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

DOC = Path(__file__).parents[2] / "docs" / "testing.md"
SECTION = "## Testing your backend with drakit.testing"


def examples() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def test_the_section_has_examples() -> None:
    assert len(examples()) >= 2  # the contract and the prepare example


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_passes(pytester: pytest.Pytester, index: int) -> None:
    pytester.makepyfile(**{f"test_example_{index}": examples()[index]})
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 0, result.stdout.str()
    assert not {"failed", "errors", "error"} & set(outcomes), result.stdout.str()
