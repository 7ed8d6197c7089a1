"""Netdev moves into a pod's network namespace and back, against a real kernel.

Every scenario (``podnet_child.py``) runs in a private network namespace standing for the
host's (``unshare --net``), so the host's links are never touched: a veth pair there plays the
claimed function's netdev, ``sleep`` processes in namespaces of their own play pods. A crash is a
real ``kill -9`` (``DRAKIT_CRASH_AT``) of a process that was moving, and the restart a fresh
``PodNetwork`` reading the journal it left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from drakit_amd_ainic.podnet import CRASH_POINTS

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="network namespaces need root and unshare(1)",
)

CHILD = Path(__file__).with_name("podnet_child.py")
HOST = {"mtu": 1400, "up": True, "addresses": ["192.0.2.1/24"]}


def run(scenario: str, state: Path) -> dict[str, Any]:
    proc = subprocess.run(
        ["unshare", "--net", "--", sys.executable, str(CHILD), scenario, str(state)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return out


def host_view(link: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if link is None else {k: link[k] for k in ("mtu", "up", "addresses")}


def test_a_netdev_moves_into_the_pod_configured_and_comes_back_as_it_was(tmp_path: Path) -> None:
    out = run("move-and-back", tmp_path)
    assert host_view(out["host_before"]) == HOST
    net1 = out["pod"]["net1"]
    assert net1["mtu"] == 9000
    assert net1["up"] is True
    assert net1["addresses"] == sorted(["10.1.2.3/24", "fd00::3/64"])
    assert net1["mac"] == out["host_before"]["mac"]
    assert "drkh0" not in out["host_names"]
    assert out["network_data"] == {
        "interfaceName": "net1",
        "hardwareAddress": out["host_before"]["mac"],
        "ips": ["10.1.2.3/24", "fd00::3/64"],
    }
    assert out["journal_in"] == {"0000:18:00.0": "in"}
    assert out["again"] == out["network_data"]
    assert out["pod_again"] == ["lo", "net1"]
    assert out["pod_after_other_stop"] == ["lo", "net1"]
    assert out["pod_after"] == ["lo"]
    assert host_view(out["host_after"]) == HOST
    assert out["host_after"]["mac"] == out["host_before"]["mac"]
    assert out["journal_after"] == {}


def test_refusals_name_the_cause_and_leave_the_netdev_in_the_host(tmp_path: Path) -> None:
    out = run("refusals", tmp_path)
    kind, message = out["host_network"]
    assert kind == "PermanentError"
    assert "hostNetwork" in message
    assert "remove interface" in message
    assert out["no_move"] is None  # a claim that asks for no move: nothing to do
    assert out["gone_netns"][0] == "RetryableError"
    assert "network namespace is gone" in out["gone_netns"][1]
    assert out["not_a_netns"][0] == "RetryableError"
    assert "not a network namespace" in out["not_a_netns"][1]
    kind, message = out["name_taken"]
    assert kind == "PermanentError"
    assert "NicConfig interface.name: 'net1'" in message
    assert host_view(out["host_after_name_taken"]) == HOST
    assert out["pod_after_name_taken"] == ["lo", "net1", "x1"]
    assert out["journal_after_name_taken"] == {}
    assert out["first"] is None
    kind, message = out["second_pod"]
    assert kind == "RetryableError"
    assert "pod ns/pod-sbA" in message
    assert "one pod at a time" in message
    assert host_view(out["host_after"]) == HOST


def test_a_dead_namespace_leaves_nothing_behind(tmp_path: Path) -> None:
    out = run("netns-dies", tmp_path)
    # veth: destroyed with the namespace by the kernel; the journal forgets it
    assert out["veth_journal"] == {}
    # a netdev the kernel gave back under its pod name is renamed and restored
    assert out["refunded_names"] == ["drkp0", "net1"]
    assert host_view(out["host_after"]) == HOST
    assert out["names_after"] == ["drkh0", "drkp0"]
    assert out["journal_after"] == {}


def test_kill_9_at_every_step_then_a_restart_loses_nothing(tmp_path: Path) -> None:
    out = run("crash", tmp_path)
    assert sorted(out) == sorted(CRASH_POINTS)
    for point, seen in out.items():
        assert seen["rc"] == -9, (point, seen["stderr"])
        assert seen["journal"], point  # the kill left a move on record
        if point.startswith(("netdev-after-move-out", "netdev-after-restore")):
            # on its way out: the restart brings it home
            assert seen["recovered"] == {}, point
            assert seen["pod"] is None, point
        else:
            # on its way in, the pod alive: the restart finishes the move
            assert seen["recovered"] == {"0000:18:00.0": "in"}, point
            assert seen["pod"] is not None, point
            assert seen["pod"]["mtu"] == 9000, point
            assert seen["pod"]["up"] is True, point
            assert seen["pod"]["addresses"] == ["10.1.2.3/24", "fd00::3/64"], point
        assert seen["final_journal"] == {}, point
        assert seen["final_pod"] == ["lo"], point
        assert host_view(seen["host"]) == HOST, point


def test_the_hooks_move_a_prepared_claims_netdev_and_unprepare_brings_it_back(
    tmp_path: Path,
) -> None:
    out = run("through-the-host", tmp_path)
    assert out["prepare_error"] == ""
    assert out["prepared_network_data"]["interfaceName"] == "drkh0"  # in the host, at prepare
    assert out["started"] == [
        {
            "interfaceName": "net1",
            "hardwareAddress": out["host_after_stop"]["mac"],
            "ips": ["10.1.2.3/24", "fd00::3/64"],
        }
    ]
    assert out["pod"] == ["lo", "net1"]
    assert out["published_while_moved"] == {
        "ifName": {"string": "drkh0"},
        "pfName": {"string": "drkh0"},
        "mtu": {"int": 9000},
    }
    assert out["capacity_while_moved"] == ["bandwidth", "queues"]
    assert out["pod_after_stop"] == ["lo"]
    assert host_view(out["host_after_stop"]) == HOST
    assert out["unprepare_error"] == ""
    assert out["pod_after_unprepare"] == ["lo"], "unprepare takes the netdev back from the pod"
    assert host_view(out["host_after_unprepare"]) == HOST
