"""``drakit config validate`` and ``drakit claim validate``: each mistake one line, with its source.

Run through ``drakit.cli.main``, as a user runs them; the plugins are the installed backends.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clirun import run_cli

pytestmark = pytest.mark.usefixtures("clean_drakit_env")


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    code, out, err = run_cli(args, capsys)
    return code, out, err.strip().splitlines()


def write(tmp_path: Path, text: str, name: str = "f.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


SHARED = "    driver: gpu-nic.drakit.io\n"
ALL = f"plugins:\n  cpu: {{}}\n  nvidia_gpu:\n{SHARED}  amd_ainic:\n{SHARED}  composite:\n{SHARED}"


# -- config validate ---------------------------------------------------------------------------


def test_a_full_configuration_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, ALL)
    assert run(["config", "validate", str(path)], capsys) == (
        0,
        f"{path}: valid (cpu, nvidia_gpu, amd_ainic, composite)\n",
        [],
    )


def test_whole_device_counters_is_a_setting_of_each_device_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on = "    whole_device_counters: true\n"
    path = write(tmp_path, f"plugins:\n  nvidia_gpu:\n{on}  amd_gpu:\n{on}  amd_ainic:\n{on}")
    code, out, err = run(["config", "validate", str(path)], capsys)
    assert (code, err) == (0, []), err
    assert out == f"{path}: valid (nvidia_gpu, amd_gpu, amd_ainic)\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "publish_strategy: fewest-shard-first\n",
            ": publish_strategy: strategy 'fewest-shard-first' is not installed (installed: ",
        ),
        (
            "plugins:\n  cpu:\n    strategy: fewest-shard-first\n",
            ": plugins.cpu.strategy: strategy 'fewest-shard-first' is not installed",
        ),
        (
            "plugins:\n  cpu:\n    driver: Acme_FPGA\n",
            ": plugins.cpu.driver: 'Acme_FPGA' is not a DRA driver name: use a lower-case DNS",
        ),
        ("plugins:\n  cpu:\n    driver: ../../x\n", "'../../x' is not a DRA driver name"),
        (
            f"plugins:\n  cpu: {{}}\n  amd_ainic:\n{SHARED}  composite:\n{SHARED}",
            ": plugins.composite.gpu_plugins: none of nvidia_gpu, amd_gpu is enabled; enable "
            "one of them (plugins.nvidia_gpu) or list the enabled backend here",
        ),
        (
            "plugins:\n  amd_gpu:\n    whole_device_counters: maybe\n",
            ": plugins.amd_gpu.whole_device_counters: Input should be a valid boolean",
        ),
    ],
)
def test_what_start_up_would_refuse_is_one_line_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: str
) -> None:
    path = write(tmp_path, text)
    code, out, err = run(["config", "validate", str(path)], capsys)
    assert (code, out) == (2, "")
    assert len(err) == 1, err
    assert err[0].startswith(f"{path}: ")
    assert line in err[0]


def test_composite_alone_names_both_members(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["config", "validate", str(write(tmp_path, "plugins: [composite]\n"))], capsys
    )
    assert code == 2
    assert [line.split(": ")[1] for line in err] == [
        "plugins.composite.gpu_plugins",
        "plugins.composite.nic_plugins",
    ]
    assert "nvidia_gpu" in err[0]
    assert "amd_ainic" in err[1]


def test_members_under_their_own_drivers_are_refused_naming_both_sections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "plugins:\n  nvidia_gpu: {driver: gpu.nvidia.drakit.io}\n"
        "  amd_ainic: {driver: ainic.amd.drakit.io}\n  composite: {}\n"
    )
    code, _, err = run(["config", "validate", str(write(tmp_path, text))], capsys)
    assert code == 2
    assert [line.split(": ")[1] for line in err] == [
        "plugins.nvidia_gpu.driver",
        "plugins.amd_ainic.driver",
    ]
    assert (
        "plugin 'nvidia_gpu' publishes under 'gpu.nvidia.drakit.io' but plugins.composite "
        "publishes under 'pairs.composite.drakit.io'"
    ) in err[0]
    assert "set plugins.amd_ainic.driver and plugins.composite.driver to the same name" in err[1]


@pytest.mark.parametrize(
    "members",
    [
        pytest.param("  nvidia_gpu: {}\n  amd_ainic: {}\n", id="without a driver"),
        pytest.param(
            "  nvidia_gpu:\n    driver: pairs.composite.drakit.io\n"
            "  amd_ainic:\n    driver: pairs.composite.drakit.io\n",
            id="renamed to the composite driver",
        ),
    ],
)
def test_members_publishing_under_the_composite_driver_are_valid(
    members: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = f"plugins:\n{members}  composite: {{}}\n"
    code, _, err = run(["config", "validate", str(write(tmp_path, text))], capsys)
    assert (code, err) == (0, [])


def test_an_error_from_a_variable_is_blamed_on_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "plugins:\n  cpu: {}\nhealth:\n  interval: 0\n")
    monkeypatch.setenv("DRAKIT_PLUGINS__CPU__DRIVER", "Acme_FPGA")
    monkeypatch.setenv("DRAKIT_PUBLISH_STRATEGY", "nope")
    code, _, err = run(["config", "validate", str(path)], capsys)
    assert code == 2
    by_path = {line.split(": ")[1]: line for line in err}
    assert by_path["health.interval"].startswith(f"{path}: health.interval: ")
    assert by_path["plugins.cpu.driver"].startswith("DRAKIT_PLUGINS__CPU__DRIVER: ")
    assert by_path["publish_strategy"].startswith("DRAKIT_PUBLISH_STRATEGY: ")


# -- claim validate ----------------------------------------------------------------------------

CPU = "cpu.drakit.io"
GOOD = f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: good}}
spec:
  devices:
    requests:
    - name: cpus
      exactly: {{deviceClassName: {CPU}, count: 4}}
    - name: any
      firstAvailable: [{{name: small, deviceClassName: {CPU}}}]
    config:
    - requests: [cpus, any/small]
      opaque:
        driver: {CPU}
        parameters: {{apiVersion: cpu.drakit.io/v1alpha1, kind: CpuConfig, policy: distributed}}
    - opaque:
        driver: other.vendor.example
        parameters: {{whatever: 1}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {CPU}}}
spec:
  config:
  - opaque:
      driver: {CPU}
      parameters: {{apiVersion: cpu.drakit.io/v1alpha1, kind: CpuConfig, policy: packed}}
"""


