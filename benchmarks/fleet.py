"""Publishing at fleet scale: N simulated nodes (``drakit fleet run``) against one API server.

Usage::

    uv run python benchmarks/fleet.py --nodes 1000 [--steady 60] [-o benchmarks/results/<name>.json]

One control plane (``benchmarks.cluster``: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, state in /dev/shm). Two fleets of the same size, one after the other, through the
same harness (``drakit fleet run``, each node its own ``ResourceSlicePublisher``, its own watch,
a 60 s resync interval):

* ``drakit``: mixed profiles under the default configuration (CPU backend, composite GPU-NIC
  pairs with shared counters): ``h200-8gpu-8ainic``, ``mi300x-8gpu-8ainic``, ``dgx-h100`` in turn;
* ``example``: upstream's example driver's slices (8 plain GPUs per node, ``example-gpu``).

For each fleet, phases, each with the API server's own counters read from its ``/metrics``
(``apiserver_request_total`` for ``resourceslices`` by verb, ``apiserver_watch_events_total``
for ``resourceslices``) and its CPU time and RSS from ``/proc``:

1. ``publish``: from the Nodes registered to every node's first slices published (a rolling start,
   ``--concurrency`` nodes per worker process at a time);
2. ``steady``: ``--steady`` seconds after that (one full resync round per node at the default
   interval): writes and watch events, per node and per minute (the goal is 0 writes);
3. ``resync``: kube-apiserver is restarted (same etcd); every node's watch breaks, reconnects, and
   its publisher resyncs: time from the new API server ready until every node has listed its
   slices again and re-established its watch, and the writes that caused (expected 0).

The fleet's own memory per simulated node is reported too. Ratios drakit / example are taken
within the run. The machine's load average is recorded next to every phase.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cluster import find_bin_dir, start_control_plane
from benchmarks.common import emit
from tests.e2e.controlplane import ControlPlane, ControlPlaneError

__all__ = ["ApiServerProbe", "FleetProcess", "main"]

DRAKIT_SHAPES = ("h200-8gpu-8ainic", "mi300x-8gpu-8ainic", "dgx-h100")
EXAMPLE_SHAPES = ("example-gpu",)
_METRIC = re.compile(r"^(\w+)\{([^}]*)\}\s+([0-9.eE+-]+)$")
_WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION")
_TICK = os.sysconf("SC_CLK_TCK")
DRAKIT = str(Path(sys.executable).with_name("drakit"))
"""The environment's ``drakit`` console script (what ``uv run drakit`` runs)."""


def load() -> str:
    """The load averages, for the record next to a figure."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class ApiServerProbe:
    """kube-apiserver's CPU time and memory from /proc, its ResourceSlice counters from /metrics."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp

    @property
    def pid(self) -> int:
        return self.cp.pids()["kube-apiserver"]

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime

    def memory_mib(self) -> dict[str, float]:
        out = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(line.split()[1]) / 1024, 1)
        return out

    def counters(self) -> dict[str, float]:
        """``LIST``, ``WATCH``, the write verbs, ``writes``, ``watch_events``, ``watches``."""
        out: dict[str, float] = {"writes": 0.0, "watch_events": 0.0, "watches": 0.0}
        for line in self.cp.get_text("/metrics").splitlines():
            m = _METRIC.match(line)
            if not m or 'resource="resourceslices"' not in m.group(2):
                continue
            name, labels, value = m.group(1), m.group(2), float(m.group(3))
            if name == "apiserver_request_total":
                verb = re.search(r'verb="(\w+)"', labels)
                if verb:
                    out[verb.group(1)] = out.get(verb.group(1), 0.0) + value
                    if verb.group(1) in _WRITE_VERBS:
                        out["writes"] += value
            elif name == "apiserver_watch_events_total":
                out["watch_events"] += value
            elif name == "apiserver_longrunning_requests" and 'verb="WATCH"' in labels:
                out["watches"] += value
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "t": time.monotonic(),
            "cpu_s": self.cpu_seconds(),
            "mem": self.memory_mib(),
            "counters": self.counters(),
            "load": load(),
        }


