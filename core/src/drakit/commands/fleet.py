"""``drakit fleet``: run a simulated fleet of nodes against a cluster, for sizing (docs/fleet.md).

``drakit fleet run`` registers N fake Nodes and publishes each one's ResourceSlices through its own
:class:`~drakit.publish.publisher.ResourceSlicePublisher` (:mod:`drakit.node.fleet`), spread over
a few worker processes; it prints one JSON line per event (shapes discovered, nodes registered,
all published) and per ``--stats-interval`` (syncs, writes, errors, memory), until
``--duration`` ends or it is interrupted. ``drakit fleet delete`` removes a fleet's Nodes and
slices.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from drakit.errors import DrakitError
from drakit.node.fleet import (
    EXAMPLE_GPU,
    FLEET_LABEL,
    Fleet,
    Shape,
    assign_shapes,
    load_shape,
    rss_kib,
)

__all__ = ["fleet"]

_COUNTS = ("syncs", "creates", "updates", "deletes", "errors", "synced")


@dataclass(frozen=True)
class _WorkerSpec:
    index: int
    kubeconfig: str | None
    config: str | None
    nodes: tuple[tuple[str, str], ...]  # (node, shape name)
    fleet: str
    interval: float
    concurrency: int
    stats_interval: float


def _kube(kubeconfig: str | None, pool_size: int | None = None) -> Any:
    from drakit.kube import KubeClient  # noqa: PLC0415 - the client loads only where it is used

    return KubeClient.from_kubeconfig(Path(kubeconfig) if kubeconfig else None, pool_size=pool_size)


def _worker(
    spec: _WorkerSpec, out: Any, stop: Any, barrier: Any
) -> None:  # pragma: no cover - runs in a spawned process (tests/e2e/test_fleet.py runs it)
    """One worker process: its share of the nodes, start to stop, reporting to ``out``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the fleet
    parent = os.getppid()

    def send(event: str, **data: Any) -> None:
        out.put({"worker": spec.index, "event": event, "time": time.time(), **data})

    try:
        shapes: dict[str, Shape] = {}
        for _, name in spec.nodes:
            if name not in shapes:
                shapes[name] = load_shape(name, Path(spec.config) if spec.config else None)
        send(
            "shapes",
            shapes={
                s.name: {
                    "devices": s.devices,
                    "counter_sets": s.counter_sets,
                    "drivers": sorted(s.drivers),
                }
                for s in shapes.values()
            },
        )
        kube = _kube(spec.kubeconfig, pool_size=len(spec.nodes) + spec.concurrency + 4)
        rss_base = rss_kib()
        members = [(n, shapes[s]) for n, s in spec.nodes]
        fleet = Fleet(kube, members, spec.fleet, spec.interval, spec.concurrency)
        began = time.time()
        fleet.register()
        send("registered", nodes=len(members), seconds=time.time() - began)
        barrier.wait()
        began = time.time()
        fleet.start()
        send("published", began=began, ended=time.time(), **fleet.counts())
        while not stop.wait(spec.stats_interval):
            if os.getppid() != parent:  # the parent died: stop with it
                break
            send("stats", rss_kib=rss_kib(), rss_base_kib=rss_base, **fleet.counts())
        fleet.stop()
        send("stopped", rss_kib=rss_kib(), rss_base_kib=rss_base, **fleet.counts())
        kube.close()
    except threading.BrokenBarrierError:
        send("stopped", rss_kib=rss_kib(), rss_base_kib=0)  # another worker failed first
    except (DrakitError, ValueError, OSError) as e:
        send("error", error=str(e))
        barrier.abort()


class _Totals:
    """The latest counts of every worker, summed."""

    def __init__(self, workers: int) -> None:
        self.latest: dict[int, dict[str, Any]] = {}
        self.workers = workers

    def update(self, msg: dict[str, Any]) -> None:
        self.latest[int(msg["worker"])] = msg

    def summary(self, nodes: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: sum(int(m.get(k, 0)) for m in self.latest.values()) for k in _COUNTS
        }
        out["writes"] = out["creates"] + out["updates"] + out["deletes"]
        rss = [m["rss_kib"] for m in self.latest.values() if "rss_kib" in m]
        if len(rss) == self.workers and nodes:
            base = sum(m["rss_base_kib"] for m in self.latest.values())
            out["rss_mib"] = round(sum(rss) / 1024, 1)
            out["rss_kib_per_node"] = round((sum(rss) - base) / nodes, 1)
        return out


@click.group("fleet")
def fleet() -> None:
    """A simulated fleet: many fake nodes publishing through drakit's publisher (sizing)."""


def _emit(event: str, **data: Any) -> None:
    click.echo(json.dumps({"event": event, "time": round(time.time(), 3), **data}))
    sys.stdout.flush()


