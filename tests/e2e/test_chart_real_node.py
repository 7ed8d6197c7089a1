"""The chart on a real node: ``helm install``, upgrade and uninstall of drakit's DaemonSet.

The module runs its own control plane, configured like a real cluster where the tests' shared one
is not (the ServiceAccount admission plugin and every default controller: DaemonSets, service
account tokens, the root CA ConfigMap), and its own :class:`~tests.e2e.realnode.RealNode` with
drakit's image imported (``hack/node/images.py``, the Dockerfile's recipe). ``drakit node`` then
runs only as the chart's DaemonSet pod, from that image, on simulated hardware mounted in through
the chart's ``simulatedRoot`` value; it reaches the API server through ``apiServer.host/port`` (the
node has no kube-proxy) with the token the kubelet projects for the chart's ServiceAccount.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import REPO_ROOT, ControlPlane, free_port, new_run_dir, wait_for
from tests.e2e.nodeproc import RESOURCE, create_device_class
from tests.e2e.realnode import (
    DONE,
    DRAKIT_IMAGE_REPOSITORY,
    RealNode,
    claim_template,
    delete_pod,
    env_of,
    pod,
    pod_claim,
    pod_phase,
    run_pod,
)
from tests.helmchart import CHART, Helm, HelmError, helm_binary

from drakit.sim import build_profile

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]

PROFILE = "h200-8gpu-8ainic"
NAMESPACE = "drakit-system"
RELEASE = "drakit"
CPU_DRIVER = "cpu.drakit.io"


def _version() -> str:
    with (REPO_ROOT / "core" / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane, real_node: RealNode
) -> Iterator[tuple[ControlPlane, RealNode]]:
    """A control plane with ServiceAccounts and every controller; a node with drakit's image."""
    run_dir = new_run_dir()
    pki = run_dir / "pki"
    cp = ControlPlane(
        control_plane.bin_dir,
        run_dir,
        disabled_admission=["TaintNodesByCondition"],
        extra_args={
            # Webhooks are called at their Service's endpoints (no kube-proxy on the node).
            "kube-apiserver": ["--enable-aggregator-routing=true"],
            "kube-controller-manager": [
                "--controllers=*",
                f"--root-ca-file={pki / 'apiserver.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                "--use-service-account-credentials=false",
            ],
        },
    )
    cp.start()
    try:
        images = [Path(p) for p in real_node.images]
        drakit_tar = images[0].parent / "drakit.tar"
        node = RealNode(cp, real_node.node_bin, [*images, drakit_tar], name="chart-node")
        with node:
            build_profile(PROFILE, node.root / "sim")
            yield cp, node
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        binary = helm_binary()
    except HelmError as exc:
        pytest.fail(f"helm unavailable: {exc}", pytrace=False)
    return Helm(binary, tmp_path_factory.mktemp("helm-real-node"))


def _values(
    cp: ControlPlane, node: RealNode, *, webhook: bool = False, **config: Any
) -> dict[str, Any]:
    backends: dict[str, Any] = {
        "cpu": {"enabled": True},
        "nvidia_gpu": {"enabled": True},
        "amd_ainic": {"enabled": True},
    }
    if webhook:
        backends["composite"] = {"enabled": True}
    return {
        "image": {"repository": DRAKIT_IMAGE_REPOSITORY, "tag": _version(), "pullPolicy": "Never"},
        "kubeletDir": str(node.kubelet_dir),
        "cdiDir": str(node.cdi_dir),
        "stateDir": str(node.root / "state"),
        "simulatedRoot": str(node.root / "sim"),
        "deviceRoot": str(node.root / "sim"),
        "apiServer": {"host": "127.0.0.1", "port": str(cp.api_port)},
        "metrics": {"port": free_port()},
        "backends": backends,
        "config": {"log_level": "INFO", **config},
        "node": {"terminationGracePeriodSeconds": 10},
        # On the node's network: the API server reaches no pod IP (no route to the pod bridge).
        "webhook": {"enabled": webhook, "hostNetwork": True, "replicas": 1, "port": free_port()},
    }


def _kubeconfig_args(cp: ControlPlane) -> list[str]:
    return ["--kubeconfig", str(cp.kubeconfig), "--namespace", NAMESPACE]


def _node_pods(cp: ControlPlane) -> list[dict[str, Any]]:
    selector = "app.kubernetes.io/component=node"
    items: list[dict[str, Any]] = cp.api(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={selector}"
    )["items"]
    return items


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _registrations(node: RealNode) -> list[str]:
    registry = node.kubelet_dir / "plugins_registry"
    return sorted(p.name for p in registry.iterdir()) if registry.is_dir() else []


def _slices(cp: ControlPlane, node: RealNode) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.api(
        "GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node.name}"
    )["items"]
    return items


def _cdi_specs(node: RealNode) -> list[str]:
    return sorted(p.name for p in node.cdi_dir.iterdir() if p.suffix in (".json", ".yaml"))


