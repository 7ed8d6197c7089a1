"""``status.devices`` networkData through server-side apply, against the real API server.

``KubeClient.apply_claim_device_status`` is one PATCH per claim; ``status.devices`` is a list map
(driver, pool, device, shareID), so each driver's field manager owns its own entries. The
pipeline's writer (``DriverState``) queues that PATCH after the prepare reply, skips it when the
claim already shows the same entries, and rewrites the checkpoint's entries at start-up.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.e2e import nodeproc
from tests.e2e.controlplane import ControlPlane, wait_for

from drakit.errors import PermanentError
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.kube import KubeClient, NotFoundError
from drakit.models import NetworkData, PreparedDevice, PreparedDeviceRef
from drakit.prepare.checkpoint import ClaimPhase, ClaimRecord
from drakit.prepare.pipeline import DriverState

pytestmark = pytest.mark.e2e

NIC = "nic.e2e.drakit.dev"
OTHER = "other.e2e.drakit.dev"
POOL = "pool-a"


def allocated_claim(
    cp: ControlPlane, namespace: str, devices: list[tuple[str, str, str | None]]
) -> dict[str, Any]:
    """A claim allocated (as the scheduler would) to ``(driver, device, shareID)`` results."""
    results = []
    for driver, device, share in devices:
        r: dict[str, Any] = {"request": "r", "driver": driver, "pool": POOL, "device": device}
        if share:
            r["shareID"] = share
        results.append(r)
    return nodeproc.allocated_claim(
        cp, namespace, f"c-{uuid.uuid4().hex[:8]}", results, device_class="x"
    )


def entry(driver: str, device: str, ifname: str, share: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"driver": driver, "pool": POOL, "device": device}
    if share:
        out["shareID"] = share
    out["networkData"] = {"interfaceName": ifname, "hardwareAddress": "02:00:00:00:00:01"}
    return out


def status_devices(kube: KubeClient, claim: dict[str, Any]) -> list[dict[str, Any]]:
    meta = claim["metadata"]
    got = kube.get_resource_claim(meta["namespace"], meta["name"])
    return sorted(
        (got.get("status") or {}).get("devices") or [], key=lambda e: (e["driver"], e["device"])
    )


def test_apply_merges_per_driver_and_replaces_own_entries(
    kube: KubeClient, control_plane: ControlPlane, namespace: str
) -> None:
    share = str(uuid.uuid4())
    claim = allocated_claim(
        control_plane,
        namespace,
        [(NIC, "nic-0", None), (NIC, "nic-1", share), (OTHER, "o-0", None)],
    )
    meta = claim["metadata"]
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    kube.apply_claim_device_status(ns, name, uid, [entry(OTHER, "o-0", "o0")], field_manager="o")
    mine = [entry(NIC, "nic-0", "eth0"), entry(NIC, "nic-1", "eth1", share)]
    kube.apply_claim_device_status(ns, name, uid, mine, field_manager="drakit/nic")
    got = status_devices(kube, claim)
    assert [(e["driver"], e["device"], e.get("shareID")) for e in got] == [
        (NIC, "nic-0", None),
        (NIC, "nic-1", share),
        (OTHER, "o-0", None),
    ], "the other driver's entry is kept"
    assert got[1]["networkData"]["interfaceName"] == "eth1"

    rv = kube.get_resource_claim(ns, name)["metadata"]["resourceVersion"]
    kube.apply_claim_device_status(ns, name, uid, mine, field_manager="drakit/nic")
    assert kube.get_resource_claim(ns, name)["metadata"]["resourceVersion"] == rv, (
        "applying the same entries again writes nothing"
    )

    kube.apply_claim_device_status(
        ns, name, uid, [entry(NIC, "nic-0", "eth9")], field_manager="drakit/nic"
    )
    got = status_devices(kube, claim)
    assert [(e["driver"], e["device"]) for e in got] == [(NIC, "nic-0"), (OTHER, "o-0")], (
        "an entry the manager no longer applies is removed; the other driver's stays"
    )
    assert got[0]["networkData"]["interfaceName"] == "eth9"


def _with_opaque_config(cp: ControlPlane, namespace: str, *, spaced: bool) -> dict[str, Any]:
    """A claim allocated to nic-0 whose allocation carries opaque config parameters, stored as
    compact JSON with sorted keys (kubectl) or as spaced JSON (the Python kubernetes client)."""
    sep = (", ", ": ") if spaced else (",", ":")
    base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    name = f"c-{uuid.uuid4().hex[:8]}"

    def send(method: str, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(  # noqa: S310 - the test's own API server
            cp.server + path,
            data=json.dumps(obj, separators=sep, sort_keys=not spaced).encode(),
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {cp.token}"},
        )
        with urllib.request.urlopen(req, context=cp._ssl_context(verify=True)) as resp:  # noqa: S310
            decoded: dict[str, Any] = json.loads(resp.read())
            return decoded

    spec = {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}}
    claim = send("POST", base, {"metadata": {"name": name}, "spec": spec})
    opaque = {"driver": NIC, "parameters": {"kind": "NicConfig", "interface": {"name": "net1"}}}
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": NIC, "pool": POOL, "device": "nic-0"}],
                "config": [{"source": "FromClaim", "requests": ["r"], "opaque": opaque}],
            }
        }
    }
    return send("PUT", f"{base}/{name}/status", claim)


def test_apply_on_a_claim_with_opaque_config(
    kube: KubeClient, control_plane: ControlPlane, namespace: str
) -> None:
    """Claims with a NicConfig carry opaque config in their allocation. Stored as kubectl sends
    it (compact, keys sorted), their networkData is applied; stored spaced, kube-apiserver
    1.37.2 refuses every patch of the status, and the error says why and what to do."""
    claim = _with_opaque_config(control_plane, namespace, spaced=False)
    meta = claim["metadata"]
    kube.apply_claim_device_status(
        namespace, meta["name"], meta["uid"], [entry(NIC, "nic-0", "net1")], field_manager="d"
    )
    (got,) = status_devices(kube, claim)
    assert got["networkData"]["interfaceName"] == "net1"

    claim = _with_opaque_config(control_plane, namespace, spaced=True)
    meta = claim["metadata"]
    with pytest.raises(PermanentError, match="as kubectl does") as err:
        kube.apply_claim_device_status(
            namespace, meta["name"], meta["uid"], [entry(NIC, "nic-0", "n")], field_manager="d"
        )
    assert "status.allocation" in str(err.value)


def test_apply_refuses_a_replaced_or_missing_claim(
    kube: KubeClient, control_plane: ControlPlane, namespace: str
) -> None:
    claim = allocated_claim(control_plane, namespace, [(NIC, "nic-0", None)])
    meta = claim["metadata"]
    with pytest.raises(PermanentError) as err:
        kube.apply_claim_device_status(
            meta["namespace"],
            meta["name"],
            str(uuid.uuid4()),
            [entry(NIC, "nic-0", "eth0")],
            field_manager="drakit/nic",
        )
    assert not isinstance(err.value, NotFoundError)
    assert status_devices(kube, claim) == [], "nothing written to a claim with another UID"
    with pytest.raises(NotFoundError):
        kube.apply_claim_device_status(
            meta["namespace"], "no-such-claim", meta["uid"], [], field_manager="drakit/nic"
        )


def test_driver_state_rewrites_checkpointed_network_data_at_start(
    kube: KubeClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """A crash after the prepare reply and before the PATCH: the next start writes it."""
    share = str(uuid.uuid4())
    claim = allocated_claim(control_plane, namespace, [(NIC, "nic-0", share)])
    meta = claim["metadata"]
    settings = DrakitSettings(
        node_name=POOL, state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi", plugins={}
    )
    with open_host(settings) as host:
        state = DriverState(
            NIC, host, kube, state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi", boot_id="b"
        )
        try:
            # what a prepare that died before its write leaves in the checkpoint
            with state._serialized():  # staging what the crash left
                cp = state.store.load()
                cp.claims[meta["uid"]] = ClaimRecord(
                    namespace=meta["namespace"],
                    name=meta["name"],
                    uid=meta["uid"],
                    phase=ClaimPhase.PREPARE_COMPLETED,
                    prepared={
                        "nicplugin": [
                            PreparedDevice(
                                request="r",
                                pool=POOL,
                                device="nic-0",
                                network_data=NetworkData(interface_name="net1"),
                            )
                        ]
                    },
                    results=[
                        PreparedDeviceRef(
                            requests=["r"],
                            pool=POOL,
                            device="nic-0",
                            cdi_device_ids=[f"k8s.{NIC}/claim=x"],
                            share_id=share,
                        )
                    ],
                )
                state.store.save(cp)
        finally:
            state.close()
        restarted = DriverState(
            NIC, host, kube, state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi", boot_id="b"
        )
        try:
            assert restarted.resume_device_status() == 1
            wait_for(
                lambda: bool(status_devices(kube, claim)),
                what="networkData written",
                timeout=20.0,
                interval=0.05,
            )
            [got] = status_devices(kube, claim)
            assert (got["device"], got["shareID"]) == ("nic-0", share)
            assert got["networkData"] == {"interfaceName": "net1"}
        finally:
            restarted.close()
