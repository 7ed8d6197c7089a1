"""``drakit config validate`` refuses what ``drakit node`` or ``drakit deviceclasses`` refuses.

Every configuration of the corpus below is given to all three: the node (started in this
process on the simulated ``minimal-1s`` profile with an in-memory claim source, as
``drakit demo --config`` starts it; no cluster), ``drakit deviceclasses --config`` and
``drakit config validate``. Whatever the node or deviceclasses refuses, validate refuses,
naming the same setting; and validate also refuses what both accept but can never work (a
request policy whose default is below its minimum, a strategy whose claims the backend's
devices can never satisfy). The good configurations pass all three.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from drakit.commands.cli import cli
from drakit.commands.demo import demo_settings
from drakit.commands.validate import validate_config
from drakit.host.startup import fast_tmp
from drakit.node.daemon import Node
from drakit.prepare.memory import ClaimStore

BAD: dict[str, tuple[dict[str, Any], str]] = {
    # name: (configuration, the setting validate must name)
    "unknown-class": (
        {"plugins": {"cpu": {}}, "device_classes": {"nope": {}}},
        "device_classes.nope",
    ),
    "class-of-a-disabled-backend": (
        {
            "plugins": {"cpu": {}},
            "device_classes": {"nvidia-gpu": {"extended_resource_name": "example.com/gpu"}},
        },
        "device_classes.nvidia-gpu",
    ),
    "bad-extended-resource": (
        {"plugins": {"cpu": {}}, "device_classes": {"cpu": {"extended_resource_name": "x"}}},
        "device_classes.cpu.extended_resource_name",
    ),
    "unknown-plugin": ({"plugins": {"cpu": {}, "fpga": {}}}, "plugins.fpga"),
    "bad-cpu-list": ({"plugins": {"cpu": {"reserved": "0-3,x"}}}, "plugins.cpu.reserved"),
    "unknown-key": ({"plugins": {"cpu": {"reservd": "0-1"}}}, "plugins.cpu.reservd"),
    "unknown-strategy": ({"plugins": {"cpu": {"strategy": "sideways"}}}, "plugins.cpu.strategy"),
    "composite-without-members": ({"plugins": {"composite": {}}}, "plugins.composite"),
    "queues-default-below-min": (
        {"plugins": {"amd_ainic": {"queues": {"default": 1, "min": 2}}}},
        "plugins.amd_ainic.queues",
    ),
    "queues-default-off-step": (
        {"plugins": {"amd_ainic": {"queues": {"default": 4, "min": 1, "step": 2}}}},
        "plugins.amd_ainic.queues",
    ),
    "numa-spread-on-gpus": (
        {"plugins": {"nvidia_gpu": {"strategy": "numa-spread"}}},
        "plugins.nvidia_gpu.strategy",
    ),
    "bad-node-name": ({"node_name": "Not_A_Node", "plugins": {"cpu": {}}}, "node_name"),
}

GOOD: dict[str, dict[str, Any]] = {
    "cpu": {"plugins": {"cpu": {"reserved": "0"}}},
    "cpu-with-class": {
        "plugins": {"cpu": {"strategy": "numa-spread"}},
        "device_classes": {"cpu": {"extended_resource_name": "example.com/cpu"}},
    },
    "gpus-and-nics": {"plugins": {"nvidia_gpu": {}, "amd_ainic": {"queues": {"default": 2}}}},
}


def _node_refuses(path: Path) -> str:
    """Why the node refuses to start with this configuration ("" if it starts)."""
    with tempfile.TemporaryDirectory(prefix="drakit-validate-", dir=fast_tmp()) as tmp:
        root = Path(tmp)
        try:
            settings = demo_settings(root, "minimal-1s", path)
            (root / "kubelet" / "plugins_registry").mkdir(parents=True)
            node = Node(settings, claims=ClaimStore(), boot_id="b", instance_id="v")
            node.start()
        except Exception as e:  # noqa: BLE001 - whatever stops the node counts as a refusal
            return str(e) or repr(e)
        node.stop(grace=1)
    return ""


def _deviceclasses_refuse(path: Path) -> str:
    result = CliRunner().invoke(cli, ["deviceclasses", "--config", str(path)])
    return "" if result.exit_code == 0 else (str(result.exception) or result.output)


def _write(tmp_path: Path, name: str, config: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("name", sorted(BAD))
def test_validate_refuses_what_the_node_or_deviceclasses_refuses(name: str, tmp_path: Path) -> None:
    config, setting = BAD[name]
    path = _write(tmp_path, name, config)
    problems, _ = validate_config(path)
    assert problems, f"{name}: validate says valid"
    assert any(p.path.startswith(setting) for p in problems), [str(p) for p in problems]
    result = CliRunner().invoke(cli, ["config", "validate", str(path)])
    assert result.exit_code != 0
    assert setting in result.output


def test_the_corpus_holds_what_the_node_and_deviceclasses_refuse(tmp_path: Path) -> None:
    """Each entry is refused by the node, by deviceclasses, or can never work (validate's own).

    Together with the test above (validate refuses every entry) and the good configurations
    (all three accept them), validate's verdict covers the other two's on this corpus.
    """
    node = {n for n in BAD if _node_refuses(_write(tmp_path, n, BAD[n][0]))}
    classes = {n for n in BAD if _deviceclasses_refuse(_write(tmp_path, n, BAD[n][0]))}
    never_fit = {"composite-without-members", "numa-spread-on-gpus"}  # both start, uselessly
    assert {"bad-cpu-list", "unknown-plugin", "queues-default-below-min"} <= node
    assert {"unknown-class", "class-of-a-disabled-backend", "bad-extended-resource"} <= classes
    assert "unknown-class" not in node  # the node never renders classes: only validate does both
    assert node | classes | never_fit == set(BAD), set(BAD) - (node | classes | never_fit)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_configurations_pass_all_three(name: str, tmp_path: Path) -> None:
    path = _write(tmp_path, name, GOOD[name])
    problems, _ = validate_config(path)
    assert problems == []
    assert _deviceclasses_refuse(path) == ""
    assert _node_refuses(path) == ""
