"""drakit.testing itself: nodes from profiles and specs, hosts, running nodes, claims."""

from __future__ import annotations

import dataclasses
import stat
from pathlib import Path

import pytest

from drakit.errors import ConfigInvalid
from drakit.sim import UnknownProfileError, get_profile, list_profiles
from drakit.testing import allocated_claim, build_sim_node, open_host, run_node
from drakit.testing.plugin import HostFactory, NodeFactory, SimNodeFactory

CPU = "cpu.drakit.io"


def test_a_spec_variant_is_built_without_changing_the_profile(tmp_path: Path) -> None:
    spec = get_profile("minimal-1s")
    variant = dataclasses.replace(spec, cpu=dataclasses.replace(spec.cpu, isolated=(3,)))
    node = build_sim_node(variant, tmp_path / "v", node_name="n")
    assert (node.profile, node.node_name) == ("minimal-1s", "n")
    isolated = node.root / "sys/devices/system/cpu/isolated"
    assert isolated.read_text().strip() == "3"
    assert get_profile("minimal-1s") == spec  # the registry still means the original
    plain = build_sim_node("minimal-1s", tmp_path / "p")
    assert (plain.root / "sys/devices/system/cpu/isolated").read_text().strip() == ""


def test_a_new_spec_is_built_without_registering_its_name(tmp_path: Path) -> None:
    before = list_profiles()
    spec = dataclasses.replace(get_profile("minimal-1s"), name="kit-only-spec")
    node = build_sim_node(spec, tmp_path / "n")
    assert node.profile == "kit-only-spec"
    assert (node.root / "sys/devices/system/cpu/online").read_text().strip() == "0-7"
    assert list_profiles() == before


def test_an_unknown_profile_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownProfileError) as e:
        build_sim_node("acme-4fpga", tmp_path)
    assert "minimal-1s" in str(e.value)


def test_config_may_not_set_what_the_kit_sets(drakit_sim_node: SimNodeFactory) -> None:
    node = drakit_sim_node("minimal-1s")
    with pytest.raises(ValueError, match="config sets node_name, sysfs_root"):
        open_host({"plugins": ["cpu"], "node_name": "x", "sysfs_root": "/"}, node)
    with pytest.raises(ConfigInvalid, match=r"plugins\.cpu\.policy"):
        open_host({"plugins": {"cpu": {"policy": "everywhere"}}}, node)


def test_host_discovers_on_the_node(
    drakit_sim_node: SimNodeFactory, drakit_host: HostFactory
) -> None:
    node = drakit_sim_node("minimal-1s", node_name="kit-node")
    host = drakit_host({"plugins": ["cpu"]}, node)
    assert host.node == node
    assert host.driver_of("cpu") == CPU
    found = host.discover().by_driver()
    assert [d.name for d in found[CPU]] == ["cpu-numa-0"]
    [slice_] = host.slices()
    assert slice_["spec"]["nodeName"] == "kit-node"
    assert slice_["spec"]["pool"]["name"] == "kit-node"


def test_allocated_claim_is_what_the_scheduler_writes() -> None:
    entry = {"requests": ["a"], "opaque": {"driver": CPU, "parameters": {"kind": "X"}}}
    claim = allocated_claim(
        "c", [("a", CPU, "d0"), ("a", CPU, "d1")], pool="p", config=[entry], uid="u-1"
    )
    assert claim["metadata"] == {"namespace": "default", "name": "c", "uid": "u-1"}
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "a", "exactly": {"deviceClassName": CPU, "count": 2}}
    ]
    alloc = claim["status"]["allocation"]["devices"]
    assert [r["device"] for r in alloc["results"]] == ["d0", "d1"]
    assert {r["pool"] for r in alloc["results"]} == {"p"}
    assert alloc["config"] == [{"source": "FromClaim", **entry}]


def test_a_running_node_prepares_over_its_sockets_and_cleans_up(
    drakit_sim_node: SimNodeFactory, tmp_path: Path
) -> None:
    node = drakit_sim_node("minimal-1s")
    with run_node({"plugins": ["cpu"]}, node, state_dir=tmp_path / "s") as running:
        kubelet_dir = running.kubelet_dir
        sockets = sorted(p.name for p in (kubelet_dir / "plugins_registry").iterdir())
        assert sockets == [f"{CPU}-drakit-testing-reg.sock"]
        claim = allocated_claim("c", [("cpus", CPU, "cpu-numa-0")])
        out = running.kubelet.prepare(claim)
        assert out.error is not None
        assert "not found" in out.error  # not in the claim source: the API server's 404
        running.claims.add(claim)
        out = running.kubelet.prepare(claim)
        assert out.error is None
        [path] = out.spec_files()
        assert not path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        [cdi_id] = out.cdi_ids
        assert cdi_id.startswith(f"k8s.{CPU}/claim=")
        edits = out.cdi_edits()[cdi_id]
        assert any(e.startswith("DRAKIT_") for e in edits["env"]), edits
        assert running.kubelet.unprepare(claim) is None
        assert out.spec_files() == []
        other = allocated_claim("x", [("r", "nothing.example.com", "d")])
        assert "not served by this node" in (running.kubelet.unprepare(other) or "")
    assert not kubelet_dir.exists()


def test_the_node_fixture_stops_its_node(drakit_node: NodeFactory) -> None:
    running = drakit_node({"plugins": ["cpu"]})
    assert running.driver_names() == {"cpu": CPU}
    assert running.node.ready() == (True, "ok")
