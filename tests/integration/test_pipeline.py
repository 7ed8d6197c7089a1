"""The prepare/unprepare pipeline on simulated hardware, with claims from an in-memory source.

These run the real DriverState, PluginHost, backends, checkpoint and CDI writer; only the API
server is replaced (by drakit.testing.ClaimStore). The same behaviour against the real
control plane and the kubelet stand-in is in tests/e2e.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.integration.claims import NODE, claim, make_state

from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import ClaimRef
from drakit.prepare.checkpoint import ClaimPhase
from drakit.prepare.pipeline import MAX_OPAQUE_BYTES, DriverState
from drakit.sim import make_device_node
from drakit.testing import ClaimStore

GPU = "gpu.nvidia.drakit.io"
CPU = "cpu.drakit.io"


def gpu(device: str, request: str = "gpus", pool: str = NODE) -> dict[str, Any]:
    return {"request": request, "driver": GPU, "pool": pool, "device": device}


def test_prepare_returns_cdi_ids_and_writes_one_spec(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    ref = claim(
        claims,
        [
            gpu("gpu-0"),
            gpu("gpu-1"),
            {"request": "x", "driver": "other.io", "pool": NODE, "device": "d"},
        ],
    )
    res = state.prepare([ref])[ref.uid]
    assert res.error == ""
    assert [d.device for d in res.devices] == ["gpu-0", "gpu-1"]  # other drivers' results skipped
    ids = [i for d in res.devices for i in d.cdi_device_ids]
    assert ids == [f"k8s.{GPU}/claim={ref.uid}-gpu-0", f"k8s.{GPU}/claim={ref.uid}-gpu-1"]
    specs = list((tmp_path / "cdi").iterdir())
    assert [p.name for p in specs] == [f"k8s.{GPU}-claim_{ref.uid}.json"]
    spec = json.loads(specs[0].read_text())
    assert spec["kind"] == f"k8s.{GPU}/claim"
    # hostPath (the simulated root is the device root) needs spec version 0.5.0
    assert spec["cdiVersion"] == "0.5.0"
    root = host.node.sysfs_root
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": p, "hostPath": f"{root}{p}"}
        for p in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
    ]
    # the driver's files both GPUs carry are written once, in the spec's own edits
    shared = [m["containerPath"] for m in spec["containerEdits"]["mounts"]]
    assert any("libcuda.so" in p for p in shared), shared
    for dev in spec["devices"]:
        assert not {m["containerPath"] for m in dev["containerEdits"].get("mounts", [])} & set(
            shared
        )
    # and the checkpoint keeps the plugins' state, not the edits the spec holds
    record = json.loads((tmp_path / "state" / GPU / "checkpoint.json").read_text())["claims"]
    prepared = record[ref.uid]["prepared"]
    devices = [d for devs in prepared.values() for d in devs]
    assert len(devices) == 2
    for d in devices:
        assert d["edits"] == {"env": [], "device_nodes": [], "mounts": [], "hooks": []}
        assert d["state"]["uuid"]


def test_prepare_is_idempotent_and_unprepare_cleans_up(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    ref = claim(claims, [gpu("gpu-2")])
    first = state.prepare([ref])[ref.uid]
    spec = tmp_path / "cdi" / f"k8s.{GPU}-claim_{ref.uid}.json"
    mtime = spec.stat().st_mtime_ns
    again = state.prepare([ref])[ref.uid]
    assert again == first
    assert spec.stat().st_mtime_ns == mtime  # no side effect repeated
    assert state.unprepare([ref])[ref.uid].error == ""
    assert state.unprepare([ref])[ref.uid].error == ""  # idempotent
    assert not spec.exists()
    assert state.prepared_claims() == {}


def test_unprepare_of_unknown_and_deleted_claims_succeeds(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    ref = claim(claims, [gpu("gpu-3")])
    assert state.prepare([ref])[ref.uid].error == ""
    claims.claims.clear()  # the claim object is gone from the API server
    assert state.unprepare([ref])[ref.uid].error == ""
    ghost = ClaimRef(namespace="ns", name="never", uid=str(uuid.uuid4()))
    assert state.unprepare([ghost])[ghost.uid].error == ""


def test_one_bad_claim_fails_alone(host: PluginHost, claims: ClaimStore, tmp_path: Path) -> None:
    state = make_state(host, claims, tmp_path)
    good = claim(claims, [gpu("gpu-4")], name="good")
    unknown_device = claim(claims, [gpu("gpu-99", request="big")], name="bad-device")
    unknown_pool = claim(claims, [gpu("gpu-5", pool="elsewhere")], name="bad-pool")
    missing = ClaimRef(namespace="ns", name="missing", uid=str(uuid.uuid4()))
    replaced = claim(claims, [gpu("gpu-6")], name="replaced")
    replaced_ref = ClaimRef(namespace="ns", name="replaced", uid=str(uuid.uuid4()))
    assert replaced.uid != replaced_ref.uid
    out = state.prepare([good, unknown_device, unknown_pool, missing, replaced_ref])
    assert out[good.uid].error == ""
    err = out[unknown_device.uid].error
    assert "claim ns/bad-device" in err
    assert "request 'big'" in err
    assert "gpu-99" in err
    assert "results[0]" in err
    assert "pool 'elsewhere'" in out[unknown_pool.uid].error
    assert "not found" in out[missing.uid].error
    assert "replaced" in out[replaced_ref.uid].error
    assert set(state.prepared_claims()) == {good.uid}


def cpu_config(
    params: dict[str, Any], requests: list[str] | None = None, source: str = "FromClaim"
) -> dict[str, Any]:
    return {
        "source": source,
        "requests": requests or [],
        "opaque": {"driver": CPU, "parameters": params},
    }


def cpu_result(request: str = "cpus", n: int = 4, device: str = "cpu-numa-0") -> dict[str, Any]:
    return {
        "request": request,
        "driver": CPU,
        "pool": NODE,
        "device": device,
        "consumedCapacity": {"cpu": str(n)},
    }


def test_config_errors_name_claim_request_and_field(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path, driver=CPU)
    ok = claim(
        claims,
        [cpu_result()],
        [
            cpu_config(
                {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig", "policy": "spread"}
            )
        ],
    )
    bad_field = claim(
        claims,
        [cpu_result()],
        [
            cpu_config(
                {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig", "policy": "sideways"},
                requests=["cpus"],
            )
        ],
        name="bad-field",
    )
    unowned = claim(
        claims,
        [cpu_result()],
        [cpu_config({"apiVersion": "example.com/v1", "kind": "Mystery"})],
        name="unowned",
    )
    huge = claim(
        claims,
        [cpu_result()],
        [
            cpu_config(
                {
                    "apiVersion": "cpu.drakit.io/v1alpha1",
                    "kind": "CpuConfig",
                    "pad": "x" * (MAX_OPAQUE_BYTES + 1),
                }
            )
        ],
        name="huge",
    )
    not_object = claim(
        claims,
        [cpu_result()],
        [{"source": "FromClass", "requests": [], "opaque": {"driver": CPU, "parameters": [1]}}],
        name="not-object",
    )
    out = state.prepare([ok, bad_field, unowned, huge, not_object])
    assert out[ok.uid].error == ""
    e = out[bad_field.uid].error
    assert "claim ns/bad-field" in e
    assert "config[0]" in e
    assert "requests ['cpus']" in e
    assert "policy" in e
    assert "sideways" in e
    assert "no plugin of driver" in out[unowned.uid].error
    assert "Mystery" in out[unowned.uid].error
    assert "bytes; at most 10240" in out[huge.uid].error
    assert "must be a JSON object" in out[not_object.uid].error


def test_claim_config_wins_over_class_config(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path, driver=CPU)
    base = {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig"}
    ref = claim(
        claims,
        [cpu_result(n=8, device="cpu-numa-1")],
        [
            cpu_config({**base, "policy": "spread"}, source="FromClaim"),
            cpu_config({**base, "policy": "packed"}, source="FromClass"),
        ],
    )
    assert state.prepare([ref])[ref.uid].error == ""
    rec = state.prepared_claims()[ref.uid]
    cpus = rec.prepared["cpu"][0].state["cpus"]
    # spread (distribute-cpus-across-cores) takes one thread per core: no SMT siblings together
    from drakit.cpuset import parse_cpulist

    chosen = parse_cpulist(cpus)
    topo = host.backends["cpu"].topology  # type: ignore[attr-defined]
    assert len({topo.info(c).core_id for c in chosen}) == len(chosen) == 8


def test_shared_group_device_gives_disjoint_cpus_under_concurrency(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path, driver=CPU)
    refs = [claim(claims, [cpu_result(n=6, device="cpu-numa-0")]) for _ in range(8)]
    results: dict[str, str] = {}

    def run(r: ClaimRef) -> None:
        out = state.prepare([r])[r.uid]
        results[r.uid] = out.error

    threads = [threading.Thread(target=run, args=(r,)) for r in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(e == "" for e in results.values()), results
    from drakit.cpuset import parse_cpulist

    sets = [
        parse_cpulist(rec.prepared["cpu"][0].state["cpus"])
        for rec in state.prepared_claims().values()
    ]
    assert len(sets) == 8
    assert all(len(s) == 6 for s in sets)
    union: set[int] = set()
    for s in sets:
        assert not (union & s)
        union |= s
    assert not (union & {0, 1})  # reserved CPUs are never handed out


def test_corrupt_checkpoint_is_moved_aside_and_serving_continues(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    repairs: list[tuple[str, int]] = []
    state = make_state(host, claims, tmp_path, boot_id="b", repairs=repairs, device_metadata=False)
    ref = claim(claims, [gpu("gpu-1")])
    assert state.prepare([ref])[ref.uid].error == ""
    cp = tmp_path / "state" / GPU / "checkpoint.json"
    data = json.loads(cp.read_text())
    data["claims"][ref.uid]["name"] = "tampered"  # checksum no longer matches
    cp.write_text(json.dumps(data))
    other = claim(claims, [gpu("gpu-2")])
    assert state.prepare([other])[other.uid].error == ""
    assert repairs == [("corrupt", 1), ("recovered", 1)]  # the claim rebuilt from its spec
    aside = [p.name for p in cp.parent.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1
    # the claim from the lost checkpoint can still be unprepared: its CDI spec goes by name
    assert state.unprepare([ref])[ref.uid].error == ""
    assert not (tmp_path / "cdi" / f"k8s.{GPU}-claim_{ref.uid}.json").exists()


def test_reboot_demotes_claims_and_next_prepare_rewrites_cdi(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path, boot_id="before")
    ref = claim(claims, [gpu("gpu-7")])
    first = state.prepare([ref])[ref.uid]
    for p in (tmp_path / "cdi").iterdir():  # tmpfs is empty after a reboot
        p.unlink()
    after = make_state(host, claims, tmp_path, boot_id="after")
    assert after.prepared_claims()[ref.uid].phase == ClaimPhase.PREPARE_STARTED
    assert after.prepare([ref])[ref.uid] == first
    assert (tmp_path / "cdi" / f"k8s.{GPU}-claim_{ref.uid}.json").exists()
    assert after.prepared_claims()[ref.uid].phase == ClaimPhase.PREPARE_COMPLETED


def test_thousand_claims_with_32_in_flight_leave_nothing_behind(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    state = make_state(host, claims, tmp_path, driver=CPU)
    refs = [claim(claims, [cpu_result(n=2, device=f"cpu-numa-{i % 2}")]) for i in range(1000)]

    def cycle(r: ClaimRef) -> str:
        p = state.prepare([r])[r.uid].error
        u = state.unprepare([r])[r.uid].error
        return p + u

    with ThreadPoolExecutor(max_workers=32) as pool:
        errors = [e for e in pool.map(cycle, refs) if e]
    assert errors == []
    assert state.prepared_claims() == {}
    assert list((tmp_path / "cdi").iterdir()) == []


def test_exclusive_device_is_never_prepared_for_two_claims(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    state = make_state(host, claims, tmp_path)
    first = claim(claims, [gpu("gpu-0")], name="first")
    second = claim(claims, [gpu("gpu-0")], name="second")
    assert state.prepare([first])[first.uid].error == ""
    err = state.prepare([second])[second.uid].error
    assert "still prepared for claim ns/first" in err
    assert second.uid not in state.prepared_claims()
    assert state.unprepare([first])[first.uid].error == ""
    assert state.prepare([second])[second.uid].error == ""


def test_backends_sharing_one_driver_name_are_routed_to_their_owner(tmp_path: Path) -> None:
    shared = "node.example.com"
    settings = DrakitSettings(
        profile="minimal-1s",
        node_name=NODE,
        plugins={"cpu": {"driver": shared}, "example_fpga": {"driver": shared, "count": 2}},
    )
    claims = ClaimStore()
    with open_host(settings) as h:
        build_inventory(h)
        assert h.plugins_for_driver(shared) == ["cpu", "example_fpga"]
        # the example backend has no simulated part: its device node is made here, as one would
        make_device_node(h.node.sysfs_root, "/dev/fpga-1")
        state = DriverState(
            shared, h, claims, state_dir=tmp_path / "s", cdi_dir=tmp_path / "c", boot_id="b"
        )
        ref = claim(
            claims,
            [
                {
                    "request": "cpus",
                    "driver": shared,
                    "pool": NODE,
                    "device": "cpu-numa-0",
                    "consumedCapacity": {"cpu": "2"},
                },
                {"request": "fpga", "driver": shared, "pool": NODE, "device": "fpga-1"},
            ],
        )
        res = state.prepare([ref])[ref.uid]
        assert res.error == ""
        rec = state.prepared_claims()[ref.uid]
        assert sorted(rec.prepared) == ["cpu", "example_fpga"]
        assert [p.device for p in rec.prepared["example_fpga"]] == ["fpga-1"]
        spec = json.loads((tmp_path / "c" / f"k8s.{shared}-claim_{ref.uid}.json").read_text())
        assert [d["name"] for d in spec["devices"]] == [
            f"{ref.uid}-cpu-numa-0",
            f"{ref.uid}-fpga-1",
        ]
        assert state.unprepare([ref])[ref.uid].error == ""


def test_unhealthy_devices_are_streamed_and_tainted_when_configured(tmp_path: Path) -> None:
    from drakit.node.daemon import UNHEALTHY_TAINT, Node

    settings = DrakitSettings(
        profile="minimal-1s",
        node_name=NODE,
        kubelet_dir=tmp_path / "k",
        cdi_dir=tmp_path / "cdi",
        state_dir=tmp_path / "state",
        metrics={"enabled": False},
        health={"taint_unhealthy": True},
        plugins={"example_fpga": {"count": 3, "unhealthy": ["fpga-1"]}},
    )
    node = Node(settings, claims=ClaimStore(), serve_kubelet=False, boot_id="b")
    node.start()
    try:
        node.poll_health()
        snapshot = {h.device: h.health for h in node.health["fpga.example.com"].snapshot()}
        assert snapshot == {"fpga-0": "Healthy", "fpga-1": "Unhealthy", "fpga-2": "Healthy"}
        [pool] = node._desired()
        taints = {d.name: d.taints for d in pool.devices}
        assert taints == {"fpga-0": (), "fpga-1": (UNHEALTHY_TAINT,), "fpga-2": ()}
    finally:
        node.stop(grace=0)


@pytest.mark.parametrize(
    ("first_device_name", "edits", "version"),
    [
        ("abc-gpu-0", {}, "0.3.0"),
        ("1bc-gpu-0", {}, "0.5.0"),
        (
            "abc-gpu-0",
            {"mounts": [{"hostPath": "/a", "containerPath": "/a", "type": "bind"}]},
            "0.4.0",
        ),
        ("abc-gpu-0", {"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y"}]}, "0.5.0"),
        ("abc-gpu-0", {"netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}]}, "1.1.0"),
    ],
)
def test_cdi_version_is_the_lowest_that_expresses_the_spec(
    first_device_name: str, edits: dict[str, Any], version: str
) -> None:
    from drakit.prepare.cdi import min_cdi_version

    spec = {
        "kind": "k8s.x/claim",
        "devices": [{"name": first_device_name, "containerEdits": edits}],
    }
    assert min_cdi_version(spec) == version


def test_cdi_specs_are_written_whatever_json_their_edits_hold(tmp_path: Path) -> None:
    """orjson writes specs; what only the standard encoder takes (an integer beyond 64 bits)
    is written too, and non-ASCII text stays readable."""
    from drakit.models import CdiEdits
    from drakit.prepare.cdi import CdiWriter
    from drakit.sim import make_device_node

    root = tmp_path / "root"
    make_device_node(root, "/dev/\u00e4")
    writer = CdiWriter(tmp_path / "cdi", "x.drakit.io", device_root=root)
    spec = writer.build("u2", [("d", CdiEdits(device_nodes=({"path": "/dev/\u00e4"},)))])
    name = writer.write("u2", spec)
    got = json.loads((tmp_path / "cdi" / name).read_text(encoding="utf-8"))
    assert got["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/\u00e4", "hostPath": f"{root}/dev/\u00e4"}
    ]
    big = {"cdiVersion": "0.3.0", "kind": "k8s.x/claim", "devices": [{"name": "u1-d", "n": 2**70}]}
    name = writer.write("u1", big)
    assert json.loads((tmp_path / "cdi" / name).read_text(encoding="utf-8")) == big


def test_a_device_node_missing_on_the_host_fails_the_claim_until_it_is_there(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    """The driver has not made /dev/nvidia5 (yet): runc could not create it in a container."""
    node = Path(f"{host.node.sysfs_root}/dev/nvidia5")
    node.unlink()
    try:
        state = make_state(host, claims, tmp_path)
        ref = claim(claims, [gpu("gpu-5")])
        err = state.prepare([ref])[ref.uid].error
        assert (
            f"device 'gpu-5': device node /dev/nvidia5 (host path {node}, under device_root" in err
        )
        assert "is missing on the host" in err
        assert "set device_root" in err
        assert list((tmp_path / "cdi").glob("*.json")) == []  # no spec runc would fail on
    finally:
        make_device_node(host.node.sysfs_root, "/dev/nvidia5")
    res = state.prepare([ref])[ref.uid]  # the kubelet's retry, once the node is there
    assert res.error == ""
    assert state.unprepare([ref])[ref.uid].error == ""


def test_the_charts_device_root_flags_on_simulated_hardware_use_the_simulated_root(
    host: PluginHost, claims: ClaimStore, tmp_path: Path
) -> None:
    """The chart passes --device-root=/ and a mount of the host's /dev; a simulated node's
    nodes are in its own root, which is read in place."""
    state = make_state(
        host,
        claims,
        tmp_path,
        boot_id="b",
        device_metadata=False,
        device_root=Path("/"),
        device_root_mount=tmp_path / "not-mounted",
    )
    ref = claim(claims, [gpu("gpu-6")])
    assert state.prepare([ref])[ref.uid].error == ""
    spec = json.loads((tmp_path / "cdi" / f"k8s.{GPU}-claim_{ref.uid}.json").read_text())
    node = spec["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node == {"path": "/dev/nvidia6", "hostPath": f"{host.node.sysfs_root}/dev/nvidia6"}
    assert state.unprepare([ref])[ref.uid].error == ""
