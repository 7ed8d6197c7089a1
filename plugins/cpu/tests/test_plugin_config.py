"""CpuConfig validation and how per-claim options combine with the node's (docs/cpu-backend.md)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from drakit.context import PluginContext
from drakit.errors import ConfigInvalid, PermanentError
from drakit.models import AllocatedDevice, NodeInfo
from drakit.strategy_models import SelectionRequest, SelectionResult
from drakit_cpu.allocator import take_packed
from drakit_cpu.config import CPU_CONFIG_API_VERSION, CpuConfig
from drakit_cpu.plugin import CpuPlugin
from drakit_cpu.policy import PolicyOptions, policy_conflicts
from drakit_cpu.prepare import cpuset_env_name, select_cpus
from drakit_cpu.settings import CpuSettings
from drakit_cpu.topology import CpuInfo, CpuTopology


def no_select(strategy: str, request: SelectionRequest) -> SelectionResult:
    raise AssertionError("not called")


def make_plugin(**settings: Any) -> CpuPlugin:
    ctx = PluginContext(
        name="cpu",
        settings=CpuSettings(**settings),
        node=NodeInfo(name="n", sysfs_root="/nonexistent"),
        driver_name="cpu.drakit.io",
        strategy=None,
        select=no_select,
        log=logging.getLogger("test"),
    )
    return CpuPlugin(ctx)


def parse(**fields: Any) -> Any:
    body = {"apiVersion": CPU_CONFIG_API_VERSION, "kind": "CpuConfig", **fields}
    return make_plugin().drakit_parse_config(CPU_CONFIG_API_VERSION, "CpuConfig", body)


def cfg(**fields: Any) -> CpuConfig:
    return CpuConfig.model_validate(
        {"apiVersion": CPU_CONFIG_API_VERSION, "kind": "CpuConfig", **fields}
    )


def device(*configs: CpuConfig) -> AllocatedDevice:
    return AllocatedDevice(
        request="cpus", driver="cpu.drakit.io", pool="n", device="cpu-numa-0", config=configs
    )


# -- CpuConfig ------------------------------------------------------------------------------------


def test_valid_config_round_trips() -> None:
    got = parse(policy="distributed", groupSize=2, fullPCPUsOnly=True)
    assert isinstance(got, CpuConfig)
    assert (got.policy, got.group_size, got.full_pcpus_only) == ("distributed", 2, True)


def test_other_kinds_are_not_ours() -> None:
    assert make_plugin().drakit_parse_config("gpu.example.com/v1", "GpuConfig", {}) is None


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"policy": "fast"}, "policy", "Input should be 'packed', 'distributed' or 'spread'"),
        ({"bogus": 1}, "bogus", "unknown key"),
        ({"groupSize": 0}, "groupSize", "greater than or equal to 1"),
        ({"policy": "distributed", "preferUncore": True}, "preferUncore", "only applies to"),
        ({"policy": "packed", "groupSize": 2}, "groupSize", "only applies to policy 'distributed'"),
        ({"policy": "spread", "fullPCPUsOnly": True}, "fullPCPUsOnly", "mutually exclusive"),
        # issue 30: refused, not coerced ("yes" was True, "2" was 2)
        ({"policy": "packed", "preferUncore": "yes"}, "preferUncore", "valid boolean"),
        ({"policy": "distributed", "groupSize": "2"}, "groupSize", "valid integer"),
        ({"fullPCPUsOnly": 1}, "fullPCPUsOnly", "valid boolean"),
    ],
)
def test_invalid_config_names_the_field(fields: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigInvalid) as info:
        parse(**fields)
    [(where, text)] = info.value.errors
    assert where == field
    assert message in text


def test_policy_error_wording() -> None:
    with pytest.raises(ConfigInvalid) as info:
        parse(policy="fast")
    assert str(info.value).startswith("policy: Input should be 'packed', 'distributed' or 'spread'")


# -- resolving per-claim options against the node -----------------------------------------------


def test_node_defaults_apply_when_the_claim_says_nothing() -> None:
    p = make_plugin(policy="packed", prefer_uncore=True)
    assert p.resolve_options(device(), "w", grouped=True) == PolicyOptions("packed", True)


def test_claim_policy_does_not_inherit_the_node_policy_options() -> None:
    p = make_plugin(policy="packed", prefer_uncore=True)
    got = p.resolve_options(device(cfg(policy="distributed")), "w", grouped=True)
    assert got == PolicyOptions("distributed", prefer_uncore=False, group_size=None)
    p = make_plugin(policy="distributed", group_size=4)
    assert p.resolve_options(device(), "w", grouped=True).group_size == 4
    assert p.resolve_options(device(cfg(policy="packed")), "w", grouped=True).group_size is None


def test_later_config_wins_and_merged_conflicts_fail() -> None:
    p = make_plugin()
    got = p.resolve_options(
        device(cfg(policy="spread"), cfg(policy="distributed", groupSize=2)), "w", grouped=True
    )
    assert got == PolicyOptions("distributed", group_size=2)
    # a class config asks for uncore alignment, the claim for distributed: say so, per claim
    with pytest.raises(PermanentError, match=r"^w: CpuConfig preferUncore: only applies to"):
        p.resolve_options(
            device(cfg(preferUncore=True), cfg(policy="distributed")), "w", grouped=True
        )


def test_node_full_pcpus_only_is_enforced() -> None:
    p = make_plugin(full_pcpus_only=True)
    assert p.resolve_options(device(), "w", grouped=True).full_pcpus_only
    with pytest.raises(PermanentError, match=r"CpuConfig policy: 'spread' cannot be used"):
        p.resolve_options(device(cfg(policy="spread")), "w", grouped=True)
    with pytest.raises(PermanentError, match=r"CpuConfig fullPCPUsOnly: this node hands out"):
        p.resolve_options(device(cfg(fullPCPUsOnly=False)), "w", grouped=True)


def test_claim_may_ask_for_whole_cores() -> None:
    got = make_plugin().resolve_options(device(cfg(fullPCPUsOnly=True)), "w", grouped=True)
    assert got == PolicyOptions("packed", full_pcpus_only=True)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"policy": "packed"}, "policy"),
        ({"preferUncore": False}, "preferUncore"),
        ({"groupSize": 2}, "groupSize"),
    ],
)
def test_individual_mode_rejects_policy_options(fields: dict[str, Any], field: str) -> None:
    p = make_plugin(mode="individual")
    with pytest.raises(PermanentError, match=rf"CpuConfig {field}: has no effect on individual"):
        p.resolve_options(device(cfg(**fields)), "w", grouped=False)
    ok = p.resolve_options(device(cfg(fullPCPUsOnly=True)), "w", grouped=False)
    assert ok.full_pcpus_only


# -- policies --------------------------------------------------------------------------------------


def two_numa_smt() -> CpuTopology:
    """2 sockets x 1 NUMA node x 4 cores x 2 threads; cpu c and c+8 are siblings."""
    return CpuTopology.from_cpus(
        CpuInfo(
            cpu=c,
            core_id=c % 8,
            socket_id=(c % 8) // 4,
            numa_node=(c % 8) // 4,
            uncore_cache_id=(c % 8) // 4,
        )
        for c in range(16)
    )


def test_distributed_inside_one_numa_node_equals_packed() -> None:
    topo = two_numa_smt()
    numa0 = topo.cpus_in_numa_node(0)
    for n in range(1, len(numa0) + 1):
        for free in (numa0, numa0 - {0}, numa0 - {1, 9}):
            if n > len(free):
                continue
            dist = select_cpus(topo, free, n, PolicyOptions("distributed"))
            assert dist == take_packed(topo, free, n), (n, sorted(free))


def test_distributed_spans_numa_nodes_only_when_needed() -> None:
    topo = two_numa_smt()
    got = select_cpus(topo, topo.cpu_ids, 12, PolicyOptions("distributed", group_size=2))
    per_numa = sorted(sum(1 for c in got if topo.info(c).numa_node == n) for n in (0, 1))
    assert per_numa == [6, 6]
    packed = select_cpus(topo, topo.cpu_ids, 12, PolicyOptions("packed"))
    assert sorted(sum(1 for c in packed if topo.info(c).numa_node == n) for n in (0, 1)) == [4, 8]


def test_spread_uses_one_thread_per_core_first() -> None:
    topo = two_numa_smt()
    got = select_cpus(topo, topo.cpus_in_numa_node(0), 4, PolicyOptions("spread"))
    assert len({topo.info(c).core_id for c in got}) == 4


def test_policy_conflicts_partial() -> None:
    assert policy_conflicts(None, True, 4, True) == []
    assert policy_conflicts("packed", True, None, True) == []
    assert [k for k, _ in policy_conflicts("spread", True, 2, True)] == [
        "prefer_uncore",
        "group_size",
        "full_pcpus_only",
    ]


def test_cpuset_env_names() -> None:
    assert cpuset_env_name("cpu-numa-0") == "DRAKIT_CPUSET_CPU_NUMA_0"
    share = "0b9f3c3e-7c1a-4b4e-9a43-6c1f0e2d9a10"
    assert cpuset_env_name("cpu-numa-0", share) == (
        "DRAKIT_CPUSET_CPU_NUMA_0_0B9F3C3E7C1A4B4E9A436C1F0E2D9A10"
    )
