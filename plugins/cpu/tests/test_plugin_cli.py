"""``drakit cpu``, invoked through its click group (core adds it via the drakit.commands.cli
entry point).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from drakit.host.startup import fast_tmp
from drakit.testing import build_sim_node
from drakit_cpu.cli import cpu


@pytest.fixture(scope="module")
def genoa() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="drakit-cpu-cli-", dir=fast_tmp()) as tmp:
        yield build_sim_node("epyc-genoa-2s", Path(tmp)).root


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cpu, list(args))


def test_entry_point_offers_the_group() -> None:
    [ep] = metadata.entry_points(group="drakit.cli", name="cpu")
    assert ep.load() is cpu
    assert set(cpu.commands) == {"allocate", "topology"}


def test_allocate_packed_from_a_profile() -> None:
    res = run("allocate", "--profile", "minimal-1s", "--count", "4")
    assert res.exit_code == 0, res.output
    assert res.stdout == "0-1,4-5\n"  # two whole cores


def test_allocate_spread_takes_one_thread_per_core(genoa: Path) -> None:
    res = run("allocate", "--sysfs-root", str(genoa), "-n", "8", "--policy", "spread")
    assert res.stdout == "0-7\n"


def test_allocate_respects_available(genoa: Path) -> None:
    res = run("allocate", "--sysfs-root", str(genoa), "--available", "96-191,288-383", "-n", "4")
    assert res.exit_code == 0, res.output
    assert res.stdout == "96-97,288-289\n"


def test_allocate_distributed_json(genoa: Path) -> None:
    # 200 CPUs cannot fit one 192-CPU NUMA node: kubelet spreads them evenly over two
    res = run(
        "allocate",
        "--sysfs-root",
        str(genoa),
        "-n",
        "200",
        "--policy",
        "distributed",
        "--group-size",
        "2",
        "-o",
        "json",
    )
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["count"] == 200
    assert body["policy"] == "distributed"
    assert body["numaNodes"] == {"0": 100, "1": 100}


def test_allocate_prefer_uncore(genoa: Path) -> None:
    res = run(
        "allocate",
        "--sysfs-root",
        str(genoa),
        "--available",
        "1-383",
        "-n",
        "16",
        "--prefer-uncore",
    )
    assert res.exit_code == 0, res.output
    assert res.stdout == "8-15,200-207\n"  # one whole, untouched CCD


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ("-n", "3", "--full-pcpus-only"),
            "drakit: error: SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2",
        ),
        (
            ("-n", "8", "--full-pcpus-only", "--reserved", "0", "--available", "1-7"),
            "drakit: error: SMT Alignment Error: not enough free physical CPUs: available "
            "physical CPUs = 6, requested CPUs = 8, CPUs per core = 2",
        ),
        (
            ("-n", "9"),
            "drakit: error: not enough cpus available to satisfy request: requested=9, available=8",
        ),
        (
            ("-n", "2", "--policy", "spread", "--full-pcpus-only"),
            "drakit: error: --full-pcpus-only:",
        ),
        (("-n", "2", "--group-size", "2"), "drakit: error: --group-size: only applies to"),
        (("-n", "2", "--policy", "distributed", "--prefer-uncore"), "--prefer-uncore: only"),
        (("-n", "2", "--available", "0-99"), "drakit: error: --available: CPUs 8-99 are not"),
        (("-n", "2", "--available", "x"), "drakit: error: --available:"),
    ],
)
def test_allocate_errors_are_one_line_exit_2(args: tuple[str, ...], error: str) -> None:
    res = run("allocate", "--profile", "minimal-1s", *args)
    assert res.exit_code == 2
    assert res.stdout == ""
    assert len(res.stderr.splitlines()) == 1
    assert res.stderr.startswith(error) or error in res.stderr, res.stderr


def test_hardware_source_is_required_and_exclusive(genoa: Path) -> None:
    for args in ((), ("--profile", "minimal-1s", "--sysfs-root", str(genoa))):
        res = run("allocate", "-n", "1", *args)
        assert res.exit_code == 2
        assert res.stderr == "drakit: error: give exactly one of --profile and --sysfs-root\n"
    res = run("allocate", "-n", "1", "--profile", "no-such-machine")
    assert res.exit_code == 2
    assert "unknown simulated-hardware profile 'no-such-machine'" in res.stderr


def test_topology_shows_numa_distances() -> None:
    res = run("topology", "--profile", "epyc-genoa-2s-nps4", "-o", "json")
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["model"] == "AMD EPYC 9654 96-Core Processor"
    assert body["cpus"] == 384
    assert body["smt"] is True
    assert len(body["numaNodes"]) == 8
    assert body["numaNodes"]["0"]["distances"] == [10, 12, 12, 12, 32, 32, 32, 32]
    assert len(body["l3"]) == 24
