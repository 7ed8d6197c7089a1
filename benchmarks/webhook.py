"""Admission latency of ``drakit webhook`` at a fixed request rate, against an empty round trip.

Usage::

    uv run python benchmarks/webhook.py [--quick] [--rate 100] [-o benchmarks/results/<name>.json]

The real ``drakit webhook`` process (all four backends; certificate from a CA made here) is
driven over HTTPS with persistent, certificate-verifying connections, as the API server does.
Requests are sent open-loop on a fixed schedule (``--rate`` per second, 8 client threads), and
each latency is measured from the moment its request was due, so a server that falls behind
is charged for the queueing too. Three phases of the same length, in this order, repeated:

* ``empty``: an AdmissionReview of a pod without drakit's annotations (the engine answers
  "allowed" at once): the transport floor (TLS, HTTP, JSON) under the same load; the baseline;
* ``mutate``: a dry-run pod asking for 4 GPU-NIC pairs with ``numa-policy: preferred`` (plan,
  shaping through ``drakit_shape_request``, JSON patch; dry run, so no template is created and
  no API server is needed);
* ``validate``: a ResourceClaim with a CpuConfig, checked through ``drakit_parse_config``.

Each figure is p50 and p99 in ms, and the ratio of the p99 to the empty round trip's p99.
"""
# ruff: noqa: E402 - the repository root must be on sys.path before benchmarks.* is imported

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import Baseline, Report, loadavg, median, p99
from tests.e2e.webhookproc import Certificates, WebhookProcess, make_certificates

from drakit.host.startup import default_sections, fast_tmp
from drakit_composite.admission import PAIRS_ANNOTATION, POLICY_ANNOTATION

THREADS = 8


def _review(kind: str, group: str, obj: dict[str, Any], uid: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": group, "version": "v1", "kind": kind},
                "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
                "operation": "CREATE",
                "namespace": "bench",
                "dryRun": True,
                "object": obj,
            },
        }
    ).encode()


def _pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "train-", "namespace": "bench", "annotations": annotations},
        "spec": {"containers": [{"name": "train", "image": "registry.invalid/noop"}]},
    }


CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "cpus", "namespace": "bench"},
    "spec": {
        "devices": {
            "requests": [{"name": "cpus", "exactly": {"deviceClassName": "cpu"}}],
            "config": [
                {
                    "opaque": {
                        "driver": "cpu.drakit.io",
                        "parameters": {
                            "apiVersion": "cpu.drakit.io/v1alpha1",
                            "kind": "CpuConfig",
                            "policy": "distributed",
                        },
                    }
                }
            ],
        }
    },
}

PHASES: dict[str, tuple[str, bytes]] = {
    "empty": ("/mutate-pods", _review("Pod", "", _pod({}), "e")),
    "mutate": (
        "/mutate-pods",
        _review("Pod", "", _pod({PAIRS_ANNOTATION: "4", POLICY_ANNOTATION: "preferred"}), "m"),
    ),
    "validate": ("/validate-claims", _review("ResourceClaim", "resource.k8s.io", CLAIM, "v")),
}


def _check(path: str, body: bytes, certs: Certificates, port: int) -> None:
    """One request of the phase, answered as expected (so the numbers measure real work)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=certs.context(), timeout=10)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())["response"]
    conn.close()
    assert answer["allowed"] is True, answer
    if b"gpu-nic-pairs" in body:
        assert answer["patchType"] == "JSONPatch", answer


def run_phase(
    certs: Certificates, port: int, path: str, body: bytes, rate: float, seconds: float
) -> list[float]:
    """Latencies (s) of ``rate * seconds`` requests sent on schedule from 8 threads."""
    n = int(rate * seconds)
    start = time.perf_counter() + 0.2
    due = [start + i / rate for i in range(n)]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    next_index = [0]
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}

    def client() -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=certs.context(), timeout=10)
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= n:
                break
            delay = due[i] - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException) as e:
                ok = False
                conn.close()
                conn = http.client.HTTPSConnection(
                    "127.0.0.1", port, context=certs.context(), timeout=10
                )
                errors.append(repr(e))
            done = time.perf_counter()
            with lock:
                if ok:
                    latencies.append(done - due[i])
                else:
                    errors.append(f"request {i} failed")
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, e.g. {errors[0]}")
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 s per phase instead of 10 s")
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second")
    parser.add_argument("--rounds", type=int, default=2, help="repeats of the three phases")
    parser.add_argument("-o", "--output", type=Path, help="write the JSON report here")
    args = parser.parse_args()
    seconds = 3.0 if args.quick else 10.0
    report = Report(
        meta={
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
            ).stdout.strip(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "rate_per_s": args.rate,
            "seconds_per_phase": seconds,
            "rounds": args.rounds,
            "loadavg_start": loadavg(),
        }
    )
    samples: dict[str, list[float]] = {k: [] for k in PHASES}
    with tempfile.TemporaryDirectory(prefix="dk-bench-webhook-", dir=fast_tmp()) as tmp:
        root = Path(tmp)
        certs = make_certificates(root / "tls")
        # dry-run reviews make no API call; the client only needs a loadable kubeconfig
        kubeconfig = root / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                    "users": [{"name": "u", "user": {"token": "unused"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        # the GPU and NIC backends under the composite's driver (docs/composite.md)
        config = {"plugins": default_sections(["cpu", "nvidia_gpu", "amd_ainic", "composite"])}
        with WebhookProcess(certs, kubeconfig, root, config=config) as proc:
            for path, body in PHASES.values():
                _check(path, body, certs, proc.port)
                run_phase(certs, proc.port, path, body, args.rate, 1.0)  # warm up
            for _ in range(args.rounds):
                for name, (path, body) in PHASES.items():
                    samples[name] += run_phase(certs, proc.port, path, body, args.rate, seconds)
    ms = {k: [s * 1000 for s in v] for k, v in samples.items()}
    report.baseline(
        Baseline(
            "webhook_empty_p99",
            p99(ms["empty"]),
            "ms",
            f"p99 of an empty admission round trip (pod without annotations) at {args.rate:g}/s",
            len(ms["empty"]),
        )
    )
    for name in PHASES:
        values = ms[name]
        report.add(
            "webhook",
            f"{name} admission p99 at {args.rate:g}/s",
            p99(values),
            "ms",
            "webhook_empty_p99",
            p50=median(values),
            max=max(values),
            samples=len(values),
        )
    report.meta["loadavg_end"] = loadavg()
    print("| figure | unit | value | ratio to empty p99 | p50 | samples |")
    print("|---|---|---:|---:|---:|---:|")
    for f in report.figures:
        print(
            f"| {f.name} | {f.unit} | {f.value:.2f} | {f.ratio or 0:.2f} | "
            f"{f.detail['p50']:.2f} | {f.detail['samples']} |"
        )
    print(f"load average {report.meta['loadavg_start']} -> {report.meta['loadavg_end']}")
    if args.output:
        args.output.write_text(json.dumps(report.to_json(), indent=1) + "\n")


if __name__ == "__main__":
    main()
