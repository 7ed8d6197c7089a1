"""Locked-in shares of the CPU backend's groups: publishing, bad settings, prepare.

``h200-8gpu-8ainic`` has two NUMA nodes of 112 CPUs (56 cores, SMT 2). With
``locked: [{plugin: cpu, shares: 4}]`` each group is published four more times as a share of 28
CPUs. The prepare pipeline (:class:`drakit.prepare.pipeline.DriverState`) runs over the real plugin
host; the CPU backend chooses the CPUs from the simulated sysfs. Nothing of drakit is mocked.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.cpuset import parse_cpulist
from drakit.deviceclasses import render_device_classes
from drakit.errors import ConfigInvalid
from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import ClaimRef
from drakit.prepare.pipeline import DriverState
from drakit.testing import ClaimStore

DRIVER = "cpus.example.com"
PROFILE = "h200-8gpu-8ainic"


def plugins(**locked: Any) -> dict[str, Any]:
    entry = {"plugin": "cpu", "shares": 4} | locked
    return {
        "cpu": {},
        "composite": {"driver": DRIVER, "gpu_plugins": [], "nic_plugins": [], "locked": [entry]},
    }


@pytest.fixture(scope="module")
def host() -> Iterator[PluginHost]:
    with open_host(DrakitSettings(profile=PROFILE, plugins=plugins())) as h:
        yield h


def test_each_share_draws_a_quarter_of_its_groups_counter_set(host: PluginHost) -> None:
    found = host.discover()
    devs = {k.device: d for k, d in found.devices.items()}
    owners = {k.device: found.owners[k] for k in found.devices}
    sets = {cs.name: cs.counters for cs in found.counter_sets[(DRIVER, host.node.name)]}
    assert sets == {"cpu-numa-0-counters": {"cpu": "112"}, "cpu-numa-1-counters": {"cpu": "112"}}
    for group in ("cpu-numa-0", "cpu-numa-1"):
        [whole] = devs[group].consumes_counters  # the lone group takes its set whole
        assert (whole.counter_set, whole.counters) == (f"{group}-counters", {"cpu": "112"})
        assert devs[group].attributes["type"].value == "cpu-group"
        shares = [devs[f"{group}-share-{k}"] for k in range(4)]
        for k, share in enumerate(shares):
            assert owners[share.name] == "composite"
            [use] = share.consumes_counters
            assert (use.counter_set, use.counters) == (f"{group}-counters", {"cpu": "28"})
            assert share.capacity["cpu"].value == "28"
            assert not share.allow_multiple_allocations  # allocated whole, to one claim
            a = {n: v.value for n, v in share.attributes.items()}
            assert a["type"] == "cpu-share"
            assert (a["member"], a["share"], a["shares"]) == (group, k, 4)
            numa = devs[group].attributes["resource.kubernetes.io/numaNode"].value
            assert a["resource.kubernetes.io/numaNode"] == numa
            assert "cpuCount" not in a  # the group's count is not the share's
    assert len(devs) == 10


def test_shares_render_into_valid_slices_and_classes_select_by_type(host: PluginHost) -> None:
    slices = [s for s in build_inventory(host).slices() if s["spec"]["driver"] == DRIVER]
    assert sum(len(s["spec"].get("devices") or []) for s in slices) == 10
    assert sum(len(s["spec"].get("sharedCounters") or []) for s in slices) == 2
    assert all(not (s["spec"].get("devices") and s["spec"].get("sharedCounters")) for s in slices)
    objs = render_device_classes(host.driver_names(), host.device_classes(), {})
    spec = {o["metadata"]["name"]: o["spec"] for o in objs}
    assert sorted(spec) == ["cpu", "cpu-share"]  # no pairs wanted: no pair classes
    attr = f'device.attributes["{DRIVER}"].type in '
    assert [s["cel"]["expression"] for s in spec["cpu-share"]["selectors"]] == [
        f'device.driver == "{DRIVER}" && ({attr}["cpu-share"])',
    ]
    assert spec["cpu-share"]["extendedResourceName"] == "composite.drakit.io/cpu-share"
    assert spec["cpu"]["selectors"][0]["cel"]["expression"].endswith(
        f'&& ({attr}["cpu-group","cpu"])'
    )


@pytest.mark.parametrize(
    ("locked", "cpu", "path", "says"),
    [
        (
            {"shares": 5},
            {},
            "plugins.composite.locked[0].shares",
            "5 shares do not divide its 112 cpu; use one of 2, 4, 7, 8, 14, 16, 28, 56",
        ),
        (
            {"plugin": "gpu"},
            {},
            "plugins.composite.locked[0].plugin",
            "'gpu' is not an enabled backend (enabled: cpu); enable plugins.gpu",
        ),
        (
            {},
            {"driver": "cpu.drakit.io"},
            "plugins.cpu.driver",
            "plugin 'cpu' publishes under 'cpu.drakit.io' but plugins.composite divides it under "
            f"'{DRIVER}'; a composed device shares counters with its members only inside one "
            "driver's pool",
        ),
        (
            {"devices": ["cpu-numa-7"]},
            {},
            "plugins.composite.locked[0].devices",
            "cpu-numa-7 are not devices of 'cpu' on this node (it has cpu-numa-0, cpu-numa-1)",
        ),
        (
            {"capacity": "memory"},
            {},
            "plugins.composite.locked[0].capacity",
            "no device of 'cpu' has the consumable capacity 'memory' (capacities there: cpu)",
        ),
        (
            {},
            {"mode": "individual"},
            "plugins.composite.locked[0].capacity",
            "(capacities there: none); name one of those, or give the member backend consumable "
            "devices (the CPU backend: mode grouped)",
        ),
        (
            {"shares": 16},
            {"full_pcpus_only": True},
            "plugins.composite.locked[0].shares",
            "a share of 7 cpu does not fit: its request policy takes steps of 2 from 2",
        ),
    ],
)
def test_bad_settings_name_the_setting_and_the_fix(
    locked: dict[str, Any], cpu: dict[str, Any], path: str, says: str
) -> None:
    p = plugins(**locked)
    p["cpu"] = cpu
    with (
        pytest.raises(ConfigInvalid) as err,
        open_host(DrakitSettings(profile=PROFILE, plugins=p)) as h,
    ):
        h.discover()  # the plugin refuses an unknown member at start, the rest here
    assert any(e[0] == path and says in e[1] for e in err.value.errors), err.value.errors


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[tuple[DriverState, ClaimStore, Path]]:
    with open_host(DrakitSettings(profile=PROFILE, plugins=plugins())) as h:
        claims = ClaimStore(copy=False)
        state = DriverState(
            DRIVER,
            h,
            claims,
            state_dir=tmp_path / "state",
            cdi_dir=tmp_path / "cdi",
            boot_id="test",
        )
        try:
            yield state, claims, tmp_path
        finally:
            state.close()


def claim(claims: ClaimStore, node: str, results: list[dict[str, Any]]) -> ClaimRef:
    uid = str(uuid.uuid4())
    name = f"c-{uid[:6]}"
    for r in results:
        r.setdefault("request", "cpus")
        r.update(driver=DRIVER, pool=node)
    claims.add(
        {
            "metadata": {"namespace": "ns", "name": name, "uid": uid},
            "spec": {},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )
    return ClaimRef(namespace="ns", name=name, uid=uid)


def cpusets(tmp: Path, uid: str) -> dict[str, frozenset[int]]:
    [spec] = [json.loads(f.read_text()) for f in (tmp / "cdi").glob(f"*{uid}*.json")]
    out = {}
    for dev in spec["devices"]:
        for e in dev["containerEdits"]["env"]:
            key, _, value = e.partition("=")
            if key.startswith("DRAKIT_CPUSET_"):
                out[key] = parse_cpulist(value)
    return out


def test_shares_get_disjoint_cpus_of_their_group_and_lone_claims_the_rest(
    pipeline: tuple[DriverState, ClaimStore, Path],
) -> None:
    state, claims, tmp = pipeline
    node = state.host.node.name
    two = claim(claims, node, [{"device": "cpu-numa-0-share-0"}, {"device": "cpu-numa-0-share-2"}])
    assert state.prepare([two])[two.uid].error == ""
    got = cpusets(tmp, two.uid)
    assert len(got) == 2  # one cpuset per share, under the share's own ID
    a, b = got.values()
    assert len(a) == len(b) == 28
    assert not a & b
    numa0 = _numa_cpus(state, 0)
    assert a | b <= numa0
    record = checkpoint(tmp)[two.uid]["prepared"]
    assert [d["device"] for d in record["cpu"]] == ["cpu-numa-0", "cpu-numa-0"]
    assert [d["device"] for d in record["composite"]] == [
        "cpu-numa-0-share-0",
        "cpu-numa-0-share-2",
    ]
    # a repeated prepare returns the same CPUs
    assert state.prepare([two])[two.uid].error == ""
    assert cpusets(tmp, two.uid) == got
    # the node's last line of defence: a lone claim on the group never gets the shares' CPUs
    lone = claim(
        claims,
        node,
        [{"device": "cpu-numa-0", "consumedCapacity": {"cpu": "28"}, "shareID": str(uuid.uuid4())}],
    )
    assert state.prepare([lone])[lone.uid].error == ""
    [rest] = cpusets(tmp, lone.uid).values()
    assert len(rest) == 28
    assert not rest & (a | b)
    third = claim(claims, node, [{"device": "cpu-numa-0-share-1"}])
    assert state.prepare([third])[third.uid].error == ""  # 112 - 3 x 28 = 28 left
    fourth = claim(claims, node, [{"device": "cpu-numa-0-share-3"}])
    err = state.prepare([fourth])[fourth.uid].error
    assert "request 'cpus/cpu-numa-0-share-3' device 'cpu-numa-0'" in err
    assert "not enough cpus available" in err
    assert not list((tmp / "cdi").glob(f"*{fourth.uid}*"))
    assert state.unprepare([two])[two.uid].error == ""
    assert two.uid not in checkpoint(tmp)
    assert state.prepare([fourth])[fourth.uid].error == ""  # a share's CPUs are free again
    env = _env(tmp, fourth.uid)
    assert "DRAKIT_CPU_NUMA_0_SHARE_3_MEMBER=cpu-numa-0" in env


def checkpoint(tmp: Path) -> dict[str, Any]:
    path = tmp / "state" / DRIVER / "checkpoint.json"
    return dict(json.loads(path.read_text())["claims"]) if path.exists() else {}


def _env(tmp: Path, uid: str) -> list[str]:
    [spec] = [json.loads(f.read_text()) for f in (tmp / "cdi").glob(f"*{uid}*.json")]
    return [e for d in spec["devices"] for e in d["containerEdits"]["env"]]


def _numa_cpus(state: DriverState, node: int) -> frozenset[int]:
    root = Path(state.host.node.sysfs_root)
    return parse_cpulist((root / f"sys/devices/system/node/node{node}/cpulist").read_text())


def test_a_device_divided_twice_is_refused() -> None:
    p = plugins()
    p["composite"]["locked"].append({"plugin": "cpu", "shares": 2, "devices": ["cpu-numa-1"]})
    with (
        pytest.raises(ConfigInvalid) as err,
        open_host(DrakitSettings(profile=PROFILE, plugins=p)) as h,
    ):
        h.discover()
    assert err.value.errors == [
        (
            "plugins.composite.locked[1].devices",
            "cpu-numa-1 is divided by plugins.composite.locked[0] already; a device is divided "
            "once, so list disjoint devices in the two entries",
        )
    ]


def test_whole_gpus_do_not_fit_locked_in_mode() -> None:
    p = {
        "nvidia_gpu": {},
        "composite": {
            "driver": DRIVER,
            "nic_plugins": [],
            "locked": [{"plugin": "nvidia_gpu", "capacity": "memory", "shares": 2}],
        },
    }
    with (
        pytest.raises(ConfigInvalid) as err,
        open_host(DrakitSettings(profile=PROFILE, plugins=p)) as h,
    ):
        h.discover()
    path, message = err.value.errors[0]
    assert path == "plugins.composite.locked[0].plugin"
    assert message.startswith("gpu-0: is allocated whole (no allowMultipleAllocations)")


def test_shares_and_pairs_publish_together_in_one_pool() -> None:
    p = {
        "nvidia_gpu": {},
        "amd_ainic": {},
        "cpu": {},
        "composite": {"driver": DRIVER, "locked": [{"plugin": "cpu", "shares": 2}]},
    }
    with open_host(DrakitSettings(profile=PROFILE, plugins=p)) as h:
        found = h.discover()
        kinds = sorted(str(d.attributes["type"].value) for d in found.devices.values())
        assert kinds.count("gpu-nic-pair") == 8
        assert kinds.count("cpu-share") == 4
        assert kinds.count("cpu-group") == 2
        slices = [s for s in build_inventory(h).slices() if s["spec"]["driver"] == DRIVER]
        assert sum(len(s["spec"].get("devices") or []) for s in slices) == 8 + 8 + 8 + 2 + 4
        assert sum(len(s["spec"].get("sharedCounters") or []) for s in slices) == 8 + 8 + 2
        assert all(len(s["spec"].get("sharedCounters") or []) <= 8 for s in slices)
        objs = render_device_classes(h.driver_names(), h.device_classes(), {})
        assert {"cpu", "cpu-share", "gpu-nic-pair", "nvidia-gpu", "amd-ainic"} <= {
            o["metadata"]["name"] for o in objs
        }


def test_a_share_that_does_not_fit_rolls_back_the_pair_in_its_claim(tmp_path: Path) -> None:
    p = {
        "nvidia_gpu": {},
        "amd_ainic": {},
        "cpu": {},
        "composite": {"driver": DRIVER, "locked": [{"plugin": "cpu", "shares": 4}]},
    }
    settings = DrakitSettings(profile=PROFILE, plugins=p, state_dir=tmp_path / "state")
    with open_host(settings) as h:
        claims = ClaimStore(copy=False)
        state = DriverState(
            DRIVER, h, claims, state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi", boot_id="b"
        )
        try:
            node = h.node.name
            whole = {"consumedCapacity": {"cpu": "112"}, "shareID": str(uuid.uuid4())}
            lone = claim(claims, node, [{"device": "cpu-numa-0", **whole}])
            assert state.prepare([lone])[lone.uid].error == ""  # every CPU of NUMA node 0
            both = claim(
                claims,
                node,
                [
                    {"device": "pair-1", "request": "pair"},
                    {"device": "cpu-numa-0-share-0", "request": "cpus"},
                ],
            )
            err = state.prepare([both])[both.uid].error
            assert "request 'cpus/cpu-numa-0-share-0' device 'cpu-numa-0'" in err
            record = checkpoint(tmp_path)[both.uid]["prepared"]
            # the pair's GPU and NIC were prepared first, then rolled back
            assert record["nvidia_gpu"] == record["amd_ainic"] == record["cpu"] == []
            assert not list((tmp_path / "cdi").glob(f"*{both.uid}*"))
            assert state.unprepare([both])[both.uid].error == ""
            assert state.unprepare([lone])[lone.uid].error == ""
            assert state.prepare([both])[both.uid].error == ""  # room again: all three members
            record = checkpoint(tmp_path)[both.uid]["prepared"]
            assert {m: [d["device"] for d in record[m]] for m in ("cpu", "composite")} == {
                "cpu": ["cpu-numa-0"],
                "composite": ["pair-1", "cpu-numa-0-share-0"],
            }
            env = _env(tmp_path, both.uid)
            assert any(e.startswith("DRAKIT_PAIR_1_GPU=") for e in env)
            assert "DRAKIT_CPU_NUMA_0_SHARE_0_MEMBER=cpu-numa-0" in env
        finally:
            state.close()


def test_a_damaged_checkpoint_keeps_a_prepared_shares_group_held(
    pipeline: tuple[DriverState, ClaimStore, Path],
) -> None:
    """Issue 30, class 1: after recovery a share still holds its CPU group against lone claims
    and against sibling shares (its CPUs are unknown), never against other groups."""
    state, claims, tmp = pipeline
    node = state.host.node.name
    share = claim(claims, node, [{"device": "cpu-numa-0-share-0"}])
    assert state.prepare([share])[share.uid].error == ""
    (tmp / "state" / DRIVER / "checkpoint.json").write_text("[]")
    lone = claim(
        claims,
        node,
        [{"device": "cpu-numa-0", "consumedCapacity": {"cpu": "28"}, "shareID": str(uuid.uuid4())}],
    )
    err = state.prepare([lone])[lone.uid].error
    assert f"device 'cpu-numa-0' is shared with claim with UID {share.uid}" in err, err
    assert "whose checkpoint record was lost" in err
    sibling = claim(claims, node, [{"device": "cpu-numa-0-share-1"}])
    err = state.prepare([sibling])[sibling.uid].error
    assert "member devices cpu-numa-0 of plugin 'cpu' are held by claims" in err, err
    assert share.uid in err
    assert "checkpoint.json was lost" in err
    assert not list((tmp / "cdi").glob(f"*{sibling.uid}*"))
    elsewhere = claim(claims, node, [{"device": "cpu-numa-1-share-0"}])
    assert state.prepare([elsewhere])[elsewhere.uid].error == ""
    assert state.unprepare([share])[share.uid].error == ""
    assert state.prepare([sibling])[sibling.uid].error == ""
