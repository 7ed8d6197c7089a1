"""CDI device nodes: typed edits, hostPath under the device root, the host node checked.

The writer checks host nodes as the container runtime reads them (go-cdi's ``lstat``): a
character, block or FIFO node passes; a missing node, a link, a directory or (outside a
simulated root) a regular file fails the spec, naming the device and both paths.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from drakit.errors import ConfigInvalid, PermanentError, RetryableError
from drakit.host.settings import load_settings
from drakit.models import CdiDeviceNode, CdiEdits, CdiHook, CdiMount
from drakit.prepare.cdi import CdiWriter, device_root_of
from drakit.sim import make_device_node
from drakit.simseam import SIM_MARKER


def nodes(*paths: str, **extra: object) -> CdiEdits:
    return CdiEdits(device_nodes=tuple({"path": p, **extra} for p in paths))


def spec_nodes(spec: dict[str, object]) -> list[dict[str, object]]:
    return spec["devices"][0]["containerEdits"]["deviceNodes"]  # type: ignore[index,no-any-return]


# -- typed edits --------------------------------------------------------------------------------


def test_cdi_spelling_and_field_names_both_work_and_serialise_to_cdi() -> None:
    a = CdiDeviceNode.model_validate({"path": "/dev/x", "hostPath": "/h/dev/x", "fileMode": 0o660})
    b = CdiDeviceNode(path="/dev/x", host_path="/h/dev/x", file_mode=0o660)
    assert a == b
    assert a.to_cdi() == {"path": "/dev/x", "hostPath": "/h/dev/x", "fileMode": 0o660}
    mount = CdiMount(host_path="/run/mps", container_path="/run/mps", options=("rbind",))
    hook = CdiHook(hook_name="createContainer", path="/usr/bin/ctk", args=("ctk", "x"))
    edits = CdiEdits(env=("A=1",), device_nodes=(a,), mounts=(mount,), hooks=(hook,))
    assert edits.to_cdi() == {
        "env": ["A=1"],
        "deviceNodes": [{"path": "/dev/x", "hostPath": "/h/dev/x", "fileMode": 0o660}],
        "mounts": [{"hostPath": "/run/mps", "containerPath": "/run/mps", "options": ["rbind"]}],
        "hooks": [{"hookName": "createContainer", "path": "/usr/bin/ctk", "args": ["ctk", "x"]}],
    }
    # the checkpoint keeps only what is set, and reads it back
    dumped = edits.model_dump(mode="json")
    assert dumped["device_nodes"] == [
        {"path": "/dev/x", "host_path": "/h/dev/x", "file_mode": 0o660}
    ]
    assert CdiEdits.model_validate(dumped) == edits


@pytest.mark.parametrize(
    ("node", "field"),
    [
        ({"path": "/dev/x", "hostpath": "/dev/x"}, "hostpath"),  # the misspelt key of issue 31
        ({"path": "/dev/x", "host": "/dev/x"}, "host"),
        ({"path": "dev/x"}, "path"),
        ({"path": "/dev/../etc/shadow"}, "path"),
        ({"path": "/dev/x", "type": "x"}, "type"),
        ({"path": "/dev/x", "permissions": "rwx"}, "permissions"),
        ({"path": "/dev/x", "major": -1}, "major"),
        ({"path": "/dev/x", "fileMode": 0o10000}, "fileMode"),
        ({"path": "/dev/x", "hostPath": "/a", "host_path": "/b"}, "host_path"),
    ],
)
def test_a_bad_device_node_is_an_error_naming_its_field(
    node: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as e:
        CdiEdits(device_nodes=(node,))
    assert [err["loc"][-1] for err in e.value.errors()] == [field]


def test_bad_env_mounts_and_hooks_are_refused() -> None:
    with pytest.raises(ValidationError, match="NAME=value"):
        CdiEdits(env=("NO_EQUALS",))
    with pytest.raises(ValidationError, match="containerpath"):
        CdiEdits(mounts=({"hostPath": "/a", "containerpath": "/b"},))
    with pytest.raises(ValidationError, match=r"hooks\.0\.hookName"):
        CdiEdits(hooks=({"hookName": "beforeStart", "path": "/bin/x"},))


# -- the device root and the host check ---------------------------------------------------------


def test_under_the_real_root_host_path_is_left_out_and_the_host_node_checked(
    tmp_path: Path,
) -> None:
    writer = CdiWriter(tmp_path, "x.drakit.io")
    spec = writer.build("u", [("d", nodes("/dev/null"))])
    assert spec_nodes(spec) == [{"path": "/dev/null"}]
    assert spec["cdiVersion"] == "0.3.0"
    with pytest.raises(RetryableError) as e:
        writer.build("u", [("gpu-0", nodes("/dev/null", "/dev/drakit-no-such-node"))])
    assert str(e.value).startswith(
        "device 'gpu-0': device node /dev/drakit-no-such-node is missing on the host"
    )


def test_a_device_root_prefixes_host_paths(tmp_path: Path) -> None:
    root = tmp_path / "run/nvidia/driver"
    for p in ("/dev/nvidia0", "/dev/nvidiactl"):
        make_device_node(root, p)
    writer = CdiWriter(tmp_path / "cdi", "x.drakit.io", device_root=f"{root}/")
    spec = writer.build("u", [("gpu-0", nodes("/dev/nvidia0", "/dev/nvidiactl"))])
    assert spec_nodes(spec) == [
        {"path": "/dev/nvidia0", "hostPath": f"{root}/dev/nvidia0"},
        {"path": "/dev/nvidiactl", "hostPath": f"{root}/dev/nvidiactl"},
    ]
    assert spec["cdiVersion"] == "0.5.0"  # hostPath
    name = writer.write("u", spec)
    assert json.loads((tmp_path / "cdi" / name).read_text())["devices"] == spec["devices"]
    with pytest.raises(RetryableError) as e:
        writer.build("u", [("gpu-1", nodes("/dev/nvidia1"))])
    assert (
        f"device 'gpu-1': device node /dev/nvidia1 (host path {root}/dev/nvidia1, under "
        f"device_root {root}) is missing on the host"
    ) in str(e.value)


def test_a_host_path_the_plugin_sets_is_kept(tmp_path: Path) -> None:
    writer = CdiWriter(tmp_path, "x.drakit.io", device_root=tmp_path / "elsewhere")
    spec = writer.build("u", [("d", nodes("/dev/mine", hostPath="/dev/null"))])
    assert spec_nodes(spec) == [{"path": "/dev/mine", "hostPath": "/dev/null"}]


def test_nodes_given_by_number_are_not_read_from_the_host(tmp_path: Path) -> None:
    writer = CdiWriter(tmp_path, "x.drakit.io")
    edits = CdiEdits(
        device_nodes=(
            CdiDeviceNode(path="/dev/by-number", type="c", major=1, minor=3),
            CdiDeviceNode(path="/dev/a-fifo", type="p"),
        )
    )
    assert len(spec_nodes(writer.build("u", [("d", edits)]))) == 2


@pytest.mark.parametrize("kind", ["link", "directory", "regular file"])
def test_what_the_runtime_refuses_is_refused(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    host = root / "dev" / "thing"
    if kind == "link":
        host.symlink_to("/dev/null")
    elif kind == "directory":
        host.mkdir()
    else:
        host.write_bytes(b"")
    writer = CdiWriter(tmp_path / "cdi", "x.drakit.io", device_root=root)
    with pytest.raises(RetryableError, match=f"is a {kind}, not a device node"):
        writer.build("u", [("d", nodes("/dev/thing"))])


def test_a_simulated_root_may_hold_regular_files_for_nodes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / SIM_MARKER).parent.mkdir(parents=True)
    (root / SIM_MARKER).write_text("{}")
    (root / "dev").mkdir()
    (root / "dev" / "stand-in").write_bytes(b"")  # what an unprivileged simulator makes
    writer = CdiWriter(tmp_path / "cdi", "x.drakit.io", device_root=root)
    assert spec_nodes(writer.build("u", [("d", nodes("/dev/stand-in"))])) == [
        {"path": "/dev/stand-in", "hostPath": f"{root}/dev/stand-in"}
    ]
    assert device_root_of(None, root) == root  # a simulated root is its own device root
    assert device_root_of("/", root) == root  # the host's /dev has none of its nodes
    assert device_root_of(None, tmp_path) == Path("/")
    assert device_root_of("/run/nvidia/driver", root) == Path("/run/nvidia/driver")


def test_a_relative_device_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="not an absolute path"):
        CdiWriter(tmp_path, "x.drakit.io", device_root="run/nvidia/driver")
    with pytest.raises(ConfigInvalid, match="device_root"):
        load_settings(None, overrides={"device_root": "run/nvidia/driver"})


def test_the_device_root_setting_comes_from_file_env_and_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "drakit.yaml"
    config.write_text("device_root: /run/nvidia/driver\n")
    assert load_settings(config).device_root == Path("/run/nvidia/driver")
    monkeypatch.setenv("DRAKIT_DEVICE_ROOT", "/driver-root")
    assert load_settings(config).device_root == Path("/driver-root")
    assert load_settings(None, overrides={"device_root": Path("/x")}).device_root == Path("/x")
    monkeypatch.delenv("DRAKIT_DEVICE_ROOT")
    assert load_settings(None).device_root is None


def test_the_host_nodes_are_checked_where_this_process_sees_the_device_root(
    tmp_path: Path,
) -> None:
    """A pod mounts the host's <device_root>/dev elsewhere (the chart's device-root volume)."""
    seen = tmp_path / "var/run/drakit/device-root"
    make_device_node(seen, "/dev/nvidia0")
    writer = CdiWriter(
        tmp_path / "cdi", "x.drakit.io", device_root="/run/nvidia/driver", check_root=seen
    )
    spec = writer.build("u", [("gpu-0", nodes("/dev/nvidia0"))])
    assert spec_nodes(spec) == [
        {"path": "/dev/nvidia0", "hostPath": "/run/nvidia/driver/dev/nvidia0"}
    ]
    with pytest.raises(RetryableError) as e:
        writer.build("u", [("gpu-1", nodes("/dev/nvidia1"))])
    assert f"(seen here at {seen}/dev/nvidia1) is missing on the host" in str(e.value)
    with pytest.raises(PermanentError, match="device_root_mount"):
        CdiWriter(tmp_path, "x.drakit.io", check_root="relative")


# -- edits every device of a claim carries: once, in the spec's own containerEdits ------------


def _mount(path: str) -> CdiMount:
    return CdiMount(host_path=path, container_path=path, options=("ro", "nosuid", "bind"))


def _hook(*args: str) -> CdiHook:
    return CdiHook(hook_name="createContainer", path="/usr/bin/nvidia-cdi-hook", args=args)


def _effective(spec: dict[str, object], device: int) -> dict[str, list[object]]:
    """What the runtime applies for one device: the spec's edits, then the device's (go-cdi)."""
    shared: dict[str, list[object]] = spec.get("containerEdits") or {}  # type: ignore[assignment]
    own = spec["devices"][device]["containerEdits"]  # type: ignore[index]
    return {k: [*shared.get(k, []), *own.get(k, [])] for k in ("env", "mounts", "hooks")}


def test_mounts_and_hooks_every_device_carries_are_written_once(tmp_path: Path) -> None:
    driver = tuple(_mount(f"/usr/lib/libcuda.so.{i}") for i in range(20))
    hooks = (_hook("create-symlinks"), _hook("update-ldcache"))
    devices = [
        (
            f"gpu-{i}",
            CdiEdits(
                env=("NVIDIA_VISIBLE_DEVICES=a,b,c",),
                mounts=(_mount(f"/run/own-{i}"), *driver),
                hooks=hooks,
            ),
        )
        for i in range(3)
    ]
    writer = CdiWriter(tmp_path, "x.drakit.io")
    spec = writer.build("u", devices, env={"CLAIM": "1"})
    assert spec["containerEdits"] == {
        "env": ["CLAIM=1"],
        "mounts": [m.to_cdi() for m in driver],
        "hooks": [h.to_cdi() for h in hooks],
    }
    for i, dev in enumerate(spec["devices"]):
        assert dev["containerEdits"] == {
            "env": ["NVIDIA_VISIBLE_DEVICES=a,b,c"],  # env stays with each device
            "mounts": [_mount(f"/run/own-{i}").to_cdi()],
        }
    # what the runtime applies for each device is what the plugin asked for
    for i in range(3):
        got = _effective(spec, i)
        want = devices[i][1].to_cdi()
        assert sorted(map(json.dumps, got["mounts"])) == sorted(map(json.dumps, want["mounts"]))
        assert got["hooks"] == want["hooks"]
    assert len(json.dumps(spec)) < len(json.dumps(writer.build("u", devices[:1]))) * 1.5


def test_edits_not_on_every_device_stay_with_their_devices(tmp_path: Path) -> None:
    gpu = CdiEdits(mounts=(_mount("/lib/a"), _mount("/lib/b")), hooks=(_hook("x"), _hook("y")))
    nic = CdiEdits(mounts=(_mount("/lib/b"),), hooks=(_hook("x"), _hook("z")))
    writer = CdiWriter(tmp_path, "x.drakit.io")
    spec = writer.build("u", [("gpu-0", gpu), ("nic-0", nic)])
    # /lib/b on both; of the hooks only the common prefix (their order matters)
    assert spec["containerEdits"] == {
        "mounts": [_mount("/lib/b").to_cdi()],
        "hooks": [_hook("x").to_cdi()],
    }
    assert spec["devices"][0]["containerEdits"] == {
        "mounts": [_mount("/lib/a").to_cdi()],
        "hooks": [_hook("y").to_cdi()],
    }
    assert spec["devices"][1]["containerEdits"] == {"hooks": [_hook("z").to_cdi()]}
    # nothing in common: the spec has no edits of its own; one device: left where it is
    alone = CdiEdits(mounts=(_mount("/lib/c"),))
    assert "containerEdits" not in writer.build("u", [("gpu-0", gpu), ("d", alone)])
    assert "containerEdits" not in writer.build("u", [("gpu-0", gpu)])
