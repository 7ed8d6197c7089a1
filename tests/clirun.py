"""Run the ``drakit`` command line in-process or in a fresh process, for its commands' tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

import pytest

from drakit.commands.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``drakit ARGV``; return (exit code, stdout, stderr)."""
    code = 0
    try:
        main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def run_cli_process(argv: list[str], *, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``drakit ARGV`` in a fresh Python process with ``env``; stdout and stderr captured."""
    return subprocess.run(
        [sys.executable, "-c", "from drakit.commands.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=120,
        check=False,
    )
