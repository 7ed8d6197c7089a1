"""Shared pieces of the benchmarks: figures, baselines, statistics, the calibration workload.

Every figure is reported twice: in absolute units, and as a ratio to a *baseline* measured in
the same run on the same machine. Absolute numbers move with machine load; the ratios move much
less, so they are what a change is judged by (see ``benchmarks/README.md``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Baseline",
    "Figure",
    "Report",
    "calibration_workload",
    "free_port",
    "interleaved",
    "loadavg",
    "median",
    "p99",
    "repeat_timed",
    "timed",
]


@dataclass
class Baseline:
    """A reference figure measured in the same run (the denominator of the ratios).

    Attributes:
        key: short identifier, referred to by :attr:`Figure.baseline`.
        value: the measured value.
        unit: its unit (``ms``, ``claims/s``, ``MiB``).
        what: what was measured, for the table and the JSON.
        samples: how many samples the value summarises.
    """

    key: str
    value: float
    unit: str
    what: str
    samples: int = 0


@dataclass
class Figure:
    """One reported figure.

    Attributes:
        bench: the benchmark it belongs to (``prepare``, ``throughput``, ``publish``...).
        name: what it is (``p50 prepare, 1 device, claims in memory``).
        value: the absolute value.
        unit: its unit.
        baseline: key of the :class:`Baseline` it is divided by (``None``: no ratio).
        ratio: ``value / baseline`` (``None`` without a baseline).
        detail: further numbers (sample counts, p99 of the baseline, counts...).
    """

    bench: str
    name: str
    value: float
    unit: str
    baseline: str | None = None
    ratio: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """Everything one run measured."""

    meta: dict[str, Any] = field(default_factory=dict)
    baselines: dict[str, Baseline] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def baseline(self, b: Baseline) -> Baseline:
        """Record a baseline (replacing one with the same key) and return it."""
        self.baselines[b.key] = b
        return b

    def add(
        self,
        bench: str,
        name: str,
        value: float,
        unit: str,
        baseline: str | None = None,
        **detail: Any,
    ) -> Figure:
        """Record a figure; its ratio is computed against ``baseline`` when given.

        Args:
            bench: benchmark name.
            name: figure name.
            value: absolute value.
            unit: its unit.
            baseline: key of an already recorded baseline.
            **detail: extra numbers kept in the JSON.
        """
        ratio: float | None = None
        if baseline is not None:
            base = self.baselines[baseline].value
            ratio = value / base if base else None
        fig = Figure(bench, name, value, unit, baseline, ratio, dict(detail))
        self.figures.append(fig)
        return fig

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data."""
        return {
            "meta": self.meta,
            "baselines": {k: asdict(v) for k, v in self.baselines.items()},
            "figures": [asdict(f) for f in self.figures],
            "skipped": self.skipped,
        }


def median(values: Sequence[float]) -> float:
    """The median (0.0 for no values)."""
    return statistics.median(values) if values else 0.0


def p99(values: Sequence[float]) -> float:
    """The 99th percentile (inclusive method; the maximum for fewer than 100 samples)."""
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[98]


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    """Measure a block: ``with timed() as t: ...``; then ``t[0]`` is the seconds it took."""
    out: list[float] = []
    start = time.perf_counter()
    try:
        yield out
    finally:
        out.append(time.perf_counter() - start)


def repeat_timed(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times; return the seconds of each."""
    for _ in range(warmup):
        fn()
    out: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def calibration_workload() -> int:
    """A fixed pure-Python workload: the unit in which CPU-bound figures are expressed.

    It does the kind of work the CPU allocator and discovery do (small-int dict and set
    operations, sorting, string formatting and parsing), always the same amount, with no I/O.
    It is short (about a millisecond on an idle core) so that, like the operations it is compared
    with, a run is rarely preempted; :func:`interleaved` times it next to each measured call.

    Returns:
        A checksum (so the work cannot be optimised away).
    """
    groups: dict[int, set[int]] = {}
    for i in range(1_500):
        groups.setdefault(i % 31, set()).add(i)
    total = 0
    frozen = [frozenset(v) for v in groups.values()]
    for a in frozen[:10]:
        for b in frozen[10:20]:
            total += len(a | b) - len(a & b)
    order = sorted(range(1_500), key=lambda x: (x * 7919) % 1_511)
    text = ",".join(str(x) for x in order[:500])
    total += sum(int(x) for x in text.split(","))
    return total


def interleaved(
    fn: Callable[[], object], repeats: int, calibration: list[float], warmup: int = 1
) -> list[float]:
    """Like :func:`repeat_timed`, but time :func:`calibration_workload` before each call.

    The calibration samples are appended to ``calibration``, so the baseline is measured under
    the same load, at the same moments, as the figure it divides.
    """
    for _ in range(warmup):
        fn()
        calibration_workload()
    out: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        calibration_workload()
        mid = time.perf_counter()
        fn()
        out.append(time.perf_counter() - mid)
        calibration.append(mid - start)
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def loadavg() -> list[float]:
    """The 1/5/15-minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def emit(report: dict[str, Any], output: Path | None) -> None:
    """Print ``report`` as indented JSON, and write it to ``output`` when one is given."""
    text = json.dumps(report, indent=2)
    if output:
        output.write_text(text + "\n")
    print(text)