def delta(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    return float(b["counters"].get(key, 0.0) - a["counters"].get(key, 0.0))


class FleetProcess:
    """``drakit fleet run`` as a child process; its JSON lines arrive on :attr:`events`."""

    def __init__(
        self, cp: ControlPlane, args: argparse.Namespace, prefix: str, shapes: tuple[str, ...]
    ) -> None:
        kubeconfig = cp.kubeconfig
        argv = [
            DRAKIT,
            "fleet",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--nodes",
            str(args.nodes),
            "--prefix",
            prefix,
            "--processes",
            str(args.processes),
            "--concurrency",
            str(args.concurrency),
            "--stats-interval",
            "1",
        ]
        for s in shapes:
            argv += ["--shape", s]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=(cp.logs_dir / f"{prefix}.log").open("ab"),
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.latest: dict[str, Any] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("event") in ("stats", "published", "stopped"):
                self.latest = msg
            self.events.put(msg)

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {event!r} from drakit fleet within {timeout:.0f}s")
            try:
                msg = self.events.get(timeout=min(left, 1.0))
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"drakit fleet exited with {self.proc.returncode}") from None
                continue
            if msg.get("event") == "error":
                raise RuntimeError(f"drakit fleet: {msg}")
            if msg.get("event") == event:
                return msg

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.wait_for("stopped", 120)
        finally:
            self.proc.wait(timeout=60)


def resync(
    cp: ControlPlane, probe: ApiServerProbe, fleet: FleetProcess, n: int, timeout: float
) -> dict[str, Any]:
    """Restart kube-apiserver under the running fleet; measure until every node relisted."""
    incomplete: dict[str, float] | None = None
    writes_before = dict(fleet.latest).get("writes", 0)
    stopping = time.monotonic()
    try:
        spawned = cp.restart_apiserver()
    except ControlPlaneError as e:  # it did not come back under the fleet's reconnects
        fleet.proc.kill()
        fleet.proc.wait(timeout=60)
        cp.restart_apiserver()
        return {"failed": str(e)[:300], "load": load()}
    r0 = probe.snapshot()  # a new process: its counters start at 0, its CPU time too
    while True:
        r1 = probe.snapshot()
        c = r1["counters"]
        if c.get("LIST", 0) >= n and c.get("watches", 0) >= n:
            break
        if r1["t"] - r0["t"] > timeout:
            incomplete = c
            break
        time.sleep(1.0)
    time.sleep(1.5)
    fl = dict(fleet.latest)
    return {
        "incomplete": incomplete,
        "apiserver_stop_s": round(spawned - stopping, 2),
        "apiserver_ready_s": round(r0["t"] - spawned, 2),
        "seconds_to_all_relisted": round(r1["t"] - spawned, 2),
        "lists": r1["counters"].get("LIST", 0),
        "watches": r1["counters"].get("watches", 0),
        "apiserver_writes": r1["counters"].get("writes", 0),
        "fleet_writes": fl.get("writes", 0) - writes_before,
        "apiserver_cpu_s_since_start": round(r1["cpu_s"], 2),
        "apiserver_mem_mib": r1["mem"],
        "load_after": r1["load"],
    }


