"""``kubectl drakit explain claim NS/NAME`` against the real API server.

The objects of ``docs/examples/explain`` (slices, classes, an allocated claim, the seed-000
claim) are created on the test control plane for a fresh node; the ``kubectl-drakit`` console
script reads them back through drakit.kube and explains the claim.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.e2e.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "explain"
RESOURCE = "/apis/resource.k8s.io/v1"
#: The console script installed next to the interpreter (what kubectl runs as `kubectl drakit`).
KUBECTL_DRAKIT = str(Path(sys.executable).parent / "kubectl-drakit")


def _docs(name: str, node: str) -> list[dict[str, Any]]:
    text = (EXAMPLES / name).read_text().replace("gpu-node-1", node)
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture
def cluster(control_plane: ControlPlane) -> Iterator[tuple[ControlPlane, str, str]]:
    run = uuid.uuid4().hex[:6]
    node, ns = f"explain-{run}", f"team-{run}"
    control_plane.create_node(node)
    control_plane.create_namespace(ns)
    classes = []
    for s in _docs("slices.yaml", node):
        s["metadata"]["name"] += f"-{run}"
        control_plane.api("POST", f"{RESOURCE}/resourceslices", s)
    for c in _docs("classes.yaml", node):
        c["metadata"]["name"] += f"-{run}"
        classes.append(c["metadata"]["name"])
        control_plane.api("POST", f"{RESOURCE}/deviceclasses", c)
    try:
        yield control_plane, node, ns
    finally:
        control_plane.api("DELETE", f"/api/v1/namespaces/{ns}")
        control_plane.delete_node(node)
        for name in classes:
            control_plane.api("DELETE", f"{RESOURCE}/deviceclasses/{name}")


def _rename_classes(obj: dict[str, Any], run: str) -> dict[str, Any]:
    for r in obj["spec"]["devices"]["requests"]:
        r["exactly"]["deviceClassName"] += f"-{run}"
    return obj


def _create_claim(cp: ControlPlane, ns: str, obj: dict[str, Any], run: str) -> None:
    obj = _rename_classes(obj, run)
    obj["metadata"]["namespace"] = ns
    status = obj.pop("status", None)
    made = cp.api("POST", f"{RESOURCE}/namespaces/{ns}/resourceclaims", obj)
    if status is not None:
        made["status"] = status
        name = made["metadata"]["name"]
        cp.api("PUT", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}/status", made)


def test_kubectl_drakit_explains_a_pending_claim(
    cluster: tuple[ControlPlane, str, str],
) -> None:
    cp, node, ns = cluster
    run = node.removeprefix("explain-")
    earlier = _docs("allocated.yaml", node)[0]
    _create_claim(cp, ns, earlier, run)
    _create_claim(cp, ns, _docs("claim-4-pairs.yaml", node)[0], run)
    script = KUBECTL_DRAKIT
    args = [
        script,
        "explain",
        "claim",
        f"{ns}/train-4-pairs",
        "--kubeconfig",
        str(cp.kubeconfig),
        "--node",
        node,
    ]
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 1, done.stderr  # the claim fits nowhere
    text = done.stdout
    assert f"node {node}: does not fit" in text
    assert "numaNode 0 has 2, numaNode 1 has 2" in text
    assert "the preferred policy would fit" in text
    doc = json.loads(
        subprocess.run(
            [*args, "-o", "json", "--exit-zero"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    assert doc["claim"] == f"{ns}/train-4-pairs"
    [explained] = doc["nodes"]
    assert explained["fits"] is False
    assert {r["kind"] for r in explained["reasons"]} == {"constraint"}


def test_explain_claim_that_is_already_allocated(cluster: tuple[ControlPlane, str, str]) -> None:
    cp, node, ns = cluster
    run = node.removeprefix("explain-")
    _create_claim(cp, ns, _docs("allocated.yaml", node)[0], run)
    script = KUBECTL_DRAKIT
    out = subprocess.run(
        [
            script,
            "explain",
            "claim",
            f"{ns}/earlier-job",
            "--kubeconfig",
            str(cp.kubeconfig),
            "--node",
            node,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "already allocated: pairs -> " in out
    # its own devices do not count against it: the same 4 pairs fit again
    assert f"node {node}: fits" in out


def test_device_taint_rules_in_the_cluster_taint_their_devices(
    cluster: tuple[ControlPlane, str, str],
) -> None:
    cp, node, ns = cluster
    run = node.removeprefix("explain-")
    [rule] = _docs("taint-rule.yaml", node)
    rule["metadata"]["name"] += f"-{run}"
    cp.api("POST", f"{RESOURCE}/devicetaintrules", rule)
    try:
        _create_claim(cp, ns, _docs("claim-gpus.yaml", node)[0], run)
        done = subprocess.run(
            [
                KUBECTL_DRAKIT,
                "explain",
                "claim",
                f"{ns}/three-gpus",
                "--kubeconfig",
                str(cp.kubeconfig),
                "--node",
                node,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 1, done.stderr
        assert "needs 3 devices, 1 eligible on this node" in done.stdout
        assert f"(DeviceTaintRule {rule['metadata']['name']}) is not tolerated" in done.stdout
    finally:
        cp.api("DELETE", f"{RESOURCE}/devicetaintrules/{rule['metadata']['name']}")