def test_valid_claims_and_classes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    assert run(["claim", "validate", str(path)], capsys) == (0, "2 object(s) valid\n", [])


def template(config: str) -> str:
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: t}}
spec:
  spec:
    devices:
      requests: [{{name: cpus, exactly: {{deviceClassName: {CPU}}}}}]
      config:
      - {config}
"""


@pytest.mark.parametrize(
    ("config", "line"),
    [
        (
            f"opaque: {{driver: {CPU}, parameters: {{apiVersion: cpu.drakit.io/v1alpha1, "
            "kind: CpuConfig, policy: fastest}}",
            "spec.spec.devices.config[0].opaque.parameters.policy: Input should be 'packed'",
        ),
        (
            f"opaque: {{driver: {CPU}, parameters: {{apiVersion: cpu.drakit.io/v1alpha1, "
            "kind: CpuConfig, groupSize: 999}}",
            "opaque.parameters.groupSize: Input should be less than or equal to 64",
        ),
        (
            f"opaque: {{driver: {CPU}, parameters: {{apiVersion: cpu.drakit.io/v2, kind: X}}}}",
            "opaque.parameters.kind: no plugin of driver 'cpu.drakit.io' owns cpu.drakit.io/v2/X",
        ),
        (
            f"opaque: {{driver: {CPU}, parameters: {{kind: CpuConfig}}}}",
            "an opaque config object needs string apiVersion and kind",
        ),
        (
            "opaque: {driver: Bad_Driver, parameters: {}}",
            "opaque.driver: 'Bad_Driver' is not a DRA driver name: use a lower-case DNS subdomain",
        ),
        (
            f"opaque: {{driver: {CPU}, parameters: [1, 2]}}",
            "opaque.parameters: must be a JSON object",
        ),
        (
            f"opaque: {{driver: {CPU}, parameters: {{big: '{'x' * 11000}'}}}}",
            "bytes; the API server allows 10 KiB",
        ),
        (
            "{requests: [gpus], opaque: {driver: other.example, parameters: {}}}",
            "config[0].requests[0]: no request 'gpus' in this claim (requests: cpus)",
        ),
    ],
)
def test_each_bad_opaque_config_is_one_line_naming_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, line: str
) -> None:
    path = write(tmp_path, template(config))
    code, out, err = run(["claim", "validate", str(path)], capsys)
    assert (code, out) == (2, "")
    assert len(err) == 1, err
    assert err[0].startswith(f"{path}[0] ResourceClaimTemplate t: ")
    assert line in err[0]


def test_files_that_are_not_claims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = write(tmp_path, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "pod.yaml")
    deep = write(tmp_path, "a: " + "[" * 50_000 + "]" * 50_000 + "\n", "deep.yaml")
    broken = write(tmp_path, "a: [\n", "broken.yaml")
    code, _, err = run(["claim", "validate", str(pod), str(deep), str(broken)], capsys)
    assert code == 2
    assert len(err) == 3, err
    assert "kind: 'Pod' is not one of ResourceClaim, ResourceClaimTemplate, DeviceClass" in err[0]
    assert err[1].startswith(f"{deep}: nested more than 32 levels deep")
    assert err[2].startswith(f"{broken}: not valid YAML")
