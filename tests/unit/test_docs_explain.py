"""Every ``$ drakit explain ...`` example in docs/explain.md prints what the page shows."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from drakit.commands.cli import cli

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "explain.md"
BLOCK = re.compile(r"```console\n\$ (drakit [^\n]+)\n(.*?)```", re.S)
EXAMPLES = BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_the_page_has_the_examples_the_issue_asks_for() -> None:
    text = "\n".join(out for _, out in EXAMPLES)
    assert len(EXAMPLES) >= 5
    assert "cannot be met on this node" in text
    assert "numaNode 0 has 2, numaNode 1 has 2" in text
    assert "the preferred policy would fit" in text
    assert "taint gpu.drakit.io/unhealthy=xid-79:NoSchedule is not tolerated" in text
    assert "capacity bandwidth: needs 200G, 100G left of 400G" in text


@pytest.mark.parametrize(
    ("command", "expected"), EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))]
)
def test_example_output_matches(
    command: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, shlex.split(command)[1:], catch_exceptions=False)
    # exit 1 when the claim fits on no node (docs/explain.md says so)
    fits = (
        re.search(r"^node \S+: fits", expected, re.M)
        or '"fits": true' in expected
        or ": holds the job" in expected  # drakit explain job
    )
    assert result.exit_code == (0 if fits else 1), result.output
    assert result.output == expected
