"""`drakit deviceclasses`: default names, plugin classes, extended resources from the config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.clirun import run_cli

from drakit.deviceclasses import DeviceClassSettings, DeviceClassSpec, render_device_classes

pytestmark = pytest.mark.usefixtures("clean_drakit_env")


def test_default_backends(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["deviceclasses"], capsys)
    assert (code, err) == (0, "")
    docs = list(yaml.safe_load_all(out))
    assert [d["metadata"]["name"] for d in docs] == [
        "cpu",
        "nvidia-gpu",
        "amd-gpu",
        "amd-ainic",
        "gpu-nic-pair",
        "gpu-nic-pair-numa0",
        "gpu-nic-pair-numa1",
    ]
    assert all(d["apiVersion"] == "resource.k8s.io/v1" and d["kind"] == "DeviceClass" for d in docs)
    assert docs[0]["spec"] == {
        "selectors": [{"cel": {"expression": 'device.driver == "cpu.drakit.io"'}}]
    }


def test_extended_resources_and_drivers_from_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "plugins:\n  nvidia_gpu: {driver: gpu.example.com}\n"
        "device_classes:\n  nvidia-gpu: {extended_resource_name: nvidia.com/gpu}\n"
    )
    code, out, _ = run_cli(["deviceclasses", "--config", str(cfg), "-o", "json"], capsys)
    assert code == 0
    [klass] = yaml.safe_load(out)["items"]
    assert klass["spec"] == {
        "selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}],
        "extendedResourceName": "nvidia.com/gpu",
    }


@pytest.mark.parametrize(
    ("classes", "named"),
    [
        pytest.param(
            "gpu: {extended_resource_name: a.io/b}",
            ["device_classes.gpu: no configured backend publishes this class (classes: cpu)"],
            id="a class nobody publishes",
        ),
        pytest.param(
            "cpu: {extended_resource_name: gpu}",
            ["device_classes.cpu.extended_resource_name", "domain-prefixed"],
            id="a bad extended resource name",
        ),
    ],
)
def test_bad_device_classes_are_an_error_naming_the_field(
    classes: str, named: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"plugins: [cpu]\ndevice_classes:\n  {classes}\n")
    code, _, err = run_cli(["deviceclasses", "--config", str(cfg)], capsys)
    assert code == 2
    for text in named:
        assert text in err


def test_two_plugins_publishing_one_name_is_an_error() -> None:
    spec = [DeviceClassSpec(name="same")]
    with pytest.raises(ValueError, match="published by both 'a' and 'b'"):
        render_device_classes({"a": "a.io", "b": "b.io"}, {"a": spec, "b": spec}, {})
    with pytest.raises(ValueError, match="not a DeviceClass name"):
        DeviceClassSpec(name="Bad_Name")
    with pytest.raises(ValueError, match=r"outside kubernetes\.io"):
        DeviceClassSettings(extended_resource_name="kubernetes.io/gpu")