class _Supervisor:
    """The parent: starts the workers, merges their messages into the command's JSON lines."""

    def __init__(self, specs: list[_WorkerSpec], nodes: int, duration: float | None) -> None:
        ctx = mp.get_context("spawn")
        self.out: Any = ctx.Queue()
        self.stop = ctx.Event()
        # held here until the workers are done: the worker's copy is unpickled from the parent's
        # shared state, which goes when the parent's object is collected
        self.barrier = ctx.Barrier(len(specs))
        self.workers = [
            ctx.Process(target=_worker, args=(s, self.out, self.stop, self.barrier), daemon=True)
            for s in specs
        ]
        self.nodes = nodes
        self.duration = duration
        self.totals = _Totals(len(specs))
        self.phases: dict[str, list[dict[str, Any]]] = {}
        self.ends: float | None = None
        self.failed = False

    def run(self) -> None:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: self.stop.set())
        for w in self.workers:
            w.start()
        try:
            while True:
                try:
                    msg = self.out.get(timeout=0.5)
                except queue_mod.Empty:
                    self._tick()
                    if all(not w.is_alive() for w in self.workers):
                        break
                    continue
                except KeyboardInterrupt:
                    self.stop.set()
                    continue
                self._handle(msg)
        finally:
            self.stop.set()
            for w in self.workers:
                w.join(timeout=30)
                if w.is_alive():
                    w.kill()
            signal.signal(signal.SIGTERM, previous)

    def _tick(self) -> None:
        if self.ends is not None and time.time() >= self.ends:
            self.stop.set()

    def _handle(self, msg: dict[str, Any]) -> None:
        event = msg["event"]
        seen = self.phases.setdefault(event, [])
        seen.append(msg)
        every = len(seen) == len(self.workers)
        if event in ("stats", "stopped", "published"):
            self.totals.update(msg)
        if event == "error":
            self.failed = True
            _emit("error", worker=msg["worker"], error=msg["error"])
            self.stop.set()
        elif event == "shapes" and every:
            merged: dict[str, Any] = {}
            for m in seen:
                merged.update(m["shapes"])
            _emit("shapes", shapes=merged)
        elif event == "registered" and every:
            _emit("registered", nodes=self.nodes, seconds=round(max(m["seconds"] for m in seen), 3))
        elif event == "published" and every:
            seconds = max(m["ended"] for m in seen) - min(m["began"] for m in seen)
            _emit("published", seconds=round(seconds, 3), **self._summary())
            if self.duration is not None:
                self.ends = time.time() + self.duration
        elif event == "stats":
            self._tick()
            if msg["worker"] == len(self.workers) - 1:  # one line per round of the workers
                _emit("stats", **self._summary())
        elif event == "stopped" and every:
            _emit("stopped", **self._summary())

    def _summary(self) -> dict[str, Any]:
        return {"nodes": self.nodes, **self.totals.summary(self.nodes)}


@fleet.command("run")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--nodes", type=click.IntRange(1, 100_000), required=True, help="How many nodes.")
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    help=f"A simulated profile (`drakit sim list`) or `{EXAMPLE_GPU}` (upstream's example "
    "driver: 8 plain GPUs); repeat to mix, nodes take them in turn. Default: h200-8gpu-8ainic.",
)
@click.option("--config", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--prefix", default="fleet", show_default=True, help="Node names: PREFIX-<n>.")
@click.option("--processes", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option(
    "--interval",
    type=click.FloatRange(1, 86400),
    default=60.0,
    show_default=True,
    help="Seconds between each node's periodic resyncs (discovery.interval).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="Nodes per process starting at once (a rolling start).",
)
@click.option("--stats-interval", type=click.FloatRange(0.1, 3600), default=5.0, show_default=True)
@click.option(
    "--duration",
    type=click.FloatRange(0),
    default=None,
    help="Seconds to run after all nodes published (default: until interrupted).",
)
def run(
    kubeconfig: str | None,
    nodes: int,
    shapes: tuple[str, ...],
    config: str | None,
    prefix: str,
    processes: int,
    interval: float,
    concurrency: int,
    stats_interval: float,
    duration: float | None,
) -> None:
    """Register NODES fake Nodes and keep their slices published; one JSON line per event."""
    names = [f"{prefix}-{i}" for i in range(nodes)]
    assigned = assign_shapes(names, list(shapes) or ["h200-8gpu-8ainic"])
    processes = min(processes, nodes)
    specs = [
        _WorkerSpec(
            i,
            kubeconfig,
            config,
            tuple(assigned[i::processes]),
            prefix,
            interval,
            concurrency,
            stats_interval,
        )
        for i in range(processes)
    ]
    supervisor = _Supervisor(specs, nodes, duration)
    supervisor.run()
    if supervisor.failed:
        raise SystemExit(1)


@fleet.command("delete")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--prefix", default="fleet", show_default=True, help="The fleet's name.")
def delete(kubeconfig: str | None, prefix: str) -> None:
    """Delete a fleet's Nodes (labelled with its name) and their ResourceSlices."""
    kube = _kube(kubeconfig)
    try:
        listed = kube.request(
            "GET", "/api/v1/nodes", query={"labelSelector": f"{FLEET_LABEL}={prefix}"}
        )
        names = [str(n["metadata"]["name"]) for n in listed.get("items") or []]
        for name in names:
            kube.request(
                "DELETE",
                "/apis/resource.k8s.io/v1/resourceslices",
                query={"fieldSelector": f"spec.nodeName={name}"},
            )
            with contextlib.suppress(DrakitError):
                kube.request("DELETE", f"/api/v1/nodes/{name}")
    finally:
        kube.close()
    click.echo(json.dumps({"event": "deleted", "nodes": len(names)}))
