"""Crash injection: ``drakit node`` killed (SIGKILL) at every named point, then restarted.

For each point in :data:`drakit.prepare.faults.CRASH_POINTS` the node runs with ``DRAKIT_CRASH_AT``
set, the kubelet stand-in makes its call (prepare, or prepare then unprepare) for a scheduled pod
whose claim uses a GPU and a share of a CPU device, and the node dies with -9 inside the call.
The node is restarted without the variable (same ``POD_UID``, state, CDI and kubelet
directories, like a container restart) and the kubelet repeats the call. The final state must
equal the no-crash state recorded once for the module: prepare returns the same CDI IDs and
writes byte-for-byte the same CDI specs; after unprepare no CDI spec and no checkpoint entry is
left. A second pod's claim, prepared before every crash, must come through untouched (no claim
lost), and no temporary file may be left behind.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, StandInResult, wait_for
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    NodeDirs,
    NodeProcess,
    create_claim_template,
    create_device_class,
    create_pod,
    kubelet_flags,
)

from drakit.prepare.faults import CRASH_POINTS

pytestmark = pytest.mark.e2e

PROFILE = "h200-8gpu-8ainic"
PLUGINS: dict[str, dict[str, Any]] = {"cpu": {}, "nvidia_gpu": {}}
CPU, GPU = DRIVERS["cpu"], DRIVERS["nvidia_gpu"]


@dataclass
class Baseline:
    """What a prepare without a crash produced for the victim's claim."""

    uid: str
    cdi_ids: list[str]
    specs: dict[str, dict[str, Any]]
    results: dict[str, list[dict[str, Any]]]


@dataclass
class Crashing:
    """The module's node, pods and the no-crash baseline."""

    cp: ControlPlane
    standin: KubeletStandIn
    node: str
    namespace: str
    dirs: NodeDirs
    sysfs: Path
    baseline: Baseline
    bystander_uid: str = ""
    bystander: dict[str, Any] = field(default_factory=dict)

    def process(self, name: str, env: dict[str, str] | None = None) -> NodeProcess:
        return NodeProcess(
            kubeconfig=self.cp.kubeconfig,
            node_name=self.node,
            dirs=self.dirs,
            plugins=PLUGINS,
            sysfs_root=self.sysfs,
            instance_id="crash",
            env=env,
            name=name,
        )

    def kubelet(self, op: str, pod: str, state: str) -> StandInResult:
        flags = kubelet_flags(self.dirs, self.node, f"{self.namespace}/{pod}", state=state)
        return self.standin.run(op, *flags, f"--driver={CPU}", f"--driver={GPU}")

    def claim_state(self, uid: str) -> dict[str, Any]:
        """The claim's checkpoint phase per driver and its CDI files."""
        return {
            "phases": {d: self.dirs.checkpoint(d).get(uid, {}).get("phase") for d in (CPU, GPU)},
            "cdi": [n for n in self.dirs.cdi_files() if uid in n],
        }

    def bystander_state(self) -> dict[str, Any]:
        specs = {n: s for n, s in self.dirs.cdi_specs().items() if self.bystander_uid in n}
        records = {d: self.dirs.checkpoint(d).get(self.bystander_uid) for d in (CPU, GPU)}
        return {"specs": specs, "records": records}


def _cdi_ids(result: StandInResult) -> list[str]:
    ids: list[str] = result.doc["containers"]["main"]["cdi_devices"]
    return sorted(ids)


def _pod(cp: ControlPlane, namespace: str, name: str, node: str) -> str:
    """Create a pod with a GPU + 2-CPU template claim on ``node``; return its claim's UID."""
    create_pod(cp, namespace, name, node, template="gpu-and-cpus", ref="d", containers=("main",))

    def claim_uid() -> str | None:
        pod = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
        if not pod["spec"].get("nodeName") or not statuses:
            return None
        claim = cp.api(
            "GET",
            f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{statuses[0]['resourceClaimName']}",
        )
        uid: str = claim["metadata"]["uid"]
        return uid

    uid: str = wait_for(claim_uid, timeout=60, what=f"pod {name} to be scheduled")
    return uid


