"""The real kube-scheduler's throughput on drakit's slice shapes, against the example driver's.

Usage::

    uv run python benchmarks/scheduler.py --nodes 100 [--fill 0.5] [-o benchmarks/results/X.json]

One control plane (``benchmarks.cluster``). For each scenario, in turn, in one run:

1. ``--nodes`` fake Nodes publish one shape's slices through drakit's own publisher
   (:class:`drakit.node.fleet.Fleet`, one publish each, no loop): ``example-gpu`` (upstream's
   example driver: 8 plain GPUs per node) or ``h200-8gpu-8ainic`` under the default configuration
   (CPU devices, and the composite's GPUs, NICs and GPU-NIC pairs with shared counters);
2. one ResourceClaim per pod is created (its ``spec.devices`` as the scenario makes it: a plain
   ``exactly``, the webhook's pair template for ``numa-policy: preferred`` / ``required``
   (``drakit_composite.admission.plan_pod``), or ``drakit shape``'s ``packed`` / ``distributed``
   requests (``PluginHost.shape``)), enough pods to use ``--fill`` of the devices they ask for;
3. kube-scheduler is paused (SIGSTOP), every pod is created (one claim each, by name), the
   scheduler is resumed (SIGCONT) and timed until every pod is bound (the pods listed every
   0.2 s). Throughput = pods / that time: scheduling and the claim allocation writes, nothing
   of pod creation;
4. the pods, claims, Nodes and slices are deleted, and the next scenario starts when the
   namespace is gone and ``--settle`` seconds more have passed (the namespace controller's
   clean-up otherwise runs in the next scenario's timed window).

The ratio column divides by the example driver's scenario with the same device count per claim
(``example-1`` or ``example-2``). The machine's load is recorded per scenario.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib

from benchmarks.cluster import find_bin_dir
from benchmarks.common import emit
from tests.e2e.controlplane import ControlPlane

from drakit.errors import NotFoundError
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import load_settings
from drakit.kube import KubeClient
from drakit.models import CounterConsumption, CounterSet, DeviceAttribute, NodeInfo
from drakit.node.fleet import FLEET_LABEL, Fleet, Shape, example_gpu_shape, load_shape
from drakit.publish.render import PoolSpec
from drakit.strategy_models import SimpleRequest
from drakit_composite.admission import AdmissionSettings, plan_pod

__all__ = ["SCENARIOS", "main"]

RESOURCE = "/apis/resource.k8s.io/v1"
EXAMPLE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "example-gpu"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def exactly(device_class: str, count: int) -> dict[str, Any]:
    return {
        "requests": [
            {"name": "devices", "exactly": {"deviceClassName": device_class, "count": count}}
        ]
    }


def webhook_pairs(pairs: int, policy: str) -> dict[str, Any]:
    """``spec.devices`` of the template a pod asking for ``pairs`` gets (made from the pod)."""
    pod = {
        "metadata": {
            "name": "p",
            "annotations": {
                "composite.drakit.io/gpu-nic-pairs": str(pairs),
                "composite.drakit.io/numa-policy": policy,
            },
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    plan = plan_pod(_host(), AdmissionSettings(), pod)
    assert plan is not None
    devices: dict[str, Any] = plan.template["spec"]["spec"]["devices"]
    return devices


def example_ladder(count: int) -> dict[str, Any]:
    """The webhook's ``preferred`` ladder over the example's GPUs: one NUMA node, one socket,
    any (``firstAvailable``, ``matchAttribute`` on the first two), on the plainest devices."""
    tiers = ("aligned", "fallback-1", "any")
    return {
        "requests": [
            {
                "name": "gpus",
                "firstAvailable": [
                    {"name": t, "deviceClassName": "example-gpu", "count": count} for t in tiers
                ],
            }
        ],
        "constraints": [
            {"requests": ["gpus/aligned"], "matchAttribute": "resource.kubernetes.io/numaNode"},
            {"requests": ["gpus/fallback-1"], "matchAttribute": "gpu.example.com/socket"},
        ],
    }


def strategy(name: str, device_class: str, count: int) -> dict[str, Any]:
    """``spec.devices`` as ``drakit shape --strategy NAME --class CLASS --count N`` prints it."""
    request = SimpleRequest(name="devices", device_class=device_class, count=count)
    return _host().shape(name, request).to_api()


def _host() -> PluginHost:
    settings = load_settings(None).model_copy(update={"plugins": {}})
    return PluginHost(settings, NodeInfo(name="shape", sysfs_root="/"))


@dataclass(frozen=True)
class Scenario:
    name: str
    shape: str
    count: int  # devices per claim, for the fill and the baseline
    devices: Callable[[], dict[str, Any]]
    baseline: str
    config: str = ""  # a key of CONFIGS: the backends the shape is discovered with


CONFIGS: dict[str, dict[str, Any] | None] = {
    "": None,
    "gpu-only": {"plugins": {"nvidia_gpu": {}}},
    "members-first": None,
    "as-drakit": None,
    "pair-counters": None,
    "counters": None,
    "numa": None,
    "bare": None,
    "bare-cpu": None,
    "no-cpu": None,
}
"""Configurations other than the default one (CPU backend and the composite).

