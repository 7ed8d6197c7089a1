"""Run the ``drakit`` command line in-process, for the tests of its commands."""

from __future__ import annotations

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