def test_install_upgrade_uninstall_with_a_workload_claim(
    cluster: tuple[ControlPlane, RealNode], helm: Helm
) -> None:
    cp, node = cluster
    cp.create_namespace("work")

    # install: the DaemonSet's pod runs from the imported image, registers, publishes.
    values = helm.values_file(_values(cp, node), "install.yaml")
    helm.run(
        "install",
        RELEASE,
        str(CHART),
        "--create-namespace",
        "--values",
        str(values),
        *_kubeconfig_args(cp),
    )
    first = wait_for(
        lambda: [p for p in _node_pods(cp) if _ready(p)], timeout=120, what="the node pod Ready"
    )[0]
    wait_for(lambda: len(_registrations(node)) >= 3, timeout=60, what="three drivers registered")
    wait_for(
        lambda: {s["spec"]["driver"] for s in _slices(cp, node)} >= {CPU_DRIVER},
        timeout=60,
        what="slices published by the DaemonSet's pod",
    )

    # a workload's claim is prepared by the pod and reaches its container.
    create_device_class(cp, "chart-cpu", CPU_DRIVER)
    try:
        claim_template(cp, "work", "cpu", "chart-cpu")
        claims = {"c": {"resourceClaimTemplateName": "cpu"}}
        log = run_pod(cp, node, "work", "w", "env", claims)
        assert [k for k in env_of(log) if k.startswith("DRAKIT_CPUSET_")], log
        uid = pod_claim(cp, "work", "w")["metadata"]["uid"]

        def spec_of_claim() -> list[str]:
            return [n for n in _cdi_specs(node) if uid in (node.cdi_dir / n).read_text()]

        assert spec_of_claim()

        # upgrade: a changed configuration rolls the DaemonSet (maxSurge: the new pod starts
        # beside the old one, under socket names of its own); the workload keeps its claim.
        side_by_side = 0  # the most CPU driver registrations present at one time
        values = helm.values_file(_values(cp, node, log_level="DEBUG"), "upgrade.yaml")
        helm.run("upgrade", RELEASE, str(CHART), "--values", str(values), *_kubeconfig_args(cp))

        def rolled() -> bool:
            nonlocal side_by_side
            now = [r for r in _registrations(node) if r.startswith(f"{CPU_DRIVER}-")]
            side_by_side = max(side_by_side, len(now))
            pods = _node_pods(cp)
            return (
                len(pods) == 1
                and pods[0]["metadata"]["uid"] != first["metadata"]["uid"]
                and _ready(pods[0])
            )

        wait_for(rolled, timeout=180, what="the DaemonSet rolled to a new, Ready pod")
        assert side_by_side == 2, "the two pods' registration sockets never stood side by side"
        assert pod_phase(cp, "work", "w") == "Running"
        assert spec_of_claim()

        # the new pod unprepares the claim it did not prepare.
        delete_pod(cp, "work", "w")
        wait_for(
            lambda: not spec_of_claim(), timeout=60, what="the claim unprepared by the new pod"
        )
    finally:
        cp.api("DELETE", f"{RESOURCE}/deviceclasses/chart-cpu")

    # uninstall: no socket, no CDI spec, no slice is left.
    helm.run("uninstall", RELEASE, "--wait", *_kubeconfig_args(cp))
    wait_for(lambda: not _node_pods(cp), timeout=120, what="the node pod gone")
    wait_for(lambda: not _registrations(node), timeout=60, what="no registration socket")
    plugins = node.kubelet_dir / "plugins"
    sockets = [p for p in plugins.rglob("*.sock")] if plugins.exists() else []
    assert not sockets
    assert not _cdi_specs(node)
    wait_for(lambda: not _slices(cp, node), timeout=90, what="the node's slices removed")
    assert json.dumps(_slices(cp, node)) == "[]"


def test_the_webhook_deployment_admits_a_pair_pod(
    cluster: tuple[ControlPlane, RealNode], helm: Helm
) -> None:
    """With the composite enabled, the chart's webhook runs as a Deployment on the node, the API
    server calls it for a pod that asks for a GPU-NIC pair, and the pod runs with the pair's
    GPU and NIC device nodes."""
    cp, node = cluster
    release = "drakit-wh"
    values = helm.values_file(_values(cp, node, webhook=True), "webhook.yaml")
    helm.run(
        "install",
        release,
        str(CHART),
        "--create-namespace",
        "--values",
        str(values),
        *_kubeconfig_args(cp),
    )
    try:
        for component in ("node", "webhook"):
            wait_for(
                functools.partial(_ready_pods, cp, component),
                timeout=150,
                what=f"the {component} pod Ready",
            )
        cp.create_namespace("pairs")
        body = pod(
            "pair",
            node.name,
            ["sh", "-c", f"find /dev -type c | sort; echo {DONE}; exec sleep 3600"],
        )
        body["metadata"]["annotations"] = {"composite.drakit.io/gpu-nic-pairs": "1"}
        made = cp.api("POST", "/api/v1/namespaces/pairs/pods", body)
        assert made["spec"]["resourceClaims"][0]["name"] == "gpu-nic-pairs", made["spec"]

        def printed() -> str | None:
            text = node.pod_log("pairs", "pair", "c")
            return text if DONE in text else None

        log = wait_for(printed, timeout=120, what="the pair pod's command")
        nodes = set(log.splitlines())
        assert {n for n in nodes if re.fullmatch(r"/dev/nvidia\d+", n)}, log
        assert {n for n in nodes if n.startswith("/dev/infiniband/uverbs")}, log
        assert "/dev/infiniband/rdma_cm" in nodes
        delete_pod(cp, "pairs", "pair")
    finally:
        helm.run("uninstall", release, "--wait", *_kubeconfig_args(cp))
        wait_for(lambda: not _pods(cp, "node"), timeout=120, what="the node pod gone")


def _ready_pods(cp: ControlPlane, component: str) -> list[dict[str, Any]]:
    return [p for p in _pods(cp, component) if _ready(p)]


def _pods(cp: ControlPlane, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/component={component}"
    items: list[dict[str, Any]] = cp.api(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={selector}"
    )["items"]
    return items
