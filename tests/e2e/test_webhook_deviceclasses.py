"""``drakit deviceclasses`` and claim shapes with the real kube-scheduler, without a webhook.

* A pod written for device plugins (only ``resources.limits`` of an extended resource) is
  scheduled through the scheduler's implicit claim, because ``drakit deviceclasses`` gives the
  per-NUMA pair class ``gpu-nic-pair-numa0`` the extended resource
  ``composite.drakit.io/gpu-nic-pair-numa0`` (DRAExtendedResource, GA in 1.37): it gets pairs
  of NUMA node 0 only, and drakit's prepare pipeline prepares what the scheduler allocated.
* ``drakit shape --strategy distributed --count 4`` on a 2-NUMA node is allocated: its
  ``spread`` choice cannot be met (4 devices on 4 distinct NUMA nodes), so the scheduler
  takes the unconstrained last choice; with ``--required`` the claim stays unallocated.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.nodeproc import (
    RESOURCE,
    create_claim,
    create_pod,
    drakit_device_classes,
    pipeline_for,
    wait_allocated,
)

from drakit.host.inventory import build_inventory
from drakit.host.settings import DrakitSettings
from drakit.host.startup import default_sections, fast_tmp, open_host

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROFILE = "h200-8gpu-8ainic"
PLUGINS = ["cpu", "nvidia_gpu", "amd_ainic", "composite"]
PAIRS = "pairs.composite.drakit.io"
NUMA = "resource.kubernetes.io/numaNode"
DRAKIT = str(Path(sys.executable).with_name("drakit"))


def drakit(*args: str) -> str:
    return subprocess.run(
        [DRAKIT, *args], check=True, capture_output=True, text=True, timeout=120
    ).stdout


@pytest.fixture(scope="module")
def classes(control_plane: ControlPlane) -> Iterator[dict[str, dict[str, Any]]]:
    with drakit_device_classes(control_plane) as items:
        yield {o["metadata"]["name"]: o for o in items}


def publish(control_plane: ControlPlane, node: str) -> dict[str, int]:
    """Publish the h200 slices for ``node``; pair name -> NUMA node."""
    settings = DrakitSettings(profile=PROFILE, node_name=node, plugins=default_sections(PLUGINS))
    numa: dict[str, int] = {}
    with open_host(settings) as host:
        for obj in build_inventory(host).slices():
            control_plane.api("POST", f"{RESOURCE}/resourceslices", obj)
            if obj["spec"]["driver"] == PAIRS:
                for d in obj["spec"].get("devices") or []:
                    if d["name"].startswith("pair-"):  # GPUs and NICs share the driver
                        numa[d["name"]] = d["attributes"][NUMA]["int"]
    return numa


def test_classes_are_the_documented_ones(
    control_plane: ControlPlane, classes: dict[str, dict[str, Any]]
) -> None:
    assert list(classes) == [
        "cpu",
        "nvidia-gpu",
        "amd-gpu",
        "amd-ainic",
        "gpu-nic-pair",
        "gpu-nic-pair-numa0",
        "gpu-nic-pair-numa1",
    ]
    # DRAExtendedResource is GA (locked on) in 1.37: the API server keeps the field
    stored = control_plane.api("GET", f"{RESOURCE}/deviceclasses/gpu-nic-pair-numa0")
    assert stored["spec"]["extendedResourceName"] == "composite.drakit.io/gpu-nic-pair-numa0"


def test_extended_resource_pod_gets_pairs_of_its_numa_node_and_is_prepared(
    control_plane: ControlPlane,
    namespace: str,
    fake_node: Callable[..., dict[str, Any]],
    classes: dict[str, dict[str, Any]],
) -> None:
    node = fake_node()["metadata"]["name"]
    numa = publish(control_plane, node)
    resource = "composite.drakit.io/gpu-nic-pair-numa0"
    control_plane.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "legacy"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/noop",
                        "resources": {"limits": {resource: "2"}},
                    }
                ],
            },
        },
    )
    path = f"/api/v1/namespaces/{namespace}/pods/legacy"
    wait_for(
        lambda: control_plane.api("GET", path)["spec"].get("nodeName") == node,
        timeout=60,
        what="the extended-resource pod to be bound",
    )
    claims = control_plane.api("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims")
    [claim] = [
        c
        for c in claims["items"]
        if "resource.kubernetes.io/extended-resource-claim"
        in (c["metadata"].get("annotations") or {})
    ]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2
    assert {r["driver"] for r in results} == {PAIRS}
    assert {numa[r["device"]] for r in results} == {0}

    with tempfile.TemporaryDirectory(prefix="dk-e2e-ext-", dir=fast_tmp()) as tmp:
        settings = DrakitSettings(
            profile=PROFILE,
            node_name=node,
            plugins=default_sections(PLUGINS),
            state_dir=Path(tmp) / "state",
            cdi_dir=Path(tmp) / "cdi",
        )
        with open_host(settings) as host:
            host.discover()
            with pipeline_for(host, PAIRS, claim, Path(tmp)) as (state, ref):
                assert not state.prepare([ref])[ref.uid].error
                prepared = state.prepared_claims()[ref.uid].prepared["composite"]
                [spec_file] = (Path(tmp) / "cdi").iterdir()
                spec = json.loads(spec_file.read_text())
    assert sorted(p.device for p in prepared) == sorted(r["device"] for r in results)
    # each pair's members, in its CDI device's environment (the spec holds the edits)
    env = {d["name"]: d["containerEdits"].get("env", []) for d in spec["devices"]}
    for p in prepared:
        tag = p.device.upper().replace("-", "_")
        [own] = [e for name, e in env.items() if name == f"{ref.uid}-{p.device}"]
        assert any(e.startswith(f"DRAKIT_{tag}_GPU=") for e in own)


@pytest.mark.parametrize("required", [False, True])
def test_distributed_shape_degrades_unless_required(
    control_plane: ControlPlane,
    namespace: str,
    fake_node: Callable[..., dict[str, Any]],
    classes: dict[str, dict[str, Any]],
    required: bool,
) -> None:
    node = fake_node()["metadata"]["name"]
    publish(control_plane, node)
    args = ["shape", "--strategy", "distributed", "--class", "gpu-nic-pair", "--count", "4"]
    shaped = yaml.safe_load(drakit(*args, *(["--required"] if required else [])))
    name = f"spread-{uuid.uuid4().hex[:4]}"
    create_claim(control_plane, namespace, name, shaped)
    create_pod(
        control_plane, namespace, "p", node, claim=name, ref="d", image="registry.invalid/noop"
    )
    claim_path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}"
    pod_path = f"/api/v1/namespaces/{namespace}/pods/p"
    if not required:
        claim = wait_allocated(
            control_plane, namespace, name, what="the distributed claim to be allocated"
        )
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 4
        assert {r["request"] for r in results} == {"devices/any"}
        return

    def unschedulable() -> bool:
        conds = control_plane.api("GET", pod_path)["status"].get("conditions") or []
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds
        )

    wait_for(unschedulable, timeout=60, what="the scheduler to give up on the hard shape")
    assert not (control_plane.api("GET", claim_path).get("status") or {}).get("allocation")
