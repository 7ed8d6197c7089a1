"""drakit benchmarks: speed and memory, each figure absolute and as a ratio to a same-run baseline.

Usage::

    uv run python benchmarks/run.py [--quick] [--cluster] [-o benchmarks/results/<name>.json]

Benchmarks (``benchmarks/README.md`` describes each one and its baseline):

1. ``prepare``: NodePrepareResources/NodeUnprepareResources latency p50/p99, 1 and 8 devices,
   over the real kubelet gRPC sockets, claims GET from memory (and, with ``--cluster``, from a
   real kube-apiserver);
2. ``throughput``: claims/s prepared+unprepared with 16 claims in flight;
3. ``publish`` (``--cluster`` only): time to publish 1,000 devices, writes/min at steady state;
4. ``rss``: VmRSS/VmHWM of a node process with all four backends (``drakit node`` against the
   control plane with ``--cluster``; an in-memory Node subprocess without);
5. ``cpu``: CPU allocation per policy and size on 2 x 192 CPUs, discovery of a 512-CPU node.

Speed is never asserted in tests; it is measured here and reported as ratios (project rule).
"""
# ruff: noqa: E402 - the repository root must be on sys.path before benchmarks.* is imported

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.claims import MemoryClaims
from benchmarks.common import Report, loadavg
from benchmarks.compare import fmt
from benchmarks.cpu import run_cpu
from benchmarks.prepare import run_claim_get, run_latency, run_throughput, running_node
from benchmarks.publish import run_publish
from benchmarks.rss import run_rss

if TYPE_CHECKING:
    from benchmarks.claims import ClaimStore

    from drakit.prepare.pipeline import ClaimSource

BENCHES = ("cpu", "prepare", "throughput", "publish", "rss")


@dataclass(frozen=True)
class Sizes:
    """How much each benchmark does; ``--quick`` shrinks everything."""

    latency_iterations: int
    latency_warmup: int
    throughput_seconds: float
    publish_rounds: int
    steady_seconds: float
    list_samples: int
    rss_settle: float
    cpu_repeats: int
    discovery_repeats: int


