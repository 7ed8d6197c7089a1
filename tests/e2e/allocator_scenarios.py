"""A seeded generator of allocation scenarios, for comparing drakit's allocator with kube-scheduler.

A scenario is one node's ResourceSlices and one to three claims that are scheduled one after
another on that node (so later claims see the earlier ones as already allocated). Devices come
either from drakit's simulated hardware profiles (the slices ``drakit slices --profile`` renders)
or are made up: attributes in a shared ``dx.drakit.io`` domain and the driver's own, capacities
with and without request policies on multi-allocatable devices, partitions drawing on shared
counters, taints with every effect, several pools and slices in shuffled name order, slices
that select their node by label or per device, incomplete pools. Claims
mix selectors (plain, quantity and semver functions), ExactCount and All, ``firstAvailable``
ladders, capacity requests, tolerations, adminAccess, and match/distinct constraints over some
or all requests.

Everything generated is valid for the API server: a rejected object is a generator bug.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from dataclasses import dataclass, field
from typing import Any

GPU = "gpu.dx.drakit.io"
NIC = "nic.dx.drakit.io"
DOMAIN = "dx.drakit.io"
NODE_LABEL = "dx.drakit.io/node"
"""The label every scenario node carries with its own name (for slices with a nodeSelector)."""

#: DeviceClasses the scenarios use, by name: name -> CEL selector.
CLASSES: dict[str, str] = {
    "dx-gpu": f'device.driver == "{GPU}"',
    "dx-nic": f'device.driver == "{NIC}"',
    "dx-any": f'device.driver == "{GPU}" || device.driver == "{NIC}"',
    "dx-numa0": f'device.driver == "{GPU}" && device.attributes["{DOMAIN}"].numa == 0',
}

#: Profiles whose real discovered devices feed some scenarios, and the classes for their drivers.
PROFILES = ("h200-8gpu-8ainic", "mi300x-8gpu-8ainic", "dgx-h100", "epyc-genoa-2s")
PROFILE_PLUGINS: dict[str, dict[str, Any]] = {
    "cpu": {"policy": "packed"},
    "nvidia_gpu": {},
    "amd_ainic": {},
    # no composite: its pairs would share the GPU and NIC driver (docs/composite.md), and the
    # scenarios' classes select GPUs and NICs by driver
}


@dataclass
class Scenario:
    """One node's slices and the claims (``spec.devices``) scheduled on it in order."""

    node: str
    slices: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    kind: str
    extra_classes: dict[str, str] = field(default_factory=dict)


def _attr(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def _slice(node: str, driver: str, pool: str, name: str, count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": 0, "resourceSliceCount": count},
            "nodeName": node,
            **spec,
        },
    }


def _device(rng: random.Random, name: str, driver: str, numa: int, idx: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        f"{DOMAIN}/numa": _attr(numa),
        f"{DOMAIN}/pcieRoot": _attr(f"pci0000:{idx // 2:02x}"),
        "index": _attr(idx),
        "model": _attr(rng.choice(["a100", "h200"] if driver == GPU else ["cx7", "pollara"])),
        "healthy": _attr(rng.random() < 0.8),
        "fw": {"version": rng.choice(["1.2.0", "1.10.0", "2.0.0-rc.1"])},
    }
    dev: dict[str, Any] = {"name": name, "attributes": attrs}
    roll = rng.random()
    if driver == GPU:
        dev["capacity"] = {"memory": {"value": rng.choice(["40Gi", "80Gi"])}}
    if roll < 0.3:  # a multi-allocatable device with a consumable capacity
        dev["allowMultipleAllocations"] = True
        policy = rng.choice(
            [
                None,
                {"default": "10", "validRange": {"min": "10", "step": "10"}},
                {"default": "10", "validRange": {"min": "10", "max": "60", "step": "5"}},
                {"default": "20", "validValues": ["10", "20", "50"]},
            ]
        )
        cap: dict[str, Any] = {"value": rng.choice(["100", "60"])}
        if policy is not None:
            cap["requestPolicy"] = policy
        dev["capacity"] = {**dev.get("capacity", {}), "bandwidth": cap}
    if rng.random() < 0.2:
        dev["taints"] = [
            {
                "key": "dx.drakit.io/unhealthy",
                "value": rng.choice(["ecc", "link"]),
                "effect": rng.choice(["NoSchedule", "NoExecute", "None"]),
            }
        ]
    return dev