``members-first`` is the default configuration with each pool's devices in the order drakit
published them before composed devices came first: the members (GPUs, NICs), then the pairs.
``as-drakit`` is the example driver's shape grown to drakit's node (``h200-8gpu-8ainic``, the
default configuration): as many plain GPUs, one slice, each with as many attributes and
capacities as drakit's device in the same place (no counters): what the scheduler pays for the
size of what a node publishes, whatever its driver.
``pair-counters`` is the default configuration with the composite's counter sets merged per
pair: where a pair's GPU and NIC belong to that pair alone, one set holds both members'
counters (the GPU, the NIC and the pair all draw from it), 8 sets in 1 slice instead of 16 in
2. The same exclusivity (a GPU or a NIC taken alone still excludes its pair), fewer sets: what
that layout would buy, before building it.

The floor variants take drakit out and keep only what a guarantee needs, to tell what the
scheduler's algorithm charges for the guarantee from what drakit's shapes add to it:
``counters`` is the example's 8 GPUs, each drawing on a counter set of its own (8 sets in a
slice of their own, as partitionable devices publish them): what ``consumesCounters`` costs by
itself. ``numa`` is the example's 8 GPUs with a NUMA node (4 per node) and a socket attribute,
for the ``preferred`` ladder on the plainest devices. ``bare`` is the composite's pool with
nothing a pair's exclusivity does not need: the same 24 devices in the same order, counter sets
and slices, each device with only its ``type`` (the classes select on it) and, on pairs, the
NUMA node and socket (the ladder's constraints), no capacities, and no CPU driver.
``bare-cpu`` is ``bare`` with the CPU driver's pool beside it, as on drakit's node; ``no-cpu``
is drakit's node without it (the composite's pool as published).
"""


SCENARIOS = (
    Scenario("example-1", "example-gpu", 1, lambda: exactly("example-gpu", 1), "example-1"),
    Scenario(
        "example-1-as-drakit",
        "example-gpu",
        1,
        lambda: exactly("example-gpu", 1),
        "example-1",
        "as-drakit",
    ),
    Scenario("drakit-gpu-1", "h200-8gpu-8ainic", 1, lambda: exactly("nvidia-gpu", 1), "example-1"),
    Scenario(
        "drakit-gpu-1-gpu-only",
        "h200-8gpu-8ainic",
        1,
        lambda: exactly("nvidia-gpu-only", 1),
        "example-1",
        "gpu-only",
    ),
    Scenario(
        "drakit-gpu-1-merged",
        "h200-8gpu-8ainic",
        1,
        lambda: exactly("nvidia-gpu-merged", 1),
        "example-1",
    ),
    Scenario(
        "drakit-pair-1", "h200-8gpu-8ainic", 1, lambda: webhook_pairs(1, "preferred"), "example-1"
    ),
    Scenario(
        "drakit-gpu-1-members-first",
        "h200-8gpu-8ainic",
        1,
        lambda: exactly("nvidia-gpu", 1),
        "example-1",
        "members-first",
    ),
    Scenario(
        "drakit-pair-1-members-first",
        "h200-8gpu-8ainic",
        1,
        lambda: webhook_pairs(1, "preferred"),
        "example-1",
        "members-first",
    ),
    Scenario(
        "drakit-gpu-1-pair-counters",
        "h200-8gpu-8ainic",
        1,
        lambda: exactly("nvidia-gpu", 1),
        "example-1",
        "pair-counters",
    ),
    Scenario(
        "drakit-pair-1-pair-counters",
        "h200-8gpu-8ainic",
        1,
        lambda: webhook_pairs(1, "preferred"),
        "example-1",
        "pair-counters",
    ),
    Scenario(
        "example-1-counters",
        "example-gpu",
        1,
        lambda: exactly("example-gpu", 1),
        "example-1",
        "counters",
    ),
    Scenario(
        "bare-pair-1",
        "h200-8gpu-8ainic",
        1,
        lambda: webhook_pairs(1, "preferred"),
        "example-1",
        "bare",
    ),
    Scenario(
        "bare-pair-1-cpu",
        "h200-8gpu-8ainic",
        1,
        lambda: webhook_pairs(1, "preferred"),
        "example-1",
        "bare-cpu",
    ),
    Scenario(
        "drakit-pair-1-no-cpu",
        "h200-8gpu-8ainic",
        1,
        lambda: webhook_pairs(1, "preferred"),
        "example-1",
        "no-cpu",
    ),
    Scenario("example-2", "example-gpu", 2, lambda: exactly("example-gpu", 2), "example-2"),
    Scenario(
        "drakit-pair-2-preferred-no-cpu",
        "h200-8gpu-8ainic",
        2,
        lambda: webhook_pairs(2, "preferred"),
        "example-2",
        "no-cpu",
    ),
    Scenario(
        "example-2-preferred", "example-gpu", 2, lambda: example_ladder(2), "example-2", "numa"
    ),
    Scenario(
        "bare-pair-2-preferred",
        "h200-8gpu-8ainic",
        2,
        lambda: webhook_pairs(2, "preferred"),
        "example-2",
        "bare",
    ),
    Scenario(
        "drakit-pair-2-preferred-pair-counters",
        "h200-8gpu-8ainic",
        2,
        lambda: webhook_pairs(2, "preferred"),
        "example-2",
        "pair-counters",
    ),
    Scenario(
        "drakit-pair-2-none", "h200-8gpu-8ainic", 2, lambda: webhook_pairs(2, "none"), "example-2"
    ),
    Scenario(
        "drakit-pair-2-preferred",
        "h200-8gpu-8ainic",
        2,
        lambda: webhook_pairs(2, "preferred"),
        "example-2",
    ),
    Scenario(
        "drakit-pair-2-preferred-members-first",
        "h200-8gpu-8ainic",
        2,
        lambda: webhook_pairs(2, "preferred"),
        "example-2",
        "members-first",
    ),
    Scenario(
        "drakit-pair-2-required",
        "h200-8gpu-8ainic",
        2,
        lambda: webhook_pairs(2, "required"),
        "example-2",
    ),
    Scenario(
        "drakit-gpu-2-packed",
        "h200-8gpu-8ainic",
        2,
        lambda: strategy("packed", "nvidia-gpu", 2),
        "example-2",
    ),
    Scenario(
        "drakit-gpu-2-distributed",
        "h200-8gpu-8ainic",
        2,
        lambda: strategy("distributed", "nvidia-gpu", 2),
        "example-2",
    ),
)


def _as_drakit() -> Shape:
    drakit = [d for p in load_shape("h200-8gpu-8ainic").pools for d in p.devices]
    example = example_gpu_shape(len(drakit))
    [pool] = example.pools
    grown = []
    for plain, like in zip(pool.devices, drakit, strict=True):
        extra = len(like.attributes) + len(like.capacity) - len(plain.attributes)
        extra -= len(plain.capacity)
        attributes = dict(plain.attributes)
        attributes.update({f"extra{j}": DeviceAttribute(string=f"value-{j}") for j in range(extra)})
        grown.append(plain.model_copy(update={"attributes": attributes}))
    return dataclasses.replace(example, pools=(dataclasses.replace(pool, devices=tuple(grown)),))


def _pair_counters() -> Shape:
    shape = load_shape("h200-8gpu-8ainic")
    pools = []
    for pool in shape.pools:
        pairs = [d for d in pool.devices if len(d.consumes_counters) > 1]
        uses: dict[str, int] = {}
        for d in pairs:
            for c in d.consumes_counters:
                uses[c.counter_set] = uses.get(c.counter_set, 0) + 1
        merged: dict[str, str] = {}  # old set -> the pair's set
        for d in pairs:
            if all(uses[c.counter_set] == 1 for c in d.consumes_counters):
                merged.update({c.counter_set: f"{d.name}-counter-set" for c in d.consumes_counters})
        if not merged:
            pools.append(pool)
            continue
        sets: dict[str, dict[str, str]] = {}
        for cs in pool.counter_sets:
            sets.setdefault(merged.get(cs.name, cs.name), {}).update(cs.counters)
        devices = []
        for d in pool.devices:
            draws: dict[str, dict[str, str]] = {}
            for c in d.consumes_counters:
                draws.setdefault(merged.get(c.counter_set, c.counter_set), {}).update(c.counters)
            consumes = tuple(
                c.model_copy(update={"counter_set": name, "counters": counters})
                for c, (name, counters) in zip(d.consumes_counters, draws.items(), strict=False)
            )
            devices.append(d.model_copy(update={"consumes_counters": consumes}))
        counter_sets = tuple(
            pool.counter_sets[0].model_copy(update={"name": n, "counters": c})
            for n, c in sets.items()
        )
        pools.append(dataclasses.replace(pool, devices=tuple(devices), counter_sets=counter_sets))
    return dataclasses.replace(shape, pools=tuple(pools))


def _example_counters() -> Shape:
    shape = example_gpu_shape()
    [pool] = shape.pools
    sets = tuple(
        CounterSet(name=f"{d.name}-counters", counters={"memory": "80Gi"}) for d in pool.devices
    )
    devices = tuple(
        d.model_copy(
            update={
                "consumes_counters": (
                    CounterConsumption(counter_set=cs.name, counters=dict(cs.counters)),
                )
            }
        )
        for d, cs in zip(pool.devices, sets, strict=True)
    )
    return dataclasses.replace(
        shape, pools=(dataclasses.replace(pool, devices=devices, counter_sets=sets),)
    )


def _example_numa() -> Shape:
    shape = example_gpu_shape()
    [pool] = shape.pools
    devices = tuple(
        d.model_copy(
            update={
                "attributes": {
                    **d.attributes,
                    "resource.kubernetes.io/numaNode": DeviceAttribute(int=i // 4),
                    "socket": DeviceAttribute(int=i // 4),
                }
            }
        )
        for i, d in enumerate(pool.devices)
    )
    return dataclasses.replace(shape, pools=(dataclasses.replace(pool, devices=devices),))


def _bare(cpu: bool = False) -> Shape:
    shape = load_shape("h200-8gpu-8ainic")
    keep = {"type", "resource.kubernetes.io/numaNode", "socket"}
    pools = []
    for pool in shape.pools:
        if not _has_counters(pool):  # the CPU driver's pool
            if cpu:
                pools.append(pool)
            continue
        devices = tuple(
            d.model_copy(
                update={
                    "attributes": {
                        k: v
                        for k, v in d.attributes.items()
                        if k == "type" or (len(d.consumes_counters) > 1 and k in keep)
                    },
                    "capacity": {},
                }
            )
            for d in pool.devices
        )
        pools.append(dataclasses.replace(pool, devices=devices))
    return dataclasses.replace(shape, pools=tuple(pools))


def _no_cpu() -> Shape:
    shape = load_shape("h200-8gpu-8ainic")
    pools = tuple(p for p in shape.pools if _has_counters(p))
    return dataclasses.replace(shape, pools=pools)


def _has_counters(pool: PoolSpec) -> bool:
    """Whether ``pool`` is the composite's (counters), not the CPU driver's."""
    return any(d.consumes_counters for d in pool.devices)


def _shape(name: str, config: str) -> Shape:
    built = {
        "bare-cpu": lambda: _bare(cpu=True),
        "no-cpu": _no_cpu,
        "counters": _example_counters,
        "numa": _example_numa,
        "bare": _bare,
        "as-drakit": _as_drakit,
        "pair-counters": _pair_counters,
    }.get(config)
    if built is not None:
        return built()
    if config == "members-first":
        shape = load_shape(name)
        pools = tuple(
            dataclasses.replace(
                p,
                devices=tuple(
                    sorted(p.devices, key=lambda d: len(d.consumes_counters) > 1)  # pairs last
                ),
            )
            for p in shape.pools
        )
        return dataclasses.replace(shape, pools=pools)
    if not CONFIGS[config]:
        return load_shape(name)
    with tempfile.NamedTemporaryFile(
        "w", suffix=".yaml", dir="/dev/shm", prefix="drakit-bench-"
    ) as f:
        json.dump(CONFIGS[config], f)
        f.flush()
        return load_shape(name, Path(f.name))


def _extra_classes(kube: KubeClient) -> None:
    """``nvidia-gpu-only`` (the GPU backend alone) and ``nvidia-gpu-merged`` (the composite's
    ``nvidia-gpu`` with its selectors in one expression)."""
    drakit = str(Path(sys.executable).with_name("drakit"))
    with tempfile.NamedTemporaryFile(
        "w", suffix=".yaml", dir="/dev/shm", prefix="drakit-bench-"
    ) as f:
        json.dump(CONFIGS["gpu-only"], f)
        f.flush()
        listed = subprocess.run(
            [drakit, "deviceclasses", "--config", f.name, "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    only = next(c for c in json.loads(listed)["items"] if c["metadata"]["name"] == "nvidia-gpu")
    only["metadata"]["name"] = "nvidia-gpu-only"
    kube.request("POST", f"{RESOURCE}/deviceclasses", body=only)
    composite = kube.request("GET", f"{RESOURCE}/deviceclasses/nvidia-gpu")
    exprs = [x["cel"]["expression"] for x in composite["spec"]["selectors"]]
    merged = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "nvidia-gpu-merged"},
        "spec": {"selectors": [{"cel": {"expression": " && ".join(f"({e})" for e in exprs)}}]},
    }
    kube.request("POST", f"{RESOURCE}/deviceclasses", body=merged)


def _pprof(cp: ControlPlane, name: str, args: argparse.Namespace) -> None:
    """A CPU profile of kube-scheduler while it schedules; ``go tool pprof -top`` of it."""
    argv = [str(a) for a in cp._components[-1].process.args]  # type: ignore[union-attr]
    port = next(a.split("=", 1)[1] for a in argv if a.startswith("--secure-port="))
    url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={args.profile_seconds}"
    ctx = ssl._create_unverified_context()  # noqa: S323 - the scheduler's self-signed loopback cert
    with urllib.request.urlopen(url, context=ctx, timeout=args.profile_seconds + 30) as r:
        data = r.read()
    base = (args.output.parent if args.output else Path.cwd()) / f"scheduler-{name}.pprof"
    base.write_bytes(data)
    top = subprocess.run(
        ["go", "tool", "pprof", "-top", "-nodecount=40", str(base)],
        capture_output=True,
        text=True,
        check=False,
    )
    base.with_suffix(".top.txt").write_text(top.stdout + top.stderr)


def _each(fn: Callable[[int], object], n: int, threads: int = 16) -> None:
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in pool.map(fn, range(n)):
            pass


def _bound(kube: KubeClient, ns: str) -> int:
    pods = kube.request("GET", f"/api/v1/namespaces/{ns}/pods")
    return sum(1 for p in pods.get("items") or [] if (p.get("spec") or {}).get("nodeName"))


def _clean_up(
    cp: ControlPlane, kube: KubeClient, ns: str, prefix: str, args: argparse.Namespace
) -> None:
    # clean up: pods at once (no kubelet runs), claims, Nodes and their slices
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", query={"gracePeriodSeconds": 0})
    kube.request("DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaims")
    cp.delete_namespace(ns)

    def drop(i: int) -> None:
        name = f"{prefix}-{i}"
        kube.request(
            "DELETE", f"{RESOURCE}/resourceslices", query={"fieldSelector": f"spec.nodeName={name}"}
        )
        with contextlib.suppress(NotFoundError):
            kube.request("DELETE", f"/api/v1/nodes/{name}")

    _each(drop, args.nodes, 8)
    # The namespace controller deletes the claims in the background: wait for it, so that no
    # scenario's clean-up runs inside the next one's timed window.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            kube.request("GET", f"/api/v1/namespaces/{ns}")
        except NotFoundError:
            break
        time.sleep(0.5)
    time.sleep(args.settle)


def run_scenario(
    cp: ControlPlane,
    kube: KubeClient,
    sc: Scenario,
    shape: Shape,
    args: argparse.Namespace,
    profile: bool = False,
) -> dict[str, Any]:
    prefix = f"sched-{sc.name}"
    fleet = Fleet(
        kube, [(f"{prefix}-{i}", shape) for i in range(args.nodes)], prefix, concurrency=8
    )
    fleet.register()
    fleet.publish_once()
    per_node = 8  # GPUs (or pairs) per node in both shapes
    pods = int(args.nodes * per_node * args.fill) // sc.count
    ns = f"sched-{sc.name}-{uuid.uuid4().hex[:4]}"
    cp.create_namespace(ns)
    devices = sc.devices()

    def claim(i: int) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"c-{i}"},
            "spec": {"devices": devices},
        }
        kube.request("POST", f"{RESOURCE}/namespaces/{ns}/resourceclaims", body=body)

    def pod(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{i}"},
            "spec": {
                "nodeSelector": {FLEET_LABEL: prefix},
                "resourceClaims": [{"name": "devices", "resourceClaimName": f"c-{i}"}],
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": "devices"}]},
                    }
                ],
            },
        }
        kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=body)

    _each(claim, pods)
    sched = cp.pids()["kube-scheduler"]
    load_before = load()
    os.kill(sched, signal.SIGSTOP)
    try:
        _each(pod, pods)
    finally:
        os.kill(sched, signal.SIGCONT)
    t0 = time.monotonic()
    profiler = None
    if profile and sc.name in args.profile.split(","):
        profiler = threading.Thread(target=_pprof, args=(cp, sc.name, args), daemon=True)
        profiler.start()
    bound = 0
    while time.monotonic() - t0 < args.timeout:
        bound = _bound(kube, ns)
        if bound >= pods:
            break
        time.sleep(0.2)
    seconds = time.monotonic() - t0
    if profiler is not None:
        profiler.join()
    out = {
        "shape": sc.shape,
        "nodes": args.nodes,
        "pods": pods,
        "bound": bound,
        "seconds": round(seconds, 2),
        "pods_per_s": round(bound / seconds, 1),
        "devices": devices,
        "load_before": load_before,
        "load_after": load(),
    }
    _clean_up(cp, kube, ns, prefix, args)
    return out


def _summary(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per scenario: the first round's record, with ``pods_per_s`` and ``ratio`` the medians
    over the rounds (each round's ratio taken within the round, minutes apart at most), and
    every round's figures beside them."""
    out: dict[str, dict[str, Any]] = {}
    for name in rounds[0] if rounds else {}:
        done = [r[name] for r in rounds if name in r]
        baseline = next(s.baseline for s in SCENARIOS if s.name == name)
        ratios = [
            r[name]["pods_per_s"] / r[baseline]["pods_per_s"]
            for r in rounds
            if name in r and r.get(baseline, {}).get("pods_per_s")
        ]
        record = dict(done[0])
        record["pods_per_s"] = round(statistics.median(d["pods_per_s"] for d in done), 1)
        if ratios:
            record["ratio"] = round(statistics.median(ratios), 2)
            record["ratios"] = [round(x, 2) for x in ratios]
        if len(done) > 1:
            record["rounds"] = [
                {k: d[k] for k in ("pods_per_s", "seconds", "load_before", "load_after")}
                for d in done
            ]
        out[name] = record
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument(
        "--fill", type=float, default=0.5, help="share of the asked-for devices the pods use"
    )
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--bin-dir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the control plane's logs")
    ap.add_argument(
        "--profile",
        default="",
        help="comma-separated scenarios to take a CPU profile of kube-scheduler in (pprof)",
    )
    ap.add_argument("--profile-seconds", type=int, default=10)
    ap.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds to wait after a scenario's clean-up (its namespace gone) before the next",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every chosen scenario, interleaved; the medians are reported (a single "
        "scenario's run moves by 10-20 %% between runs on a 2-core machine); --profile "
        "profiles the last round only",
    )
    ap.add_argument(
        "--gates",
        choices=("release", "tests"),
        default="release",
        help="feature gates: the release's defaults (what a cluster runs), or the alpha DRA "
        "gates the test suite turns on (some cost the scheduler per node and pod: "
        "DRANodeAllocatableResources lists every slice for each node it filters)",
    )
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    started = datetime.now(UTC)
    run_dir = Path(tempfile.mkdtemp(prefix="drakit-bench-cp-", dir="/dev/shm"))
    # pprof without credentials (loopback only), for --profile
    allow = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/debug/pprof/*"
    cp = ControlPlane(
        find_bin_dir(args.bin_dir),
        run_dir,
        feature_gates={} if args.gates == "release" else None,
        extra_args={"kube-scheduler": [allow]},
    )
    cp.start()
    kube = KubeClient.from_kubeconfig(cp.kubeconfig, pool_size=32)
    report: dict[str, Any] = {
        "meta": {
            "date": started.isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
            ).stdout.strip(),
            "load_start": load(),
            "gates": args.gates,
        },
        "scenarios": {},
    }
    try:
        kube.request("POST", f"{RESOURCE}/deviceclasses", body=EXAMPLE_CLASS)
        classes = json.loads(
            subprocess.run(
                [str(Path(sys.executable).with_name("drakit")), "deviceclasses", "-o", "json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for obj in classes["items"]:
            kube.request("POST", f"{RESOURCE}/deviceclasses", body=obj)
        shapes = {key: _shape(*key) for key in {(s.shape, s.config) for s in chosen}}
        _extra_classes(kube)
        rounds: list[dict[str, dict[str, Any]]] = []
        for r in range(args.repeat):
            rounds.append({})
            for sc in chosen:
                shape = shapes[sc.shape, sc.config]
                result = run_scenario(cp, kube, sc, shape, args, profile=r == args.repeat - 1)
                rounds[-1][sc.name] = result
                shown = {k: v for k, v in result.items() if k != "devices"}
                print(json.dumps({sc.name: shown, "round": r + 1}), flush=True)
    finally:
        kube.close()
        cp.stop()
        if not args.keep:
            shutil.rmtree(cp.run_dir, ignore_errors=True)
    report["scenarios"] = _summary(rounds)
    report["meta"]["load_end"] = load()
    report["meta"]["seconds"] = round((datetime.now(UTC) - started).total_seconds())
    emit(report, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
