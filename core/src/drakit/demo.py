"""``drakit demo``: drakit end to end on simulated hardware, with no cluster.

Steps: build a simulated node, discover, render ResourceSlices, serve the kubelet sockets in a
temporary directory, shape and allocate an example claim, prepare it over the real gRPC wire
protocol, show the CDI spec, unprepare it. Allocation uses a small first-fit allocator that
honours ``matchAttribute``/``distinctAttribute`` and ``firstAvailable`` (the demo's stand-in
for kube-scheduler; the end-to-end tests use the real scheduler).
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from drakit.config import DrakitSettings
from drakit.errors import PermanentError
from drakit.kubelet.client import KubeletClient
from drakit.models import ClaimRef, Device
from drakit.node import Node
from drakit.runtime import fast_tmp
from drakit.strategy_models import SimpleRequest

__all__ = ["DEFAULT_DEMO_PROFILE", "InMemoryClaims", "first_fit", "run_demo"]

DEFAULT_DEMO_PROFILE = "h200-8gpu-8ainic"


class InMemoryClaims:
    """A ClaimSource backed by a dict: the demo's stand-in for the API server."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, claim: dict[str, Any]) -> None:
        """Store a claim under its namespace and name."""
        meta = claim["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = claim

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The stored claim."""
        try:
            return self.claims[(namespace, name)]
        except KeyError:
            raise PermanentError(f"resourceclaims {namespace}/{name} not found") from None


def _attr(dev: Device, name: str) -> object:
    a = dev.attributes.get(name)
    return a.value if a is not None else None


def first_fit(
    spec: Mapping[str, Any],
    pools: Sequence[tuple[str, str, Sequence[Device]]],
    classes: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Allocate ``spec.devices`` (requests + constraints) from ``pools`` by first fit.

    Args:
        spec: a claim's ``spec.devices``.
        pools: ``(driver, pool, devices)`` in publishing order.
        classes: DeviceClass name -> driver.

    Returns:
        ``status.allocation.devices.results`` entries.

    Raises:
        PermanentError: nothing fits.
    """
    constraints = spec.get("constraints") or []
    results: list[dict[str, Any]] = []
    used: set[tuple[str, str, str]] = set()
    for req in spec["requests"]:
        choices = (
            [(f"{req['name']}/{s['name']}", s) for s in req["firstAvailable"]]
            if "firstAvailable" in req
            else [(req["name"], req["exactly"])]
        )
        for ref, body in choices:
            applicable = [
                c for c in constraints if ref in c["requests"] or req["name"] in c["requests"]
            ]
            picked = _pick(body, ref, pools, classes, applicable, used)
            if picked is not None:
                for driver, pool, dev in picked:
                    used.add((driver, pool, dev.name))
                    results.append(
                        {"request": ref, "driver": driver, "pool": pool, "device": dev.name}
                    )
                break
        else:
            raise PermanentError(f"request {req['name']!r}: no devices satisfy it")
    return results


def _pick(
    body: Mapping[str, Any],
    ref: str,
    pools: Sequence[tuple[str, str, Sequence[Device]]],
    classes: Mapping[str, str],
    constraints: Sequence[Mapping[str, Any]],
    used: set[tuple[str, str, str]],
) -> list[tuple[str, str, Device]] | None:
    driver = classes[body["deviceClassName"]]
    count = int(body.get("count", 1))
    free = [
        (d, p, dev)
        for d, p, devs in pools
        if d == driver
        for dev in devs
        if (d, p, dev.name) not in used
    ]
    match = [c["matchAttribute"] for c in constraints if "matchAttribute" in c]
    distinct = [c["distinctAttribute"] for c in constraints if "distinctAttribute" in c]
    if match:
        groups: dict[object, list[tuple[str, str, Device]]] = {}
        for item in free:
            key = tuple(_attr(item[2], m) for m in match)
            if None not in key:
                groups.setdefault(key, []).append(item)
        for items in groups.values():  # first group (in publishing order) that fits
            if len(items) >= count:
                return items[:count]
        return None
    chosen: list[tuple[str, str, Device]] = []
    seen: set[object] = set()
    for item in free:
        key = tuple(_attr(item[2], a) for a in distinct)
        if distinct and (None in key or key in seen):
            continue
        seen.add(key)
        chosen.append(item)
        if len(chosen) == count:
            return chosen
    return None


@contextmanager
def _timed(console: Console, title: str) -> Iterator[None]:
    start = time.perf_counter()
    with console.status(title):
        yield
    console.print(f"[green]✓[/] {title} [dim]({(time.perf_counter() - start) * 1000:.0f} ms)[/]")


def run_demo(profile: str | None = None, console: Console | None = None) -> dict[str, Any]:
    """Run the demo; returns a summary (used by the tests)."""
    console = console or Console()
    profile = profile or DEFAULT_DEMO_PROFILE
    t0 = time.perf_counter()
    summary: dict[str, Any] = {"profile": profile}
    with tempfile.TemporaryDirectory(prefix="drakit-demo-", dir=fast_tmp()) as tmp:
        root = Path(tmp)
        settings = DrakitSettings(
            profile=profile,
            node_name="demo-node",
            kubelet_dir=root / "kubelet",
            cdi_dir=root / "cdi",
            state_dir=root / "state",
            metrics={"enabled": False},
            plugins={
                "cpu": {"policy": "packed"},
                "nvidia_gpu": {},
                "amd_ainic": {},
                "composite": {"strategy": "numa-preferred"},
            },
        )
        (root / "kubelet" / "plugins_registry").mkdir(parents=True)
        claims = InMemoryClaims()
        console.print(Panel.fit(f"drakit demo on simulated hardware profile [bold]{profile}[/]"))
        node = Node(settings, claims=claims, boot_id="demo-boot", instance_id="demo")
        with _timed(console, "built the simulated node, loaded 4 backends, discovered devices"):
            node.start()
        try:
            summary.update(_show(console, node, claims, root))
        finally:
            node.stop(grace=1)
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    console.print(f"[bold green]demo finished in {summary['seconds']} s[/]")
    return summary


def _show(console: Console, node: Node, claims: InMemoryClaims, root: Path) -> dict[str, Any]:
    inv, host = node.inventory, node.host
    if inv is None or host is None:
        raise PermanentError("the demo node did not start")
    table = Table(title="discovered devices (driver / count / example attributes)")
    for col in ("driver", "devices", "example"):
        table.add_column(col, overflow="fold")
    by_driver: dict[str, list[Device]] = {}
    for spec in inv.pools:
        by_driver.setdefault(spec.driver, []).extend(spec.devices)
    for driver, devs in sorted(by_driver.items()):
        ex = devs[0]
        attrs = ", ".join(
            f"{k.rsplit('/', 1)[-1]}={v.value}" for k, v in sorted(ex.attributes.items())[:6]
        )
        table.add_row(driver, str(len(devs)), f"{ex.name}: {attrs}")
    console.print(table)

    slices = inv.slices()
    console.print(
        f"[green]✓[/] rendered {len(slices)} ResourceSlices (resource.k8s.io/v1, API limits "
        f"checked): " + ", ".join(s["metadata"]["name"] for s in slices)
    )
    for driver, server in sorted(node.servers.items()):
        console.print(
            f"[green]✓[/] kubelet sockets for [bold]{driver}[/]: "
            f"{server.registration_socket.relative_to(root)} -> "
            f"{server.dra_socket.relative_to(root)}"
        )

    results, uid = _allocate(console, node, claims)
    out = _prepare_and_release(console, node, results, uid, root)
    return {
        "devices": {d: len(v) for d, v in by_driver.items()},
        "slices": len(slices),
        "allocated": [r["device"] for r in results],
        **out,
    }


def _allocate(
    console: Console, node: Node, claims: InMemoryClaims
) -> tuple[list[dict[str, Any]], str]:
    """Shape the example claim with a strategy and allocate it by first fit."""
    host, inv = node.host, node.inventory
    if inv is None or host is None:
        raise PermanentError("the demo node did not start")
    drivers = host.driver_names()
    classes = {"gpu-nic-pair": drivers["composite"], "cpu": drivers["cpu"]}
    shaped = host.shape(
        "numa-preferred", SimpleRequest(name="pairs", device_class="gpu-nic-pair", count=2)
    )
    spec = shaped.to_api()
    spec["requests"].append({"name": "cpus", "exactly": {"deviceClassName": "cpu", "count": 1}})
    pools = [(p.driver, p.pool, p.devices) for p in inv.pools]
    results = first_fit(spec, pools, classes)
    for r in results:
        if r["driver"] == drivers["cpu"]:
            r["consumedCapacity"] = {"cpu": "16"}
    uid = str(uuid.uuid4())
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "demo", "name": "train-job", "uid": uid},
        "spec": {"devices": spec},
        "status": {
            "allocation": {
                "devices": {
                    "results": results,
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": ["cpus"],
                            "opaque": {
                                "driver": drivers["cpu"],
                                "parameters": {
                                    "apiVersion": "cpu.drakit.io/v1alpha1",
                                    "kind": "CpuConfig",
                                    "policy": "distributed",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }
    claims.add(claim)
    console.print(
        Panel(
            json.dumps(spec, indent=1),
            title="claim 'train-job': 2 GPU-NIC pairs (numa-preferred) + 16 CPUs (distributed)",
        )
    )
    alloc = ", ".join(f"{r['request']} -> {r['device']}" for r in results)
    console.print(f"[green]✓[/] allocated (demo first-fit allocator): {alloc}")
    return results, uid


def _prepare_and_release(
    console: Console, node: Node, results: list[dict[str, Any]], uid: str, root: Path
) -> dict[str, Any]:
    """Prepare the claim over gRPC, show its CDI edits, unprepare it."""
    # -- prepare over gRPC ---------------------------------------------------------------------
    ref = ClaimRef(namespace="demo", name="train-job", uid=uid)
    used = sorted({r["driver"] for r in results})
    cdi_ids: list[str] = []
    for driver in used:
        with KubeletClient(node.servers[driver].registration_socket) as client:
            res = client.prepare([ref])[uid]
        if res.error:
            raise PermanentError(f"prepare through {driver} failed: {res.error}")
        for d in res.devices:
            cdi_ids += d.cdi_device_ids
            console.print(
                f"[green]✓[/] NodePrepareResources via {driver}: {d.device} -> "
                f"{d.cdi_device_ids[0]}"
            )
    specs = sorted(p.name for p in (root / "cdi").iterdir())
    env: list[str] = []
    for name in specs:
        body = json.loads((root / "cdi" / name).read_text())
        for dev in body["devices"]:
            env += dev["containerEdits"].get("env", [])
    console.print(Panel("\n".join(env), title=f"container environment from {len(specs)} CDI specs"))

    # -- unprepare -----------------------------------------------------------------------------
    for driver in used:
        with KubeletClient(node.servers[driver].registration_socket) as client:
            err = client.unprepare([ref])[uid].error
        if err:
            raise PermanentError(f"unprepare through {driver} failed: {err}")
    left = list((root / "cdi").iterdir())
    held = sum(len(s.prepared_claims()) for s in node.states.values())
    console.print(
        f"[green]✓[/] NodeUnprepareResources: {len(left)} CDI specs and {held} checkpointed "
        "claims left"
    )
    return {
        "cdi_ids": cdi_ids,
        "env": env,
        "left_after_unprepare": len(left) + held,
    }