@pytest.fixture(scope="module")
def crashing(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    profile_root: Callable[[str], Path],
) -> Iterator[Crashing]:
    cp = control_plane
    suffix = uuid.uuid4().hex[:6]
    node, namespace = f"crash-{suffix}", f"e2e-crash-{suffix}"
    classes = {CPU: f"crash-cpu-{suffix}", GPU: f"crash-gpu-{suffix}"}
    cp.create_node(node)
    cp.create_namespace(namespace)
    dirs = NodeDirs.create("dk-crash-")
    try:
        for driver, cls in classes.items():
            create_device_class(cp, cls, driver)
        gpu_and_cpus = {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": classes[GPU]}},
                {
                    "name": "cpus",
                    "exactly": {
                        "deviceClassName": classes[CPU],
                        "capacity": {"requests": {"cpu": "2"}},
                    },
                },
            ]
        }
        create_claim_template(cp, namespace, "gpu-and-cpus", gpu_and_cpus)
        env = Crashing(
            cp=cp,
            standin=kubelet_standin,
            node=node,
            namespace=namespace,
            dirs=dirs,
            sysfs=profile_root(PROFILE),
            baseline=Baseline("", [], {}, {}),
        )
        with env.process("baseline") as proc:
            proc.wait_ready(timeout=60)
            env.bystander_uid = _pod(cp, namespace, "bystander", node)
            victim_uid = _pod(cp, namespace, "victim", node)
            by = env.kubelet("prepare", "bystander", "k-bystander")
            assert by.exit_code == 0, (by.doc, by.stderr[-2000:])
            env.bystander = env.bystander_state()
            assert len(env.bystander["specs"]) == len(PLUGINS)
            # The no-crash state of the victim's claim.
            first = env.kubelet("prepare", "victim", "k-baseline")
            assert first.exit_code == 0, (first.doc, first.stderr[-2000:])
            env.baseline = Baseline(
                uid=victim_uid,
                cdi_ids=_cdi_ids(first),
                specs={n: s for n, s in dirs.cdi_specs().items() if victim_uid in n},
                results={d: dirs.checkpoint(d)[victim_uid]["results"] for d in (CPU, GPU)},
            )
            assert len(env.baseline.specs) == len(PLUGINS)
            done = env.kubelet("unprepare", "victim", "k-baseline")
            assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
            assert env.claim_state(victim_uid) == {"phases": {CPU: None, GPU: None}, "cdi": []}
        yield env
    finally:
        cp.delete_namespace(namespace)
        for cls in classes.values():
            cp.api("DELETE", f"{RESOURCE}/deviceclasses/{cls}")
        cp.delete_node(node)
        dirs.remove()


def _error_line(result: StandInResult) -> str:
    text = str(result.doc.get("error", ""))
    return text.rsplit("rpc error: ", maxsplit=1)[-1][:120]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_killed_at_point_then_restarted_reaches_the_no_crash_state(
    crashing: Crashing, point: str
) -> None:
    env, base = crashing, crashing.baseline
    state = f"k-{point}"
    preparing = point.startswith("prepare-")
    with env.process(f"{point}-crash", {"DRAKIT_CRASH_AT": point}) as doomed:
        if not preparing:
            ok = env.kubelet("prepare", "victim", state)
            assert ok.exit_code == 0, (ok.doc, ok.stderr[-2000:])
            assert _cdi_ids(ok) == base.cdi_ids
        call = env.kubelet("prepare" if preparing else "unprepare", "victim", state)
        assert call.exit_code == 1, call.doc  # the kubelet saw the plugin go away
        assert doomed.wait(timeout=30) == -signal.SIGKILL
    between = env.claim_state(base.uid)

    with env.process(f"{point}-restart") as proc:
        again = env.kubelet("prepare" if preparing else "unprepare", "victim", state)
        assert again.exit_code == 0, (again.doc, again.stderr[-2000:], proc.log_tail())
        if preparing:
            assert _cdi_ids(again) == base.cdi_ids
            specs = {n: s for n, s in env.dirs.cdi_specs().items() if base.uid in n}
            assert specs == base.specs
            for driver in (CPU, GPU):
                record = env.dirs.checkpoint(driver)[base.uid]
                assert record["phase"] == "PrepareCompleted"
                assert record["results"] == base.results[driver]
            # Leave the claim released for the next point, through the same kubelet state.
            done = env.kubelet("unprepare", "victim", state)
            assert done.exit_code == 0, (done.doc, done.stderr[-2000:])
        assert env.claim_state(base.uid) == {"phases": {CPU: None, GPU: None}, "cdi": []}
        assert env.bystander_state() == env.bystander  # no claim lost, nothing changed
        assert proc.terminate() == 0
    leftovers = [n for n in env.dirs.cdi_files() if n not in env.bystander["specs"]]
    leftovers += [
        p.name
        for d in (CPU, GPU)
        for p in (env.dirs.state_dir / d).iterdir()
        if p.name not in {"checkpoint.json", "serialize.lock", "device-metadata"}
    ]
    # device metadata files (KEP-5304): the bystander's only; the victim's went with its claim
    leftovers += [
        f"{d}/device-metadata/{p.name}"
        for d in (CPU, GPU)
        if (env.dirs.state_dir / d / "device-metadata").is_dir()
        for p in (env.dirs.state_dir / d / "device-metadata").iterdir()
        if p.name != env.bystander_uid
    ]
    assert leftovers == []
    print(f"\n[crash {point}] kubelet: {_error_line(call)}; after kill: {between}")