FULL = Sizes(500, 20, 10.0, 3, 60.0, 50, 10.0, 50, 7)
QUICK = Sizes(40, 5, 3.0, 1, 10.0, 20, 3.0, 20, 3)


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def _top_processes(n: int = 6) -> list[str]:
    """The processes with the most CPU (``ps`` pcpu: CPU time over lifetime), to document load."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pcpu,rss,comm", "--sort=-pcpu"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [" ".join(line.split()) for line in out.splitlines()[1 : n + 1]]


def _meta(args: argparse.Namespace, argv: list[str]) -> dict[str, object]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "uv run python benchmarks/run.py " + " ".join(argv),
        "mode": "quick" if args.quick else "full",
        "cluster": bool(args.cluster),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty_paths_outside_benchmarks": len(
            [
                line
                for line in _git("status", "--porcelain").splitlines()
                if "benchmarks/" not in line
            ]
        ),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": loadavg(),
        "busiest_processes_start": _top_processes(),
        "section_loadavg": {},
    }


def table(report: Report) -> str:
    """The figures and baselines as Markdown tables."""
    lines = [
        "| benchmark | figure | value | baseline | ratio |",
        "|---|---|---:|---|---:|",
    ]
    for f in report.figures:
        ratio = fmt(f.ratio) if f.ratio is not None else "-"
        lines.append(
            f"| {f.bench} | {f.name} | {fmt(f.value)} {f.unit} | {f.baseline or '-'} | {ratio} |"
        )
    lines += ["", "| baseline | value | what |", "|---|---:|---|"]
    for b in report.baselines.values():
        lines.append(f"| {b.key} | {fmt(b.value)} {b.unit} | {b.what} (n={b.samples}) |")
    if report.skipped:
        lines += ["", *[f"skipped: {s}" for s in report.skipped]]
    return "\n".join(lines)


def _section(report: Report, name: str) -> None:
    meta_load = report.meta.setdefault("section_loadavg", {})
    assert isinstance(meta_load, dict)
    meta_load[name] = loadavg()
    print(f"[{time.strftime('%H:%M:%S')}] {name} (load {loadavg()})", file=sys.stderr, flush=True)


def _prepare_benches(
    report: Report, store: ClaimStore, sizes: Sizes, only: set[str], claims: ClaimSource
) -> None:
    """Benchmarks 1 and 2 on one in-process node whose pipeline GETs claims from ``claims``."""
    with running_node(claims) as harness:
        if "prepare" in only:
            _section(report, f"prepare ({store.source})")
            run_latency(report, store, harness, sizes.latency_iterations, sizes.latency_warmup)
            if store.source != "memory":
                run_claim_get(report, store, claims, sizes.latency_iterations)
        if "throughput" in only:
            _section(report, f"throughput ({store.source})")
            run_throughput(report, store, harness, sizes.throughput_seconds)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; ``args.only`` becomes a set of benchmark names."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="fewer iterations (about 1-2 minutes)")
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="start a real control plane (etcd, kube-apiserver, scheduler, kcm) for claims, "
        "publishing and `drakit node`",
    )
    ap.add_argument("-o", "--output", type=Path, help="write the JSON report here")
    ap.add_argument(
        "--bin-dir",
        type=Path,
        help="control-plane binaries (default: $DRAKIT_K8S_BIN_DIR or the build cache)",
    )
    ap.add_argument(
        "--only",
        default=",".join(BENCHES),
        help=f"comma-separated subset of {','.join(BENCHES)} (default: all)",
    )
    args = ap.parse_args(argv)
    args.only = {b.strip() for b in args.only.split(",") if b.strip()}
    unknown = args.only - set(BENCHES)
    if unknown:
        ap.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {', '.join(BENCHES)}")
    return args


def run_cluster(report: Report, args: argparse.Namespace, sizes: Sizes) -> None:
    """Everything that needs the control plane; it is stopped (and its files removed) after."""
    from benchmarks.cluster import (  # noqa: PLC0415 - needs tests/e2e, only with --cluster
        ApiClaims,
        find_bin_dir,
        start_control_plane,
    )

    from drakit.kube import KubeClient  # noqa: PLC0415

    only: set[str] = args.only
    _section(report, "control plane start")
    cp = start_control_plane(find_bin_dir(args.bin_dir))
    report.meta["control_plane"] = {
        "bin_dir": str(cp.bin_dir),
        "startup_s": round(cp.report.total_seconds, 2),
        "feature_gates": cp.report.feature_gates,
    }
    try:
        if only & {"prepare", "throughput"}:
            kube = KubeClient.from_kubeconfig(cp.kubeconfig)
            try:
                _prepare_benches(report, ApiClaims(cp), sizes, only, kube)
            finally:
                kube.close()
        if "publish" in only:
            _section(report, "publish")
            run_publish(report, cp, sizes.publish_rounds, sizes.steady_seconds, sizes.list_samples)
        if "rss" in only:
            _section(report, "rss")
            run_rss(report, cp, sizes.rss_settle)
    finally:
        cp.stop()
        shutil.rmtree(cp.run_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks, print the table, write the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    only: set[str] = args.only
    sizes = QUICK if args.quick else FULL
    report = Report(meta=_meta(args, argv))
    report.meta["sizes"] = sizes.__dict__
    began = time.perf_counter()

    if "cpu" in only:
        _section(report, "cpu")
        run_cpu(report, sizes.cpu_repeats, sizes.discovery_repeats)
    if only & {"prepare", "throughput"}:
        mem = MemoryClaims()
        _prepare_benches(report, mem, sizes, only, mem.claims)
    if args.cluster:
        run_cluster(report, args, sizes)
    else:
        if "publish" in only:
            report.skipped.append("publish: needs --cluster (a real API server)")
        if "rss" in only:
            _section(report, "rss")
            run_rss(report, None, sizes.rss_settle)

    report.meta["loadavg_end"] = loadavg()
    report.meta["busiest_processes_end"] = _top_processes()
    report.meta["seconds"] = round(time.perf_counter() - began, 1)
    print(table(report))
    print(
        f"\n{report.meta['mode']} run, {report.meta['seconds']} s, load "
        f"{report.meta['loadavg_start']} -> {report.meta['loadavg_end']}"
    )
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
