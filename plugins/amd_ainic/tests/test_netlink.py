"""The pyroute2 netlink seam against a real kernel: a veth pair in a private network namespace.

The node's ``Pyroute2Netlink`` runs in a child process inside the namespace (``ip netns
exec``), so nothing here touches the host's links. veth has no VFs, so ``set_vf`` shows the
kernel's refusal; MTU and channel counts are really set and read back.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2.netlink.exceptions import NetlinkError  # type: ignore[import-untyped]

from drakit.errors import PermanentError, RetryableError
from drakit_amd_ainic.netlink import Pyroute2Netlink

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="network namespaces need root and iproute2",
)

CHILD = r"""
import json, os
from pathlib import Path
from pyroute2 import IPRoute
from pyroute2.ethtool import Ethtool
from drakit.errors import PermanentError, RetryableError
from drakit_amd_ainic.netlink import Pyroute2Netlink, VfSettings

with IPRoute() as ip:
    ip.link("add", ifname="v0", kind="veth", num_rx_queues=8, num_tx_queues=8,
            peer={"ifname": "v1", "num_rx_queues": 8, "num_tx_queues": 8})
nl = Pyroute2Netlink()
out = {}
def fds():
    return len(os.listdir("/proc/self/fd"))
def error(call):
    try:
        call()
    except (PermanentError, RetryableError) as e:
        return [type(e).__name__, str(e)]
    return None
nl.set_mtu("v0", Path("/unused"), 1400)
nl.set_channels("v0", Path("/unused"), 4)
warm = fds()  # the rtnetlink socket and the ethtool handle are open now
for n in range(10):
    nl.set_mtu("v0", Path("/unused"), 1300 + n)
    nl.set_channels("v0", Path("/unused"), 3)
nl.set_mtu("v0", Path("/unused"), 1300)
nl.set_channels("v0", Path("/unused"), 2)
out["fds_grew"] = fds() - warm
with IPRoute() as ip:
    out["mtu"] = ip.get_links(ifname="v0")[0].get("mtu")
eth = Ethtool()
ch = eth.get_channels("v0")
eth.close()
out["channels"] = [ch.rx_count, ch.tx_count]
out["too_many"] = error(lambda: nl.set_channels("v0", Path("/unused"), 99))
mac = VfSettings(
    mac="02:00:00:00:00:01", vlan=12, trust=True, spoofchk=False, max_tx_rate_mbps=25000
)
out["no_vfs"] = error(lambda: nl.set_vf("v0", "0000:00:00.0", 0, mac))
out["gone"] = error(lambda: nl.set_mtu("nope0", Path("/unused"), 1400))
out["gone_channels"] = error(lambda: nl.set_channels("nope0", Path("/unused"), 2))
nl.close()
nl.set_mtu("v0", Path("/unused"), 1500)  # reopens
with IPRoute() as ip:
    out["mtu_after_close"] = ip.get_links(ifname="v0")[0].get("mtu")
print(json.dumps(out))
"""


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"drakit-test-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_pyroute2_seam_sets_mtu_and_channels_and_reports_refusals(netns: str) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["mtu"] == 1300
    assert got["channels"] == [2, 2], "veth counts rx and tx apart: both are set"
    assert got["fds_grew"] <= 0, "a socket per call"
    kind, message = got["too_many"]
    assert kind == "PermanentError"
    assert "v0: cannot set 99 channels" in message
    kind, message = got["no_vfs"]
    assert kind == "PermanentError"
    assert message.startswith("v0: the kernel refused vf 0 ")
    assert "02:00:00:00:00:01" in message
    for key in ("gone", "gone_channels"):
        assert got[key] == ["RetryableError", "netdev nope0 is not in this network namespace"]
    assert got["mtu_after_close"] == 1500


class _Refusing:
    """An rtnetlink socket whose every request the kernel answers with ``code``."""

    def __init__(self, code: int) -> None:
        self.code = code

    def link(self, *args: object, **kwargs: object) -> None:
        raise NetlinkError(self.code, os.strerror(self.code))

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("code", "kind"),
    [(errno.EBUSY, RetryableError), (errno.EAGAIN, RetryableError), (errno.EINVAL, PermanentError)],
)
def test_a_busy_device_is_tried_again_and_a_refusal_fails_the_claim(
    code: int, kind: type[Exception]
) -> None:
    """ionic answers EBUSY while its firmware resets and EAGAIN while an operation is pending."""
    nl = Pyroute2Netlink()
    nl._ip = _Refusing(code)  # the socket pyroute2 would have opened
    with pytest.raises(kind, match=r"^eth7: "):
        nl.set_mtu("eth7", Path("/unused"), 1500)
