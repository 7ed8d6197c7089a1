"""drakit's slice checks against the real API server's validation (issue 9, item 5).

Each case is a device rendered *without* drakit's checks and sent to the API server with
``dryRun``: the server's verdict must be drakit's verdict
(:func:`drakit.publish.render.check_pool`).
Cases at the limits prove drakit does not refuse what the server accepts. Then the publisher
publishes a pool with bad devices in it: the server holds the rest, the Node has an Event per
device left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane

from drakit.errors import PermanentError
from drakit.kube import KubeClient
from drakit.models import (
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceTaint,
    RequestPolicy,
    ValidRange,
)
from drakit.publish.publisher import ResourceSlicePublisher
from drakit.publish.render import PoolSpec, check_pool, render_checked

pytestmark = pytest.mark.e2e

DRIVER = "valid.e2e.drakit.dev"
NODE = "validation-node"


def raw(field: str, value: Any) -> DeviceAttribute:
    """An attribute that skipped the model's own checks (a plugin using model_construct)."""
    return DeviceAttribute.model_construct(**{field: value})


def shared(policy: RequestPolicy, value: str = "100Gi") -> Device:
    return Device(
        name="d0",
        allow_multiple_allocations=True,
        capacity={"mem": DeviceCapacity(value=value, request_policy=policy)},
    )


def taint(key: str, value: str = "") -> Device:
    return Device(name="d0", taints=(DeviceTaint(key=key, value=value, effect="NoSchedule"),))


def attr(value: DeviceAttribute, name: str = "a") -> Device:
    return Device.model_construct(name="d0", attributes={name: value})


E_ACUTE = "\u00e9"  # two bytes in UTF-8

CASES: dict[str, tuple[Device, bool]] = {
    # strings: 64 bytes, counted in UTF-8
    "string 64 bytes": (attr(raw("string", "x" * 64)), True),
    "string 65 bytes": (attr(raw("string", "x" * 65)), False),
    "string 32 two-byte chars": (attr(raw("string", E_ACUTE * 32)), True),
    "string 33 two-byte chars": (attr(raw("string", E_ACUTE * 33)), False),
    "version 2.4": (attr(raw("version", "2.4")), False),
    "version 2.4.0-rc.1": (attr(raw("version", "2.4.0-rc.1")), True),
    # ints: int64
    "int64 max": (attr(raw("int_", 2**63 - 1)), True),
    "int64 min": (attr(raw("int_", -(2**63))), True),
    "int64 max + 1": (attr(raw("int_", 2**63)), False),
    # names
    "attribute name 32 chars": (attr(raw("bool_", True), "a" * 32), True),
    "attribute name 33 chars": (attr(raw("bool_", True), "a" * 33), False),
    "attribute name non-ASCII": (attr(raw("bool_", True), "caf" + E_ACUTE), False),
    "device name non-ASCII": (Device.model_construct(name="gp" + E_ACUTE), False),
    # taints
    "taint key with prefix": (taint("example.com/unhealthy"), True),
    "taint key 63 chars": (taint("k" * 63), True),
    "taint key 64 chars": (taint("k" * 64), False),
    "taint key with a space": (taint("bad key"), False),
    "taint key with empty name": (taint("example.com/"), False),
    "taint key prefix not DNS": (taint("Example_Com/x"), False),
    "taint value 63 chars": (taint("k", "v" * 63), True),
    "taint value 64 chars": (taint("k", "v" * 64), False),
    "taint value with '/'": (taint("k", "a/b"), False),
    # consumable capacity request policies
    "policy values ok": (shared(RequestPolicy(default="1Gi", valid_values=("1Gi", "2Gi"))), True),
    "policy values descending": (
        shared(RequestPolicy(default="1Gi", valid_values=("2Gi", "1Gi"))),
        False,
    ),
    "policy default not a value": (
        shared(RequestPolicy(default="3Gi", valid_values=("1Gi", "2Gi"))),
        False,
    ),
    "policy value above capacity": (
        shared(RequestPolicy(default="1Gi", valid_values=("1Gi", "200Gi"))),
        False,
    ),
    "policy values without default": (shared(RequestPolicy(valid_values=("1Gi",))), False),
    "policy range ok": (
        shared(RequestPolicy(default="2Gi", valid_range=ValidRange(min="1Gi", step="1Gi"))),
        True,
    ),
    "policy default off-step": (
        shared(
            RequestPolicy(
                default="1536Mi", valid_range=ValidRange(min="1Gi", max="4Gi", step="1Gi")
            )
        ),
        False,
    ),
    "policy range max above capacity": (
        shared(RequestPolicy(default="1Gi", valid_range=ValidRange(min="1Gi", max="200Gi"))),
        False,
    ),
    "policy default below min": (
        shared(RequestPolicy(default="1Gi", valid_range=ValidRange(min="2Gi"))),
        False,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_drakit_refuses_exactly_what_the_api_server_refuses(kube: KubeClient, case: str) -> None:
    device, accepted = CASES[case]
    spec = PoolSpec(driver=DRIVER, node=NODE, pool=NODE, devices=(device,))
    (obj,) = render_checked(spec)  # no checks: what the server gets if drakit let it through
    try:
        kube.create_resource_slice(obj, dry_run=True)
        server_accepts, why = True, ""
    except PermanentError as exc:
        server_accepts, why = False, str(exc)
    _, errors = check_pool(spec)
    assert server_accepts is accepted, f"the API server {'accepted' if server_accepts else why}"
    assert (not errors) is accepted, f"drakit: {errors}"
    if errors:
        assert str(errors[0]).startswith(f"device {DRIVER}/{NODE}/{device.name}: ")


def test_bad_devices_are_left_out_and_the_pool_is_published(
    kube: KubeClient, control_plane: ControlPlane, fake_node: Callable[..., dict[str, Any]]
) -> None:
    node = fake_node()
    name = node["metadata"]["name"]
    good = [Device(name=f"gpu-{i}", attributes={"index": i}) for i in range(3)]
    bad = [
        Device(name="gpu-7", taints=(DeviceTaint(key="bad key!"),)),
        Device.model_construct(name="gpu-8", attributes={"serial": raw("string", "x" * 65)}),
    ]
    pools = [PoolSpec(driver=DRIVER, node=name, pool=name, devices=(*good[:2], *bad, good[2]))]
    pub = ResourceSlicePublisher(kube, name, lambda: pools, drivers={DRIVER})
    result = pub.sync_once()
    assert (result.creates, result.rejected) == (1, 2)
    assert pub.synced
    (published,) = kube.list_resource_slices(name, DRIVER)
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0", "gpu-1", "gpu-2"]
    assert pub.rejected_by_driver() == {DRIVER: 2}
    assert pub.sync_once().writes == 0

    events = control_plane.api("GET", "/api/v1/namespaces/default/events")["items"]
    rejected = sorted(
        e["message"]
        for e in events
        if e["reason"] == "DeviceRejected" and e["involvedObject"]["name"] == name
    )
    assert len(rejected) == 2, rejected
    assert f"device {DRIVER}/{name}/gpu-7: taint key 'bad key!'" in rejected[0]
    assert f"device {DRIVER}/{name}/gpu-8: attribute serial:" in rejected[1]
