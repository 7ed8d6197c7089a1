"""Pod start-up on a real node: drakit against the Go reference driver, interleaved in one run.

Usage::

    uv run python benchmarks/pods.py [--pods 20] [-o benchmarks/results/<name>.json]

One control plane, one real node (``tests/e2e/realnode.py``: the real kubelet, containerd with
CDI, runc, CNI), and two DRA drivers on it at the same time:

* ``drakit node`` (``--sysfs-root`` of the ``h200-8gpu-8ainic`` profile, NVIDIA GPU backend only,
  driver ``gpu.nvidia.drakit.io``);
* ``dra-example-kubeletplugin`` (``../shared/peer``: upstream's reference built on the Go helper,
  ``--device-profile gpu``, 8 devices, driver ``gpu.example.com``), built by the peer's
  ``build.sh`` into ``~/.cache/drakit-peer/bin`` (``--peer-bin`` or ``DRAKIT_PEER_BIN_DIR``).

For each driver in turn (drakit, Go, drakit, ...) a pod with one claim for one GPU (from a
ResourceClaimTemplate) is created and timed until it is Running (polled every 20 ms), then
deleted and waited for until its claim is gone and, unless ``--churn``, until the kubelet has
unprepared that claim (no CDI spec names it), so that the next pod finds its GPU free.
Reported per driver: pod creation to Running p50/p90/max, and the kubelet's own
``NodePrepareResources`` latency per driver from its
``/metrics`` (``dra_grpc_operations_duration_seconds``: mean of the run). The machine's load
average is recorded with the figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cluster import find_bin_dir
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, free_port, wait_for
from tests.e2e.nodeproc import RESOURCE, NodeDirs, NodeProcess, create_device_class
from tests.e2e.realnode import RealNode, build_images, pod, resolve_node_bin_dir

from drakit.sim import build_profile

PROFILE = "h200-8gpu-8ainic"
DRAKIT_DRIVER = "gpu.nvidia.drakit.io"
GO_DRIVER = "gpu.example.com"
NAMESPACE = "bench-pods"


def _peer_bin(given: str | None) -> Path:
    path = Path(
        given
        or os.environ.get("DRAKIT_PEER_BIN_DIR")
        or Path.home() / ".cache" / "drakit-peer" / "bin"
    )
    if not (path / "dra-example-kubeletplugin").exists():
        raise SystemExit(
            f"{path}/dra-example-kubeletplugin missing: run ../shared/peer/build.sh "
            "(or give --peer-bin)"
        )
    return path


def _template(cp: ControlPlane, name: str, device_class: str) -> None:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    cp.api(
        "POST",
        f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        },
    )


def _time_pod(cp: ControlPlane, node: RealNode, name: str, template: str, *, settle: bool) -> float:
    """Seconds from the pod's creation to phase Running; the pod is deleted afterwards, and
    with ``settle`` its claim waited for until unprepared."""
    body = pod(
        name,
        node.name,
        ["sleep", "3600"],
        claims={"gpu": {"resourceClaimTemplateName": template}},
        grace=0,
    )
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    began = time.monotonic()
    cp.api("POST", path, body)
    wait_for(
        lambda: cp.api("GET", f"{path}/{name}")["status"].get("phase") == "Running",
        timeout=120,
        interval=0.02,
        what=f"pod {name} Running",
    )
    elapsed = time.monotonic() - began
    uid = cp.api("GET", f"{path}/{name}")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    uid = cp.api("GET", f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims/{uid}")["metadata"][
        "uid"
    ]
    cp.api(
        "DELETE",
        f"{path}/{name}",
        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
    )

    def gone() -> bool:
        try:
            cp.api("GET", f"{path}/{name}")
        except ControlPlaneError:
            claims = cp.api("GET", f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims")["items"]
            return not claims
        return False

    wait_for(gone, timeout=120, interval=0.05, what=f"pod {name} and its claim gone")
    if settle:
        # The kubelet unprepares the claim only after the pod's containers stopped; until then
        # drakit refuses the device to the next claim (the Go example driver hands it out), and
        # the kubelet retries that pod with back-off: wait, so each pod starts on a free device.
        wait_for(
            lambda: not any(uid in p.read_text() for p in node.cdi_dir.iterdir()),
            timeout=120,
            interval=0.05,
            what=f"the claim of {name} unprepared",
        )
    return elapsed


_GRPC = re.compile(
    r"^dra_grpc_operations_duration_seconds_(sum|count)\{(?P<labels>[^}]*)\} (?P<value>\S+)$"
)


def _kubelet_prepare(metrics: str) -> dict[str, dict[str, float]]:
    """driver -> {"sum", "count"} of the kubelet's NodePrepareResources gRPC durations."""
    out: dict[str, dict[str, float]] = {}
    for line in metrics.splitlines():
        m = _GRPC.match(line)
        if not m or "NodePrepareResources" not in m["labels"]:
            continue
        driver = re.search(r'driver_name="([^"]+)"', m["labels"])
        if driver:
            slot = out.setdefault(driver[1], {"sum": 0.0, "count": 0.0})
            slot[m[1]] += float(m["value"])
    return out


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p90": ordered[max(0, round(0.9 * len(ordered)) - 1)],
        "max": ordered[-1],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=20, help="pods per driver (default 20)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed pods per driver first")
    ap.add_argument("--peer-bin", help="directory with dra-example-kubeletplugin")
    ap.add_argument(
        "--churn",
        action="store_true",
        help="start the next pod as soon as the previous one and its claim are deleted, without "
        "waiting for the kubelet to unprepare that claim (the device may still be held)",
    )
    ap.add_argument("-o", "--output", type=Path, help="write the JSON report here (and .md)")
    args = ap.parse_args(argv)
    times, metrics, load = measure(
        args.pods, args.warmup, _peer_bin(args.peer_bin), settle=not args.churn
    )
    report(args, times, metrics, load)
    return 0


