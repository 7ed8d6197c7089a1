"""drakit on a real node: pods start with drakit's devices, seen from inside their containers.

One ``drakit node`` (``h200-8gpu-8ainic``: CPU, NVIDIA GPU, AINIC and composite backends) serves
the session's :class:`~tests.e2e.realnode.RealNode` (real kubelet, containerd with CDI, runc,
CNI). Every claim is allocated by the real scheduler, prepared by drakit through the kubelet,
injected by containerd from drakit's CDI spec, and checked by reading what the container printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.nodeproc import RESOURCE, NodeDirs, NodeProcess, published_drivers
from tests.e2e.realnode import (
    CGROUP_ROOT,
    RealNode,
    claim_template,
    delete_pod,
    env_of,
    pod,
    pod_claim,
    pod_events,
    pod_phase,
    run_pod,
)

from drakit.deviceclasses import render_device_classes
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.sim import build_profile
from drakit_cpu.prepare import cpuset_env_name
from drakit_nvidia_gpu.sim.fakenvml import load_nvml_description

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]

PROFILE = "h200-8gpu-8ainic"


PAIRS = "gpu-nic.real.drakit.io"


@pytest.fixture(scope="module")
def drakit(control_plane: ControlPlane, real_node: RealNode) -> Iterator[dict[str, Any]]:
    """``drakit node`` serving the real node with drakit's own DeviceClasses.

    CPU under its own driver; GPUs, NICs and GPU-NIC pairs under one driver (the composite).
    Yields its process (``proc``, replaced by a restart), ``dirs``, ``drivers`` (backend ->
    driver), ``classes`` (drakit's class name -> the copy made here), ``start``, the
    ``plugins`` it starts with (a test that changes them restores them) and the simulated
    ``root``.
    """
    cp = control_plane
    dirs = NodeDirs(real_node.root)
    dirs.state_dir.mkdir(exist_ok=True)
    root = build_profile(PROFILE, real_node.root / "sim")
    plugins: dict[str, dict[str, Any]] = {
        "cpu": {},
        "nvidia_gpu": {"driver": PAIRS},
        "amd_ainic": {"driver": PAIRS},
        "composite": {"driver": PAIRS, "numa_classes": 0},
    }

    def start() -> NodeProcess:
        proc = NodeProcess(
            kubeconfig=cp.kubeconfig,
            node_name=real_node.name,
            dirs=dirs,
            plugins=plugins,
            sysfs_root=root,
            instance_id="real",
        )
        proc.start()
        proc.wait_ready(timeout=90)
        return proc

    suffix = uuid.uuid4().hex[:6]
    with open_host(DrakitSettings(profile=PROFILE, plugins=plugins)) as host:
        objects = render_device_classes(host.driver_names(), host.device_classes(), {})
    classes: dict[str, str] = {}
    for obj in objects:
        classes[obj["metadata"]["name"]] = own = f"{obj['metadata']['name']}-{suffix}"
        obj["metadata"]["name"] = own
        obj["spec"].pop("extendedResourceName", None)
        cp.api("POST", f"{RESOURCE}/deviceclasses", obj)
    state: dict[str, Any] = {
        "dirs": dirs,
        "drivers": published_drivers(plugins),
        "classes": classes,
        "start": start,
        "plugins": plugins,
        "root": root,
    }
    try:
        state["proc"] = start()
        yield state
    finally:
        if "proc" in state:
            state["proc"].close()
        for own in classes.values():
            cp.api("DELETE", f"{RESOURCE}/deviceclasses/{own}")


def test_cpu_claim_reaches_the_container_and_is_unprepared_when_the_pod_goes(
    control_plane: ControlPlane, real_node: RealNode, drakit: dict[str, Any], namespace: str
) -> None:
    cp, dirs = control_plane, drakit["dirs"]
    driver = drakit["drivers"]["cpu"]
    claim_template(cp, namespace, "cpu", drakit["classes"]["cpu"])
    log = run_pod(
        cp,
        real_node,
        namespace,
        "cpu",
        "env | sort",
        {"cpus": {"resourceClaimTemplateName": "cpu"}},
    )
    claim = pod_claim(cp, namespace, "cpu")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    env = env_of(log)
    cpusets = {k: v for k, v in env.items() if k.startswith("DRAKIT_CPUSET_")}
    expected = cpuset_env_name(result["device"], result.get("shareID"))
    assert list(cpusets) == [expected], log
    uid = claim["metadata"]["uid"]
    specs = [s for s in dirs.cdi_specs().values() if uid in json.dumps(s)]
    assert specs, f"no CDI spec for claim {uid}: {dirs.cdi_files()}"
    spec_env = [e for s in specs for d in s["devices"] for e in d["containerEdits"].get("env", [])]
    assert f"{expected}={cpusets[expected]}" in spec_env

    delete_pod(cp, namespace, "cpu")
    wait_for(
        lambda: (
            not [s for s in dirs.cdi_specs().values() if uid in json.dumps(s)]
            and uid not in json.dumps(dirs.checkpoint(driver))
        ),
        timeout=60,
        what="the kubelet to unprepare the claim (CDI spec and checkpoint entry gone)",
    )


def _claim(cp: ControlPlane, ns: str, name: str, device_class: str, **extra: Any) -> None:
    request = {"name": "r", "exactly": {"deviceClassName": device_class}}
    cp.api(
        "POST",
        f"{RESOURCE}/namespaces/{ns}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [request], **extra}},
        },
    )


def _cpuset_of(log: str) -> dict[str, str]:
    return {k: v for k, v in env_of(log).items() if k.startswith("DRAKIT_CPUSET_")}


def test_one_claim_shared_by_two_pods(
    control_plane: ControlPlane, real_node: RealNode, drakit: dict[str, Any], namespace: str
) -> None:
    cp = control_plane
    _claim(cp, namespace, "shared", drakit["classes"]["cpu"])
    first = run_pod(cp, real_node, namespace, "a", "env", {"c": {"resourceClaimName": "shared"}})
    second = run_pod(cp, real_node, namespace, "b", "env", {"c": {"resourceClaimName": "shared"}})
    assert _cpuset_of(first)
    assert _cpuset_of(first) == _cpuset_of(second)
    claim = cp.api("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/shared")
    assert {r["name"] for r in claim["status"]["reservedFor"]} == {"a", "b"}
    uid = claim["metadata"]["uid"]
    dirs = drakit["dirs"]
    delete_pod(cp, namespace, "a")
    # The claim stays prepared while the second pod uses it.
    assert [s for s in dirs.cdi_specs().values() if uid in json.dumps(s)]
    delete_pod(cp, namespace, "b")
    wait_for(
        lambda: not [s for s in dirs.cdi_specs().values() if uid in json.dumps(s)],
        timeout=60,
        what="the shared claim unprepared after its last pod",
    )


def test_a_failing_prepare_shows_in_the_podspod_events(
    control_plane: ControlPlane, real_node: RealNode, drakit: dict[str, Any], namespace: str
) -> None:
    cp = control_plane
    driver = drakit["drivers"]["cpu"]
    bad = {
        "requests": ["r"],
        "opaque": {
            "driver": driver,
            "parameters": {
                "apiVersion": "cpu.drakit.io/v1alpha1",
                "kind": "CpuConfig",
                "groupSize": 1000,
            },
        },
    }
    _claim(cp, namespace, "bad", drakit["classes"]["cpu"], config=[bad])
    body = pod(
        "bad", real_node.name, ["sh", "-c", "exit 0"], claims={"c": {"resourceClaimName": "bad"}}
    )
    cp.api("POST", f"/api/v1/namespaces/{namespace}/pods", body)

    def failed_prepare() -> list[str]:
        return [e for e in pod_events(cp, namespace, "bad") if "groupSize" in e]

    events = wait_for(failed_prepare, timeout=60, what="the prepare error in the pod's events")
    assert any(e.startswith("FailedPrepareDynamicResources") for e in events), events
    assert pod_phase(cp, namespace, "bad") == "Pending"
    assert not real_node.pod_log(namespace, "bad", "c")


def test_running_pods_keep_their_devices_across_restarts(
    control_plane: ControlPlane, real_node: RealNode, drakit: dict[str, Any], namespace: str
) -> None:
    """drakit, then the kubelet, then containerd restart while a pod runs: it keeps running,
    its claim stays prepared, and a new pod still starts after each restart."""
    cp, proc, dirs = control_plane, drakit["proc"], drakit["dirs"]
    cls = drakit["classes"]["cpu"]
    claim_template(cp, namespace, "cpu", cls)
    claims = {"c": {"resourceClaimTemplateName": "cpu"}}
    running = run_pod(cp, real_node, namespace, "long", "env", claims)
    uid = pod_claim(cp, namespace, "long")["metadata"]["uid"]
    container = _container_pid(real_node, namespace, "long")

    def still_prepared() -> None:
        assert pod_phase(cp, namespace, "long") == "Running"
        assert _container_pid(real_node, namespace, "long") == container
        assert [s for s in dirs.cdi_specs().values() if uid in json.dumps(s)]

    proc.terminate()
    proc.close()
    drakit["proc"] = drakit["start"]()
    still_prepared()
    assert _cpuset_of(run_pod(cp, real_node, namespace, "after-drakit", "env", claims))

    real_node.stop_process("kubelet")
    real_node.start_kubelet()
    real_node.wait_ready()
    still_prepared()
    assert _cpuset_of(run_pod(cp, real_node, namespace, "after-kubelet", "env", claims))

    real_node.stop_process("containerd")
    real_node.start_containerd()
    still_prepared()
    assert _cpuset_of(run_pod(cp, real_node, namespace, "after-containerd", "env", claims))
    assert _cpuset_of(running)


def _container_pid(node: RealNode, ns: str, name: str) -> int:
    """The pid of the pod's container ``c`` as containerd reports it (0 if it has none)."""
    for line in node.ctr("tasks", "ls").splitlines()[1:]:
        task, pid, status = line.split()
        if status != "RUNNING":
            continue
        info = json.loads(node.ctr("containers", "info", task))
        labels = info.get("Labels") or {}
        if (
            labels.get("io.kubernetes.pod.namespace") == ns
            and labels.get("io.kubernetes.pod.name") == name
            and labels.get("io.kubernetes.container.name") == "c"
        ):
            return int(pid)
    return 0


def _host_state() -> dict[str, Any]:
    """What a real node could leave behind on the machine."""
    paths = (
        "/var/lib/kubelet",
        "/var/lib/cni",
        "/var/log/containers",
        "/var/log/pods",
        "/run/containerd",
        "/run/nri",
        "/opt/containerd",
        "/opt/cni",
        "/etc/cni",
        "/usr/libexec/kubernetes",
    )
    sysctls = (
        "net/ipv4/ip_forward",
        "vm/overcommit_memory",
        "kernel/panic",
        "kernel/panic_on_oops",
    )
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {
        "paths": [p for p in paths if os.path.lexists(p)],
        "sysctls": {s: Path("/proc/sys", s).read_text() for s in sysctls},
        # veth ends of the session node's pods come and go with them; the bridges do not.
        "links": sorted(
            name
            for line in links.splitlines()
            if not (name := line.split(":")[1].strip()).startswith("veth")
        ),
        "mounts": Path("/proc/self/mountinfo").read_text().count("\n"),
    }


def test_a_node_leaves_nothing_on_the_machine(
    control_plane: ControlPlane, real_node: RealNode
) -> None:
    """A second node runs a pod and stops: no cgroup, link, mount, file or setting is left."""
    before = _host_state()
    node = RealNode(control_plane, real_node.node_bin, real_node.images, name=f"{real_node.name}-b")
    with node:
        cgroups = [CGROUP_ROOT / h / node.cgroup_path.strip("/") for h in ("memory", "cpu", "pids")]
        control_plane.create_namespace(ns := f"e2e-{node.name}")
        try:
            control_plane.api(
                "POST", f"/api/v1/namespaces/{ns}/pods", pod("p", node.name, ["sh", "-c", "true"])
            )
            wait_for(
                lambda: pod_phase(control_plane, ns, "p") == "Succeeded", timeout=60, what="pod"
            )
            during = _host_state()
            assert node.bridge in during["links"]
        finally:
            control_plane.delete_namespace(ns)
    assert not [c for c in cgroups if c.exists()]
    assert not node.root.exists()
    assert _host_state() == before


#: Where device nodes of drakit's accelerators and NICs live in a container.
DEVICE_DIRS = ("/dev/nvidia", "/dev/infiniband/", "/dev/dri/", "/dev/kfd")


def _claim_edits(dirs: NodeDirs, uid: str) -> tuple[set[str], set[str]]:
    """The device node paths and env entries of every CDI device of the claim ``uid``."""
    nodes: set[str] = set()
    env: set[str] = set()
    for spec in dirs.cdi_specs().values():
        if uid not in json.dumps(spec):
            continue
        for edits in [spec.get("containerEdits") or {}] + [
            d["containerEdits"] for d in spec["devices"]
        ]:
            nodes |= {n["path"] for n in edits.get("deviceNodes") or []}
            env |= set(edits.get("env") or [])
    return nodes, env


@pytest.mark.parametrize(
    ("device_class", "expect"),
    [
        ("nvidia-gpu", ("/dev/nvidiactl", "NVIDIA_VISIBLE_DEVICES")),
        ("amd-ainic", ("/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs")),
        ("gpu-nic-pair", ("/dev/nvidiactl", "/dev/infiniband/rdma_cm")),
    ],
)
def test_a_container_sees_exactly_its_claims_device_nodes_and_env(
    control_plane: ControlPlane,
    real_node: RealNode,
    drakit: dict[str, Any],
    namespace: str,
    device_class: str,
    expect: tuple[str, ...],
) -> None:
    """GPU, NIC and GPU-NIC pair claims: every node of the claim's CDI spec is a character
    device in the container, no other accelerator or RDMA node is, and the spec's env is set;
    a GPU's container gets the driver's ``libcuda.so.1`` (bind-mounted by runc from the spec)."""
    cp = control_plane
    claim_template(cp, namespace, "dev", drakit["classes"][device_class])
    log = run_pod(
        cp,
        real_node,
        namespace,
        "dev",
        "find /dev -type c | sort; env | sort; cat /usr/local/nvidia/lib64/libcuda.so.1 || true",
        {"d": {"resourceClaimTemplateName": "dev"}},
    )
    uid = pod_claim(cp, namespace, "dev")["metadata"]["uid"]
    # the driver's libraries come with a GPU's spec (plain CDI: nothing else would bring them);
    # the simulated libcuda is a stand-in that names itself, mounted under its soname
    has_libcuda = "simulated libcuda.so." in log
    assert has_libcuda == (device_class != "amd-ainic"), log
    nodes, env = _claim_edits(drakit["dirs"], uid)
    seen = {line for line in log.splitlines() if line.startswith(DEVICE_DIRS)}
    assert nodes, f"the claim's CDI spec has no device nodes: {drakit['dirs'].cdi_specs()}"
    assert seen == nodes, log
    container_env = {f"{k}={v}" for k, v in env_of(log).items()}
    assert env <= container_env, sorted(env - container_env)
    text = "\n".join(sorted(nodes | env))
    assert all(e in text for e in expect), text
    if device_class == "nvidia-gpu":
        # The very GPU the scheduler allocated: its UUID as published, its minor as NVML says.
        (result,) = pod_claim(cp, namespace, "dev")["status"]["allocation"]["devices"]["results"]
        uuid_ = _published_attribute(cp, real_node.name, result["device"], "uuid")
        gpus = load_nvml_description(real_node.root / "sim").devices
        (minor,) = [g.minor_number for g in gpus if g.uuid == uuid_]
        assert env_of(log)["NVIDIA_VISIBLE_DEVICES"] == uuid_
        assert {n for n in seen if re.fullmatch(r"/dev/nvidia\d+", n)} == {f"/dev/nvidia{minor}"}


def _published_attribute(cp: ControlPlane, node: str, device: str, name: str) -> Any:
    slices = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")
    for item in slices["items"]:
        for dev in item["spec"].get("devices") or []:
            if dev["name"] == device:
                return next(iter(dev["attributes"][name].values()))
    raise AssertionError(f"device {device} not published on {node}")


@pytest.fixture(scope="module")
def nvidia_ctk_bin() -> Path:
    """The real ``nvidia-ctk`` and ``nvidia-cdi-hook`` (``hack/nvidia-ctk/build.sh``, cached)."""
    script = Path(__file__).resolve().parents[2] / "hack" / "nvidia-ctk" / "build.sh"
    proc = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(f"{script} failed: {proc.stderr.strip()[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def test_a_gpu_container_gets_the_toolkits_files_and_runc_runs_its_hooks(
    control_plane: ControlPlane,
    real_node: RealNode,
    drakit: dict[str, Any],
    namespace: str,
    nvidia_ctk_bin: Path,
) -> None:
    """``driver_files: toolkit``: the real ``nvidia-ctk cdi generate`` (management mode) over the
    simulated driver root; runc runs the spec's real ``nvidia-cdi-hook`` hooks (create-symlinks,
    update-ldcache with the host's ldconfig, enable-cuda-compat) and the container starts with
    the libraries at their own paths and the link the hook made."""
    cp, root, plugins = control_plane, drakit["root"], drakit["plugins"]
    hook = root / "usr" / "bin" / "nvidia-cdi-hook"
    before = dict(plugins["nvidia_gpu"])
    lib = "/usr/lib/x86_64-linux-gnu"
    version = load_nvml_description(root).driver_version
    try:
        hook.write_bytes((nvidia_ctk_bin / "nvidia-cdi-hook").read_bytes())
        hook.chmod(0o755)
        plugins["nvidia_gpu"] = {
            **before,
            "driver_files": "toolkit",
            "nvidia_ctk": str(nvidia_ctk_bin / "nvidia-ctk"),
        }
        drakit["proc"].terminate()
        drakit["proc"].close()
        drakit["proc"] = drakit["start"]()
        claim_template(cp, namespace, "gpu", drakit["classes"]["nvidia-gpu"])
        log = run_pod(
            cp,
            real_node,
            namespace,
            "toolkit",
            f"cat {lib}/libcuda.so.{version}; readlink {lib}/libcuda.so; "
            "ls /usr/local/nvidia/lib64 2>&1",
            {"g": {"resourceClaimTemplateName": "gpu"}},
        )
        uid = pod_claim(cp, namespace, "toolkit")["metadata"]["uid"]
        [spec] = [s for s in drakit["dirs"].cdi_specs().values() if uid in json.dumps(s)]
        hooks = [
            h["args"][1]
            for edits in [spec.get("containerEdits") or {}]
            + [d["containerEdits"] for d in spec["devices"]]
            for h in edits.get("hooks") or []
        ]
    finally:
        hook.unlink(missing_ok=True)
        plugins["nvidia_gpu"] = before
        drakit["proc"].terminate()
        drakit["proc"].close()
        drakit["proc"] = drakit["start"]()
    assert {"create-symlinks", "update-ldcache", "enable-cuda-compat"} <= set(hooks), spec
    # the toolkit's layout: the library at its own path; the link made by create-symlinks
    assert f"simulated libcuda.so.{version}" in log, log
    assert "libcuda.so.1" in log.splitlines(), log
    assert "No such file or directory" in log, log  # nothing in drakit's own layout