def run_fleet(
    cp: ControlPlane, args: argparse.Namespace, name: str, shapes: tuple[str, ...]
) -> dict[str, Any]:
    probe = ApiServerProbe(cp)
    n = args.nodes
    out: dict[str, Any] = {"shapes": list(shapes), "nodes": n}
    fleet = FleetProcess(cp, args, f"bench-{name}", shapes)
    try:
        out["shape_sizes"] = fleet.wait_for("shapes", 300)["shapes"]
        fleet.wait_for("registered", 600)
        s0 = probe.snapshot()
        published = fleet.wait_for("published", 1200)
        s1 = probe.snapshot()
        secs = s1["t"] - s0["t"]
        out["publish"] = {
            "seconds_to_all_published": published["seconds"],
            "slices_created": published["creates"],
            "apiserver_writes": delta(s0, s1, "writes"),
            "writes_per_node": delta(s0, s1, "writes") / n,
            "watch_events_per_node": delta(s0, s1, "watch_events") / n,
            "lists_per_node": delta(s0, s1, "LIST") / n,
            "apiserver_cpu_s": round(s1["cpu_s"] - s0["cpu_s"], 2),
            "apiserver_cores": round((s1["cpu_s"] - s0["cpu_s"]) / secs, 2),
            "apiserver_mem_mib": s1["mem"],
            "load_before": s0["load"],
            "load_after": s1["load"],
        }
        time.sleep(2.0)  # the last nodes' watches settle
        s2 = probe.snapshot()
        f2 = dict(fleet.latest)
        time.sleep(args.steady)
        s3 = probe.snapshot()
        f3 = dict(fleet.latest)
        minutes = (s3["t"] - s2["t"]) / 60.0
        out["steady"] = {
            "seconds": round(s3["t"] - s2["t"], 1),
            "apiserver_writes": delta(s2, s3, "writes"),
            "fleet_writes": f3.get("writes", 0) - f2.get("writes", 0),
            "writes_per_node_per_min": delta(s2, s3, "writes") / n / minutes,
            "watch_events_per_node_per_min": delta(s2, s3, "watch_events") / n / minutes,
            "lists_per_node_per_min": delta(s2, s3, "LIST") / n / minutes,
            "syncs": f3.get("syncs", 0) - f2.get("syncs", 0),
            "apiserver_cores": round((s3["cpu_s"] - s2["cpu_s"]) / (s3["t"] - s2["t"]), 3),
            "apiserver_mem_mib": s3["mem"],
            "watches": s3["counters"].get("watches"),
            "fleet_rss_kib_per_node": f3.get("rss_kib_per_node"),
            "fleet_rss_mib": f3.get("rss_mib"),
            "load_before": s2["load"],
            "load_after": s3["load"],
        }
        print(json.dumps({name: {k: out[k] for k in ("publish", "steady")}}), flush=True)
        out["resync"] = resync(cp, probe, fleet, n, args.resync_timeout)
    finally:
        stopped = fleet.stop() if fleet.proc.poll() is None else {}
    out["stopped"] = stopped
    subprocess.run(
        [
            DRAKIT,
            "fleet",
            "delete",
            "--kubeconfig",
            str(cp.kubeconfig),
            "--prefix",
            f"bench-{name}",
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--steady", type=float, default=60.0, help="seconds of steady state")
    ap.add_argument("--resync-timeout", type=float, default=300.0)
    ap.add_argument("--only", default="drakit,example")
    ap.add_argument("--bin-dir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the control plane's logs")
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args(argv)
    started = datetime.now(UTC)
    cp = start_control_plane(find_bin_dir(args.bin_dir))
    report: dict[str, Any] = {
        "meta": {
            "date": started.isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
            ).stdout.strip(),
            "load_start": load(),
        }
    }
    try:
        for name in args.only.split(","):
            shapes = DRAKIT_SHAPES if name == "drakit" else EXAMPLE_SHAPES
            report[name] = run_fleet(cp, args, name, shapes)
            print(json.dumps({name: report[name]}, indent=1), flush=True)
    finally:
        cp.stop()
        if not args.keep:
            shutil.rmtree(cp.run_dir, ignore_errors=True)
    report["meta"]["load_end"] = load()
    report["meta"]["seconds"] = round((datetime.now(UTC) - started).total_seconds())
    if "drakit" in report and "example" in report:
        d, e = report["drakit"], report["example"]
        report["ratios"] = {
            f"{phase}.{k}": round(d[phase][k] / e[phase][k], 2)
            for phase in ("publish", "steady", "resync")
            for k in d.get(phase, {})
            if isinstance(d[phase][k], int | float)
            and isinstance(e.get(phase, {}).get(k), int | float)
            and e[phase][k]
        }
    emit(report, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