def _made_up(rng: random.Random, node: str) -> list[dict[str, Any]]:
    slices: list[dict[str, Any]] = []
    for driver, short in ((GPU, "g"), (NIC, "n")):
        pools = [node] + ([f"{node}-b"] if rng.random() < 0.3 else [])
        for pool in pools:
            n_slices = rng.randint(1, 2)
            counters = driver == GPU and rng.random() < 0.35
            total = n_slices + (1 if counters else 0)
            order = rng.sample(range(total), total)  # slice names in shuffled order
            made = 0
            if counters:
                slices.append(
                    _slice(
                        node,
                        driver,
                        pool,
                        f"{pool}-{short}-{order[made]}",
                        total,
                        sharedCounters=[{"name": "mem-0", "counters": {"memory": {"value": "8"}}}],
                    )
                )
                made += 1
            for si in range(n_slices):
                devs = []
                for di in range(rng.randint(1, 4)):
                    idx = si * 4 + di
                    dev = _device(rng, f"{short}{si}-{di}", driver, rng.randint(0, 1), idx)
                    if counters and rng.random() < 0.6:
                        dev.pop("allowMultipleAllocations", None)
                        dev["capacity"] = {"memory": {"value": "80Gi"}}
                        dev["consumesCounters"] = [
                            {
                                "counterSet": "mem-0",
                                "counters": {"memory": {"value": rng.choice(["2", "4", "8"])}},
                            }
                        ]
                    devs.append(dev)
                slices.append(
                    _slice(node, driver, pool, f"{pool}-{short}-{order[made]}", total, devices=devs)
                )
                made += 1
    device_slices = [x for x in slices if x["spec"].get("devices")]
    if rng.random() < 0.15:  # one slice selects its node by label instead of by name
        spec = rng.choice(device_slices)["spec"]
        del spec["nodeName"]
        spec["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": NODE_LABEL, "operator": "In", "values": [node]}]}
            ]
        }
    elif rng.random() < 0.12:  # per-device node selection, one device for a node that is not
        spec = rng.choice(device_slices)["spec"]
        del spec["nodeName"]
        spec["perDeviceNodeSelection"] = True
        for i, d in enumerate(spec["devices"]):
            d["nodeName"] = node if i % 3 != 2 else f"{node}-elsewhere"
    if rng.random() < 0.05:  # an incomplete pool: nothing in it may be allocated
        slices.append(
            _slice(
                node, GPU, f"{node}-x", f"{node}-x-0", 2, devices=[_device(rng, "x0", GPU, 0, 0)]
            )
        )
    return slices


@functools.cache
def _profile_slices(profile: str) -> str:
    """The profile's slices as JSON (rendered once per run)."""
    from drakit.host.inventory import build_inventory
    from drakit.host.settings import DrakitSettings
    from drakit.host.startup import open_host

    settings = DrakitSettings(profile=profile, node_name="profile-node-xq", plugins=PROFILE_PLUGINS)
    with open_host(settings) as host:
        return json.dumps(build_inventory(host).slices())


def profile_drivers(profile: str) -> set[str]:
    """Driver names in a profile's slices."""
    return {s["spec"]["driver"] for s in json.loads(_profile_slices(profile))}


def _from_profile(profile: str, node: str) -> list[dict[str, Any]]:
    text = _profile_slices(profile).replace("profile-node-xq", node)
    slices: list[dict[str, Any]] = json.loads(text)
    for s in slices:
        s["metadata"] = {"name": s["metadata"]["name"]}
    return slices


# --- claims ------------------------------------------------------------------------------------

_GPU_SELECTORS = [
    f'device.attributes["{GPU}"].model == "h200"',
    f'device.attributes["{DOMAIN}"].numa == 1',
    f'device.capacity["{GPU}"].memory.compareTo(quantity("64Gi")) >= 0',
    f'device.attributes["{GPU}"].fw.isGreaterThan(semver("1.9.0"))',
    f'device.attributes["{GPU}"].healthy',
    f'device.attributes["{GPU}"].index < 3',
    '"nothing" in device.attributes["other.example.com"]',
]
_NIC_SELECTORS = [
    f'device.attributes["{NIC}"].model == "pollara"',
    f'device.attributes["{DOMAIN}"].numa == 0',
    f'device.attributes["{NIC}"].fw.major() >= 2 || device.attributes["{NIC}"].healthy',
    "device.allowMultipleAllocations",
]