def measure(
    pods: int, warmup: int, peer: Path, *, settle: bool
) -> tuple[dict[str, list[float]], dict[str, dict[str, float]], tuple[float, float, float]]:
    """Start everything, time the pods; return the times, the kubelet's figures, the load."""
    cp = ControlPlane(find_bin_dir(None))
    cp.start()
    node = RealNode(cp, resolve_node_bin_dir(build=True), [build_images() / "test.tar"])
    go_proc: subprocess.Popen[bytes] | None = None
    drakit: NodeProcess | None = None
    try:
        node.start()
        dirs = NodeDirs(node.root)
        drakit = NodeProcess(
            kubeconfig=cp.kubeconfig,
            node_name=node.name,
            dirs=dirs,
            plugins={"nvidia_gpu": {}},
            sysfs_root=build_profile(PROFILE, node.root / "sim"),
            instance_id="bench",
            settings={"log_level": "INFO"},
        )
        drakit.start()
        drakit.wait_ready(timeout=90)
        go_log = (node.logs_dir / "go-driver.log").open("wb")
        go_proc = subprocess.Popen(
            [
                str(peer / "dra-example-kubeletplugin"),
                f"--kubeconfig={cp.kubeconfig}",
                f"--node-name={node.name}",
                f"--driver-name={GO_DRIVER}",
                "--device-profile=gpu",
                f"--cdi-root={node.cdi_dir}",
                f"--kubelet-plugins-directory-path={node.kubelet_dir / 'plugins'}",
                f"--kubelet-registrar-directory-path={node.kubelet_dir / 'plugins_registry'}",
                f"--pod-uid={uuid.uuid4()}",
                f"--healthcheck-port={free_port()}",
            ],
            stdout=go_log,
            stderr=subprocess.STDOUT,
        )
        cp.create_namespace(NAMESPACE)
        suffix = uuid.uuid4().hex[:6]
        classes = {"drakit": f"bench-drakit-{suffix}", "go": f"bench-go-{suffix}"}
        create_device_class(cp, classes["drakit"], DRAKIT_DRIVER)
        create_device_class(cp, classes["go"], GO_DRIVER)
        for key, cls in classes.items():
            _template(cp, key, cls)

        def published(driver: str) -> bool:
            slices = cp.api("GET", f"{RESOURCE}/resourceslices")["items"]
            return any(s["spec"]["driver"] == driver and s["spec"].get("devices") for s in slices)

        wait_for(
            lambda: published(DRAKIT_DRIVER) and published(GO_DRIVER), timeout=120, what="slices"
        )
        times: dict[str, list[float]] = {"drakit": [], "go": []}
        for i in range(warmup + pods):
            for key in ("drakit", "go"):
                elapsed = _time_pod(cp, node, f"{key}-{i}", key, settle=settle)
                if i >= warmup:
                    times[key].append(elapsed)
        metrics = _kubelet_prepare(node.kubelet_metrics())
        load = os.getloadavg()
    finally:
        if go_proc is not None:
            go_proc.terminate()
            go_proc.wait(timeout=30)
        if drakit is not None:
            drakit.close()
        node.stop()
        cp.stop()
    return times, metrics, load


def report(
    args: argparse.Namespace,
    times: dict[str, list[float]],
    metrics: dict[str, dict[str, float]],
    load: tuple[float, float, float],
) -> None:
    """Print the table; write the JSON and Markdown reports with ``--output``."""
    rows = {key: _summary(values) for key, values in times.items()}
    kubelet = {
        key: (
            metrics.get(drv, {}).get("sum", 0.0) / max(metrics.get(drv, {}).get("count", 0.0), 1.0)
        )
        for key, drv in (("drakit", DRAKIT_DRIVER), ("go", GO_DRIVER))
    }
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "pods_per_driver": args.pods,
        "churn": args.churn,
        "loadavg": load,
        "pod_to_running_s": rows,
        "kubelet_node_prepare_mean_s": kubelet,
        "kubelet_node_prepare_raw": metrics,
    }
    table = [
        "| driver | pods | pod to Running p50 | p90 | max | kubelet NodePrepareResources mean |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key in ("drakit", "go"):
        r = rows[key]
        table.append(
            f"| {key} | {r['n']} | {r['p50'] * 1000:.0f} ms | {r['p90'] * 1000:.0f} ms | "
            f"{r['max'] * 1000:.0f} ms | {kubelet[key] * 1000:.1f} ms |"
        )
    ratio = rows["drakit"]["p50"] / rows["go"]["p50"]
    table.append("")
    table.append(
        f"drakit/Go pod-to-Running p50: {ratio:.2f}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    text = "\n".join(table)
    print(text)
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        args.output.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
