"""Health stream, metrics and probes of a running ``drakit node``.

* ``/healthz`` answers as soon as the node serves; ``/readyz`` answers 503 (naming the
  unpublished slices) until the ResourceSlices are in the API server, then 200 (the API server is
  slowed down through a proxy so the window is wide enough to see).
* Every driver's health stream (v1, read by the kubelet stand-in with strict decoding) starts
  with the full list of the devices that driver published, all healthy.
* ``/metrics`` carries the documented ``drakit_*`` series: per-driver prepare and unprepare
  histograms with success and error results after real kubelet calls, and the published device
  counts.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    NodeDirs,
    Proxy,
    Running,
    allocated_claim,
    create_device_class,
    kubeconfig_via,
    published,
    running_node,
)

pytestmark = pytest.mark.e2e

PROFILE = "h200-8gpu-8ainic"
CPU = DRIVERS["cpu"]


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane, profile_root: Callable[[str], Path]) -> Iterator[Running]:
    cp = control_plane
    dirs = NodeDirs.create("dk-health-")
    proxy = Proxy(("127.0.0.1", cp.api_port))
    proxy.start()
    try:
        with (
            proxy.slowed(0.5),  # each API reply takes >= 0.5 s while starting
            running_node(
                cp,
                "health",
                {p: {} for p in DRIVERS},
                sysfs_root=profile_root(PROFILE),
                kubeconfig=kubeconfig_via(cp, proxy.port, dirs.root / "kubeconfig"),
                dirs=dirs,
                ready_timeout=None,
            ) as node,
        ):
            seen = [node.proc.http("/readyz")]
            node.proc.wait_ready(timeout=90)
            seen.append(node.proc.http("/readyz"))
            proxy.delay = 0.0
            node.facts["readyz"] = seen
            yield node
    finally:
        proxy.stop()


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample in a Prometheus text exposition."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_readyz_turns_ready_when_slices_are_published(
    control_plane: ControlPlane, node: Running
) -> None:
    first, last = node.readyz
    assert first[0] == 503, first  # serving, but the slow API server has no slices yet
    assert "ResourceSlices not published" in first[1]
    assert last == (200, "ok\n")
    assert set(published(control_plane, node.name)) == set(node.proc.drivers)
    assert node.proc.http("/healthz") == (200, "ok\n")


def test_health_stream_lists_every_published_device(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running
) -> None:
    devices = published(control_plane, node.name)
    for driver in node.proc.drivers:
        got = kubelet_standin.run(
            "raw-health",
            f"--endpoint={node.proc.dra_socket(driver)}",
            "--service=v1",
            "--seconds=10",
            "--max-responses=1",
        )
        assert got.exit_code == 0, got.doc
        assert got.doc["unknown_fields"] == []
        [first] = got.doc["responses"]
        listed = [(d["device"]["pool_name"], d["device"]["device_name"]) for d in first["devices"]]
        assert sorted(listed) == sorted((node.name, d) for d in devices[driver]), driver
        assert {d["health"] for d in first["devices"]} == {"HEALTHY"}


def test_metrics_after_real_prepares(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running, namespace: str
) -> None:
    cls = f"health-cpu-{uuid.uuid4().hex[:6]}"
    create_device_class(control_plane, cls, CPU)
    try:
        good = allocated_claim(
            control_plane,
            namespace,
            "good",
            [
                {
                    "request": "cpus",
                    "driver": CPU,
                    "pool": node.name,
                    "device": "cpu-numa-0",
                    "shareID": str(uuid.uuid4()),
                    "consumedCapacity": {"cpu": "2"},
                }
            ],
            device_class=cls,
        )
    finally:
        control_plane.api("DELETE", f"{RESOURCE}/deviceclasses/{cls}")
    claims = [
        f"--claim={namespace}/good/{good['metadata']['uid']}",
        f"--claim={namespace}/missing/{uuid.uuid4()}",
    ]
    endpoint = f"--endpoint={node.proc.dra_socket(CPU)}"
    for op in ("raw-prepare", "raw-unprepare"):
        call = kubelet_standin.run(op, endpoint, "--service=v1", *claims)
        assert call.exit_code == 0, call.doc

    status, text = node.proc.http("/metrics")
    assert status == 200
    got = samples(text)
    on = f'driver="{CPU}"'
    assert got[f'drakit_prepare_seconds_count{{{on},result="success"}}'] >= 1
    assert got[f'drakit_prepare_seconds_count{{{on},result="error"}}'] >= 1
    assert got[f'drakit_unprepare_seconds_count{{{on},result="success"}}'] >= 2
    assert got[f'drakit_prepare_seconds_bucket{{{on},le="+Inf",result="success"}}'] >= 1
    devices = published(control_plane, node.name)
    for driver, names in devices.items():
        assert got[f'drakit_devices_published{{driver="{driver}"}}'] == len(names)
    assert re.search(r"^# TYPE drakit_prepare_seconds histogram$", text, re.MULTILINE)


def test_slice_writes_and_prepared_claims_are_exported(node: Running) -> None:
    got = samples(node.proc.http("/metrics")[1])
    assert got.get('drakit_slice_writes_total{op="create"}', 0) >= len(node.proc.drivers)
    assert f'drakit_prepared_claims{{driver="{CPU}"}}' in got
    assert got[f'drakit_devices_rejected{{driver="{CPU}"}}'] == 0  # exported, none left out