def _body(rng: random.Random, cls: str, *, sub: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls}
    pool = _GPU_SELECTORS if cls in ("dx-gpu", "dx-numa0") else _NIC_SELECTORS
    if cls == "dx-any":
        pool = [f'device.attributes["{DOMAIN}"].numa == 0', 'device.driver.startsWith("nic")']
    if rng.random() < 0.45:
        body["selectors"] = [
            {"cel": {"expression": e}} for e in rng.sample(pool, rng.randint(1, 2))
        ]
    if rng.random() < 0.07:
        body["allocationMode"] = "All"
    else:
        body["count"] = rng.choice([1, 1, 1, 2, 2, 3])
    if rng.random() < 0.25:
        wanted = rng.choice(["5", "10", "25", "40", "55", "70"])
        body["capacity"] = {"requests": {"bandwidth": wanted}}
    elif cls == "dx-gpu" and rng.random() < 0.1:
        body["capacity"] = {"requests": {"memory": "48Gi"}}
    if rng.random() < 0.25:
        body["tolerations"] = [
            rng.choice(
                [
                    {"key": "dx.drakit.io/unhealthy", "operator": "Exists"},
                    {"key": "dx.drakit.io/unhealthy", "operator": "Equal", "value": "ecc"},
                    {"key": "dx.drakit.io/unhealthy", "operator": "Exists", "effect": "NoSchedule"},
                    {"operator": "Exists"},
                ]
            )
        ]
    if not sub and rng.random() < 0.05:
        body["adminAccess"] = True
    return body


def _made_up_claim(rng: random.Random) -> dict[str, Any]:
    requests: list[dict[str, Any]] = []
    for i in range(rng.choice([1, 1, 2, 2, 3])):
        name = f"r{i}"
        if rng.random() < 0.3:
            subs = [
                {"name": f"s{j}", **_body(rng, rng.choice(list(CLASSES)), sub=True)}
                for j in range(rng.randint(2, 3))
            ]
            requests.append({"name": name, "firstAvailable": subs})
        else:
            requests.append(
                {"name": name, "exactly": _body(rng, rng.choice(list(CLASSES)), sub=False)}
            )
    devices: dict[str, Any] = {"requests": requests}
    constraints = []
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        names = [r["name"] for r in requests]
        refs = names + [
            f"{r['name']}/{s['name']}" for r in requests for s in r.get("firstAvailable", [])
        ]
        over = rng.sample(refs, rng.randint(1, min(2, len(refs)))) if rng.random() < 0.6 else []
        attr = f"{DOMAIN}/{rng.choice(['numa', 'numa', 'pcieRoot'])}"
        key = "matchAttribute" if rng.random() < 0.65 else "distinctAttribute"
        c: dict[str, Any] = {key: attr}
        if over:
            c["requests"] = sorted(set(over))
        constraints.append(c)
    if constraints:
        devices["constraints"] = constraints
    return devices


def _profile_claim(rng: random.Random, drivers: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    classes = {f"dx-p-{d.replace('.', '-')}": f'device.driver == "{d}"' for d in drivers}
    names = sorted(classes)
    requests: list[dict[str, Any]] = []
    for i in range(rng.randint(1, 2)):
        cls = rng.choice(names)
        body: dict[str, Any] = {"deviceClassName": cls, "count": rng.choice([1, 2, 2, 4])}
        if "cpu" in cls and rng.random() < 0.7:
            body["count"] = 1
            body["capacity"] = {"requests": {"cpu": rng.choice(["8", "16", "64", "200"])}}
        if rng.random() < 0.3:
            alt = {"name": "any", "deviceClassName": cls, "count": max(1, body["count"] // 2)}
            requests.append({"name": f"p{i}", "firstAvailable": [{"name": "same", **body}, alt]})
        else:
            requests.append({"name": f"p{i}", "exactly": body})
    devices: dict[str, Any] = {"requests": requests}
    if rng.random() < 0.6:
        attr = rng.choice(["resource.kubernetes.io/numaNode", "resource.kubernetes.io/pcieRoot"])
        key = "matchAttribute" if rng.random() < 0.7 else "distinctAttribute"
        devices["constraints"] = [{key: attr}]
    return devices, classes


def generate(seed: int, index: int, node: str) -> Scenario:
    """Scenario ``index`` of run ``seed`` on node ``node``."""
    rng = random.Random(f"{seed}-{index}")  # noqa: S311 - reproducible, not secret
    n_claims = rng.choice([1, 1, 2, 3])
    if rng.random() < 0.2:
        profile = rng.choice(PROFILES)
        drivers = sorted(profile_drivers(profile))
        claims, classes = [], {}
        for _ in range(n_claims):
            spec, more = _profile_claim(rng, drivers)
            claims.append(spec)
            classes.update(more)
        return Scenario(node, _from_profile(profile, node), claims, f"profile:{profile}", classes)
    return Scenario(
        node, _made_up(rng, node), [_made_up_claim(rng) for _ in range(n_claims)], "made-up"
    )


def all_profile_classes() -> dict[str, str]:
    """Classes for every profile driver (created once per run)."""
    out: dict[str, str] = {}
    for p in PROFILES:
        for d in profile_drivers(p):
            out[f"dx-p-{d.replace('.', '-')}"] = f'device.driver == "{d}"'
    return out


def deep(obj: Any) -> Any:
    """A deep copy (objects are reused between the cluster and the allocator)."""
    return copy.deepcopy(obj)
