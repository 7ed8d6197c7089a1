"""Container creation on a real node with drakit's NRI plugin against without it, in one run.

Usage::

    uv run python benchmarks/nri.py [--rounds 3] [--pods 4] [-o benchmarks/results/<name>.json]

One control plane and one real node (``tests/e2e/realnode.py``: the real kubelet, containerd
2.4.2 with NRI, runc, CNI). In each round, ``drakit node`` (the CPU backend on this machine's
CPUs, ``nri.enabled``, ``fail_closed`` off) is started and waited for until its NRI plugin is
connected (``/readyz``, then the log's "synchronized"), ``--pods`` pods are timed, drakit is
stopped, and as many pods are timed without it; odd rounds time the side without drakit first,
and each side waits 3 s after drakit started or stopped, so that neither side always follows
a start-up or a shutdown. Each pod (one container, no claim: the NRI
plugin still answers its CreateContainer with the shared pool) is timed from its creation to
phase Running (polled every 20 ms), then deleted with grace 0 and waited for. Reported: pod
creation to Running p50/p90/max with and without the plugin and the ratio of the p50s, with
the machine's load average. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cluster import find_bin_dir
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, wait_for
from tests.e2e.nodeproc import NodeDirs, NodeProcess
from tests.e2e.realnode import RealNode, build_images, pod, resolve_node_bin_dir

NAMESPACE = "bench-nri"


def _time_pod(cp: ControlPlane, node: RealNode, name: str) -> float:
    """Seconds from the pod's creation to phase Running; the pod is deleted afterwards."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    began = time.monotonic()
    cp.api("POST", path, pod(name, node.name, ["sleep", "3600"], grace=0))
    wait_for(
        lambda: cp.api("GET", f"{path}/{name}")["status"].get("phase") == "Running",
        timeout=120,
        interval=0.02,
        what=f"pod {name} Running",
    )
    elapsed = time.monotonic() - began
    cp.api(
        "DELETE",
        f"{path}/{name}",
        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
    )

    def gone() -> bool:
        try:
            cp.api("GET", f"{path}/{name}")
        except ControlPlaneError:
            return True
        return False

    wait_for(gone, timeout=120, interval=0.05, what=f"pod {name} gone")
    return elapsed


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p90": ordered[max(0, round(0.9 * len(ordered)) - 1)],
        "max": ordered[-1],
    }


SETTLE = 3.0
"""Seconds to wait after drakit started or stopped before pods are timed."""


def _drakit(cp: ControlPlane, node: RealNode, dirs: NodeDirs, r: int) -> NodeProcess:
    """``drakit node`` with NRI on, started and waited for until its NRI plugin synchronized."""
    drakit = NodeProcess(
        kubeconfig=cp.kubeconfig,
        node_name=node.name,
        dirs=dirs,
        plugins={"cpu": {"driver": "cpu-bench.drakit.io", "mode": "individual"}},
        sysfs_root=Path("/"),
        instance_id=f"bench{r}",
        settings={
            "log_level": "INFO",
            "nri": {"enabled": True, "socket": str(node.nri_socket), "fail_closed": False},
        },
    )
    try:
        drakit.start()
        drakit.wait_ready(timeout=90)
        wait_for(
            lambda: "NRI: synchronized" in drakit.log(),
            timeout=60,
            what="drakit's NRI plugin connected",
        )
    except BaseException:
        drakit.close()
        raise
    return drakit


def measure(rounds: int, pods: int) -> tuple[dict[str, list[float]], tuple[float, float, float]]:
    """Start everything, time the pods with and without drakit's NRI plugin."""
    cp = ControlPlane(find_bin_dir(None))
    cp.start()
    node = RealNode(cp, resolve_node_bin_dir(build=True), [build_images() / "test.tar"])
    times: dict[str, list[float]] = {"with": [], "without": []}
    try:
        node.start()
        cp.create_namespace(NAMESPACE)
        dirs = NodeDirs(node.root)
        dirs.state_dir.mkdir(exist_ok=True)
        _time_pod(cp, node, "warmup")  # the first pod pays for the image's first use
        for r in range(rounds):
            # alternate which side goes first, and let the node settle after drakit starts or
            # stops, so neither side always follows a drakit start-up or shutdown
            order = ("with", "without") if r % 2 == 0 else ("without", "with")
            for side in order:
                if side == "without":
                    time.sleep(SETTLE)
                    for i in range(pods):
                        times["without"].append(_time_pod(cp, node, f"without-{r}-{i}"))
                    continue
                drakit = _drakit(cp, node, dirs, r)
                try:
                    time.sleep(SETTLE)
                    for i in range(pods):
                        times["with"].append(_time_pod(cp, node, f"with-{r}-{i}"))
                finally:
                    drakit.close()
        load = os.getloadavg()
    finally:
        node.stop()
        cp.stop()
    return times, load


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="drakit starts (default 3)")
    ap.add_argument("--pods", type=int, default=4, help="pods per round and side (default 4)")
    ap.add_argument("-o", "--output", type=Path, help="write the JSON report here (and .md)")
    args = ap.parse_args(argv)
    times, load = measure(args.rounds, args.pods)
    rows = {key: _summary(values) for key, values in times.items()}
    ratio = rows["with"]["p50"] / rows["without"]["p50"]
    table = [
        "| drakit's NRI plugin | pods | pod to Running p50 | p90 | max |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in ("with", "without"):
        r = rows[key]
        table.append(
            f"| {key} | {r['n']} | {r['p50'] * 1000:.0f} ms | {r['p90'] * 1000:.0f} ms | "
            f"{r['max'] * 1000:.0f} ms |"
        )
    table += [
        "",
        f"with/without pod-to-Running p50: {ratio:.2f}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
    ]
    text = "\n".join(table)
    print(text)
    if args.output:
        report = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
            ).stdout.strip(),
            "rounds": args.rounds,
            "pods_per_round": args.pods,
            "loadavg": load,
            "pod_to_running_s": rows,
            "ratio_p50": ratio,
            "raw_s": times,
        }
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        args.output.with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
