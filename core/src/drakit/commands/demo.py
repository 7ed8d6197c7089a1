"""``drakit demo``: drakit end to end on simulated hardware, with no cluster.

Steps: build a simulated node, discover, render ResourceSlices, serve the kubelet sockets in a
temporary directory, shape an example claim (or read ``--claim``), allocate it with
:mod:`drakit.allocator` (the kube-scheduler's algorithm, checked against the real scheduler by
the differential e2e test) over the rendered slices, prepare it over the real gRPC wire
protocol, show the CDI specs, unprepare it. The claim printed is the claim allocated and
prepared, with the allocation the allocator made; nothing is added to it afterwards.
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

import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from drakit.allocator import AllocationError, Allocator, DeviceClass, ResourceClaim, ResourceSlice
from drakit.allocator import Node as AllocNode
from drakit.allocator.api import ClaimSpec
from drakit.config import validation_errors
from drakit.deviceclasses import DeviceClassSpec, render_device_classes
from drakit.errors import ConfigInvalid, PermanentError
from drakit.explain.report import explain_text
from drakit.host.presets import demo_preset
from drakit.host.settings import DrakitSettings, load_settings
from drakit.host.startup import fast_tmp
from drakit.kubelet.client import KubeletClient
from drakit.models import ClaimRef, Device, DeviceKey
from drakit.node.daemon import Node
from drakit.prepare.memory import ClaimStore as InMemoryClaims
from drakit.strategy_models import SimpleRequest

__all__ = [
    "InMemoryClaims",
    "demo_classes",
    "example_claim",
    "read_claim_file",
    "run_demo",
]


@contextmanager
def _timed(console: Console, title: str) -> Iterator[None]:
    start = time.perf_counter()
    with console.status(title):
        yield
    console.print(f"[green]✓[/] {title} [dim]({(time.perf_counter() - start) * 1000:.0f} ms)[/]")


def demo_settings(root: Path, profile: str, config: Path | None) -> DrakitSettings:
    """The demo node's settings: ``config`` (or the demo preset's backends), paths in ``root``."""
    paths: dict[str, Any] = {
        "node_name": "demo-node",
        "kubelet_dir": root / "kubelet",
        "cdi_dir": root / "cdi",
        "state_dir": root / "state",
        "metrics": {"enabled": False},
    }
    if config is not None:
        base = load_settings(config, overrides={"profile": profile})
        return base.model_copy(
            update={**paths, "metrics": base.metrics.model_copy(update={"enabled": False})}
        )
    return DrakitSettings(profile=profile, plugins=demo_preset().plugins, **paths)


def run_demo(
    profile: str | None = None,
    console: Console | None = None,
    *,
    config: Path | None = None,
    claim: Path | None = None,
) -> dict[str, Any]:
    """Run the demo; returns a summary (used by the tests).

    Args:
        profile: Simulated hardware profile (default: the ``demo`` preset's, see
            :mod:`drakit.host.presets`; ``drakit-sim-profiles`` ships ``h200-8gpu-8ainic``).
        console: Where to print.
        config: A drakit configuration file whose backends (and their settings) the demo node
            runs instead of the ``demo`` preset's; its paths are replaced by temporary ones.
        claim: A YAML file with a ResourceClaim (or ResourceClaimTemplate, or bare
            ``spec.devices``), optionally preceded by DeviceClass documents, to allocate and
            prepare instead of the example claim.
    """
    console = console or Console()
    profile = profile or demo_preset().profile
    if not profile:
        raise PermanentError("no simulated hardware profile is installed; pass --profile")
    t0 = time.perf_counter()
    summary: dict[str, Any] = {"profile": profile}
    with tempfile.TemporaryDirectory(prefix="drakit-demo-", dir=fast_tmp()) as tmp:
        root = Path(tmp)
        settings = demo_settings(root, profile, config)
        (root / "kubelet" / "plugins_registry").mkdir(parents=True)
        claims = InMemoryClaims(copy=False)
        console.print(Panel.fit(f"drakit demo on simulated hardware profile [bold]{profile}[/]"))
        node = Node(settings, claims=claims, boot_id="demo-boot", instance_id="demo")
        with _timed(
            console,
            f"built the simulated node, loaded {len(settings.plugins)} backends, discovered "
            "devices",
        ):
            node.start()
        try:
            summary.update(_show(console, node, claims, root, claim))
        finally:
            node.stop(grace=1)
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    console.print(f"[bold green]demo finished in {summary['seconds']} s[/]")
    return summary


def _show(
    console: Console, node: Node, claims: InMemoryClaims, root: Path, claim_file: Path | None
) -> dict[str, Any]:
    inv, host = node.inventory, node.host
    if inv is None or host is None:
        raise PermanentError("the demo node did not start")
    table = Table(title="discovered devices (driver / backend / count / example attributes)")
    for col in ("driver", "backend", "devices", "example"):
        table.add_column(col, overflow="fold")
    by_driver: dict[str, list[Device]] = {}
    by_backend: dict[tuple[str, str], list[Device]] = {}
    for spec in inv.pools:
        by_driver.setdefault(spec.driver, []).extend(spec.devices)
        for dev in spec.devices:
            owner = inv.owner_of(DeviceKey(driver=spec.driver, pool=spec.pool, device=dev.name))
            by_backend.setdefault((spec.driver, owner or "?"), []).append(dev)
    for (driver, backend), devs in sorted(by_backend.items()):
        ex = devs[0]
        attrs = ", ".join(
            f"{k.rsplit('/', 1)[-1]}={v.value}" for k, v in sorted(ex.attributes.items())[:6]
        )
        table.add_row(driver, backend, str(len(devs)), f"{ex.name}: {attrs}")
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

    classes = demo_classes(host.driver_names(), host.device_classes())
    if claim_file is not None:
        devices, title, extra = read_claim_file(claim_file)
        classes.update(extra)
    else:
        devices, title = example_claim(node)
    claim = _allocate(console, node, claims, devices, title, classes, slices)
    out = _prepare_and_release(console, node, claim, root)
    results = claim["status"]["allocation"]["devices"]["results"]
    return {
        "devices": {d: len(v) for d, v in by_driver.items()},
        "backends": {
            b: sum(len(v) for (_, o), v in by_backend.items() if o == b)
            for b in sorted({o for _, o in by_backend})
        },
        "slices": len(slices),
        "claim": claim,
        "allocated": [r["device"] for r in results],
        **out,
    }


def demo_classes(
    drivers: Mapping[str, str], contributed: Mapping[str, Sequence[DeviceClassSpec] | None]
) -> dict[str, DeviceClass]:
    """The backends' DeviceClasses (``drakit deviceclasses``), and one per driver name.

    A class named after a driver selects every device of that driver (under a driver that the
    composite shares with its members: the GPUs, the NICs and the pairs).
    """
    out: dict[str, DeviceClass] = {}
    for driver in drivers.values():
        out[driver] = DeviceClass.model_validate(
            {
                "metadata": {"name": driver},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
            }
        )
    for obj in render_device_classes(drivers, contributed, {}):
        out[obj["metadata"]["name"]] = DeviceClass.model_validate(
            {"metadata": {"name": obj["metadata"]["name"]}, "spec": obj["spec"]}
        )
    return out


def read_claim_file(path: Path) -> tuple[dict[str, Any], str, dict[str, DeviceClass]]:
    """``(spec.devices, title, extra classes)`` from a YAML file of DeviceClasses and a claim.

    Raises:
        ConfigInvalid: unreadable, not YAML, no claim, or a field the API does not have.
    """
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except (OSError, yaml.YAMLError) as e:
        raise ConfigInvalid([("", f"cannot read the claim: {e}")], source=str(path)) from None
    classes: dict[str, DeviceClass] = {}
    spec: dict[str, Any] | None = None
    name = path.name
    try:
        for doc in docs:
            kind = doc.get("kind") if isinstance(doc, dict) else None
            if kind == "DeviceClass":
                cls = DeviceClass.model_validate(doc)
                classes[cls.name] = cls
                continue
            inner = doc["spec"] if kind == "ResourceClaimTemplate" else doc
            body = inner.get("spec", inner) if isinstance(inner, dict) else None
            devices = body.get("devices", body) if isinstance(body, dict) else None
            ClaimSpec.model_validate({"devices": devices})
            spec = devices
            name = (inner.get("metadata") or doc.get("metadata") or {}).get("name", name)
    except ValidationError as e:
        raise ConfigInvalid(validation_errors(e), source=str(path)) from None
    except (KeyError, AttributeError) as e:
        raise ConfigInvalid([("", f"not a ResourceClaim: {e}")], source=str(path)) from None
    if spec is None:
        raise ConfigInvalid([("", "no ResourceClaim in the file")], source=str(path))
    return spec, f"claim {name!r} from {path.name}", classes


def example_claim(node: Node) -> tuple[dict[str, Any], str]:
    """The example claim for what the node has, shaped by drakit's strategies.

    GPU-NIC pairs (``numa-preferred``) where the composite backend found pairs, else two GPUs
    (``numa-preferred``) where there are GPUs; 16 CPUs (half the machine on one smaller than 32)
    spread evenly over the NUMA nodes (the CPU backend's ``numa-spread``), prepared with the
    ``distributed`` CPU policy.
    """
    host, inv = node.host, node.inventory
    if inv is None or host is None:
        raise PermanentError("the demo node did not start")
    drivers = host.driver_names()
    found = {p.driver for p in inv.pools if p.devices}
    # backends that published devices (drivers may be shared: GPUs, NICs and pairs)
    owning = {
        inv.owner_of(DeviceKey(driver=p.driver, pool=p.pool, device=d.name))
        for p in inv.pools
        for d in p.devices
    }
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    config: list[dict[str, Any]] = []
    parts: list[str] = []
    for plugin, cls, what in (
        ("composite", "gpu-nic-pair", "GPU-NIC pairs"),
        ("nvidia_gpu", "nvidia-gpu", "GPUs"),
    ):
        if plugin in owning:
            shaped = host.shape(
                "numa-preferred", SimpleRequest(name="accel", device_class=cls, count=2)
            )
            requests += shaped.to_api()["requests"]
            constraints += shaped.to_api().get("constraints", [])
            parts.append(f"2 {what} (numa-preferred)")
            break
    if drivers.get("cpu") in found:
        total = sum(
            int(d.capacity["cpu"].value)
            for p in inv.pools
            if p.driver == drivers["cpu"]
            for d in p.devices
            if "cpu" in d.capacity
        )
        cpus = 16 if total >= 32 else max(1, total // 2)  # noqa: PLR2004 - half a small machine
        shaped = host.shape(
            "numa-spread", SimpleRequest(name="cpus", device_class="cpu", count=cpus)
        )
        requests += shaped.to_api()["requests"]
        constraints += shaped.to_api().get("constraints", [])
        config.append(
            {
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
        )
        parts.append(f"{cpus} CPUs (numa-spread, distributed)")
    if not requests:
        raise PermanentError(
            "the profile has no devices the example claim can ask for; use --claim"
        )
    spec: dict[str, Any] = {"requests": requests}
    if constraints:
        spec["constraints"] = constraints
    if config:
        spec["config"] = config
    return spec, "claim 'train-job': " + " + ".join(parts)


def _allocate(
    console: Console,
    node: Node,
    claims: InMemoryClaims,
    spec: dict[str, Any],
    title: str,
    classes: Mapping[str, DeviceClass],
    slices: list[dict[str, Any]],
) -> dict[str, Any]:
    """Allocate ``spec`` with drakit.allocator over the rendered slices; store the claim."""
    uid = str(uuid.uuid4())
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "demo", "name": "train-job", "uid": uid},
        "spec": {"devices": spec},
    }
    model = ResourceClaim.model_validate(claim)
    allocator = Allocator(
        AllocNode.named(node.settings.node_name or "demo-node"),
        [ResourceSlice.model_validate(s) for s in slices],
        classes,
    )
    try:
        result = allocator.allocate([model])
    except AllocationError as e:
        raise PermanentError(f"the claim cannot be allocated on this node: {e}") from None
    if result is None:
        why = explain_text(allocator, model)
        raise PermanentError(f"the claim does not fit on this node:\n{why}")
    claim["status"] = {"allocation": result[0].to_api()}
    claims.add(claim)
    console.print(Panel(yaml.safe_dump(claim, sort_keys=False).rstrip(), title=title))
    alloc = ", ".join(
        f"{r['request']} -> {r['device']}"
        + (
            f" ({', '.join(f'{k} {v}' for k, v in r['consumedCapacity'].items())})"
            if r.get("consumedCapacity")
            else ""
        )
        for r in claim["status"]["allocation"]["devices"]["results"]
    )
    console.print(
        f"[green]✓[/] allocated by drakit.allocator (kube-scheduler's algorithm): {alloc}"
    )
    return claim


def _prepare_and_release(
    console: Console, node: Node, claim: dict[str, Any], root: Path
) -> dict[str, Any]:
    """Prepare the claim over gRPC, show its CDI edits, unprepare it."""
    # -- prepare over gRPC ---------------------------------------------------------------------
    uid = claim["metadata"]["uid"]
    results = claim["status"]["allocation"]["devices"]["results"]
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
