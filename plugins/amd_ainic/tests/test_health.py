"""Health: link down, carrier lost or an RDMA port not ACTIVE is Unhealthy; recovery clears it."""

from __future__ import annotations

from drakit_amd_ainic.sim import set_link, set_rdma_port

from .conftest import NODE, ainic_node


def test_link_carrier_and_rdma_port_transitions() -> None:
    with ainic_node(
        "h200-8gpu-8ainic-sriov",
        nics=[
            {"select": {"pf_names": ["enp24s0"]}, "mode": "vf"},
        ],
    ) as node:
        plugin = node.plugin
        info = node.host.node

        def states() -> dict[str, tuple[str, str]]:
            return {h.device: (h.health, h.message) for h in plugin.drakit_device_health(info)}

        first = states()
        assert set(first) == set(plugin.published)
        assert {h for h, _ in first.values()} == {"Healthy"}
        assert all(h.pool == NODE for h in plugin.drakit_device_health(info))

        set_link(node.root, "enp64s0", up=False)
        got = states()
        assert got["ainic-1"] == ("Unhealthy", "enp64s0: link down")
        assert got["ainic-2"][0] == "Healthy"

        set_link(node.root, "enp64s0", up=True)
        set_link(node.root, "enp79s0", up=True, carrier=False)
        set_rdma_port(node.root, "ionic_3", active=False)
        got = states()
        assert got["ainic-1"][0] == "Healthy"
        assert got["ainic-2"] == ("Unhealthy", "enp79s0: carrier lost")
        assert got["ainic-3"] == ("Unhealthy", "enp94s0: RDMA port DOWN")

        # a VF is unhealthy on its own port, and while its PF is
        set_rdma_port(node.root, "rocep24s0v2", active=False)
        got = states()
        assert got["ainic-0-vf-2"] == ("Unhealthy", "enp24s0v2: RDMA port DOWN")
        assert got["ainic-0-vf-1"][0] == "Healthy"
        set_link(node.root, "enp24s0", up=False)
        assert states()["ainic-0-vf-1"] == ("Unhealthy", "enp24s0: link down")

        for nic in ("enp24s0", "enp79s0"):
            set_link(node.root, nic, up=True)
        set_rdma_port(node.root, "ionic_3", active=True)
        set_rdma_port(node.root, "rocep24s0v2", active=True)
        assert {h for h, _ in states().values()} == {"Healthy"}

        # a driver that does not set the operational state shows "unknown": not a fault
        (node.root / "sys/class/net/enp64s0/operstate").write_text("unknown\n")
        assert states()["ainic-1"][0] == "Healthy"
        (node.root / "sys/class/net/enp64s0/operstate").write_text("lowerlayerdown\n")
        assert states()["ainic-1"] == ("Unhealthy", "enp64s0: link lowerlayerdown")
        set_link(node.root, "enp64s0", up=True)
