"""Configuration: YAML file, ``DRAKIT_*`` overrides, and errors that name the path and the fix.

Most checks go through ``drakit config validate`` (``drakit.commands.cli.main``), because that is
what a user runs; the rest load settings directly with :func:`drakit.config.load_settings`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clirun import run_cli

from drakit.errors import ConfigInvalid
from drakit.host.loader import installed_plugins
from drakit.host.settings import load_settings

pytestmark = pytest.mark.usefixtures("clean_drakit_env")


def write(tmp_path: Path, text: str, name: str = "drakit.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``drakit config validate PATH``; return (exit code, stdout, stderr)."""
    return run_cli(["config", "validate", str(path)], capsys)


# -- loading and overriding ----------------------------------------------------------------------


def test_yaml_file_is_read_in_plugin_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "node_name: node-a\n"
        "plugins:\n"
        "  nvidia_gpu: {}\n"
        "  cpu:\n"
        "    reserved: 0-1\n"
        "discovery:\n"
        "  interval: 30\n",
    )
    s = load_settings(path)
    assert s.node_name == "node-a"
    assert list(s.plugins) == ["nvidia_gpu", "cpu"]
    assert s.plugins["cpu"] == {"reserved": "0-1"}
    assert s.discovery.interval == 30.0


def test_plugins_list_shorthand_and_null_sections(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, "plugins: [cpu, amd_ainic]\n"))
    assert s.plugins == {"cpu": {}, "amd_ainic": {}}
    s = load_settings(write(tmp_path, "plugins:\n  cpu:\n  composite: ~\n", "null.yaml"))
    assert s.plugins == {"cpu": {}, "composite": {}}


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, ""))
    assert s.plugins == {}
    assert s.node_name is None


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(
        tmp_path,
        "node_name: from-file\nplugins:\n  nvidia_gpu: {}\n  cpu:\n    reserved: 0-3\n",
    )
    monkeypatch.setenv("DRAKIT_NODE_NAME", "from-env")
    monkeypatch.setenv("DRAKIT_PLUGINS__CPU__RESERVED", "0-1")
    monkeypatch.setenv("DRAKIT_DISCOVERY__INTERVAL", "5")
    s = load_settings(path)
    assert s.node_name == "from-env"
    # nested values merge into the file's sections; other plugins and their order stay
    assert s.plugins == {"nvidia_gpu": {}, "cpu": {"reserved": "0-1"}}
    assert s.discovery.interval == 5.0


def test_environment_alone_configures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAKIT_PROFILE", "minimal-1s")
    monkeypatch.setenv("DRAKIT_HEALTH__TAINT_UNHEALTHY", "true")
    s = load_settings(None)
    assert s.profile == "minimal-1s"
    assert s.health.taint_unhealthy is True


def test_explicit_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "node_name: from-file\nprofile: dgx-h100\n")
    s = load_settings(path, overrides={"node_name": "from-flag", "profile": None})
    assert s.node_name == "from-flag"
    assert s.profile == "dgx-h100"  # None means "flag not given"


def test_explicit_overrides_win_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRAKIT_NODE_NAME", "from-env")
    s = load_settings(None, overrides={"node_name": "from-flag"})
    assert s.node_name == "from-flag"


def test_environment_error_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAKIT_METRICS__PORT", "http")
    with pytest.raises(ConfigInvalid) as exc:
        load_settings(None)
    [(path, msg)] = exc.value.errors
    assert path == "metrics.port"
    assert "'http'" in msg


# -- the issue's example and other errors ------------------------------------------------------


def test_issue_example_bad_cpu_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 'plugins:\n  cpu:\n    reserved: "0-3,x"\n')
    code, out, err = validate(path, capsys)
    assert code == 2
    assert out == ""
    assert 'plugins.cpu.reserved: "0-3,x" is not a CPU list (example: "0-3,8")' in err
    assert len(err.strip().splitlines()) == 1


def test_valid_file_names_its_plugins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "plugins:\n  cpu:\n    reserved: 0-1,4\n  example_fpga:\n    count: 3\n")
    code, out, err = validate(path, capsys)
    assert (code, err) == (0, "")
    assert out.strip() == f"{path}: valid (cpu, example_fpga)"


def test_unknown_top_level_key_lists_known_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = validate(write(tmp_path, "nodename: n1\n"), capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert "nodename: unknown key" in line
    assert "known keys: " in line
    for key in ("node_name", "plugins", "discovery", "sysfs_root"):
        assert key in line


def test_unknown_nested_key_lists_known_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = validate(write(tmp_path, "health:\n  intervall: 3\n"), capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert "health.intervall: unknown key" in line
    assert "(known keys: interval, resend, taint_unhealthy)" in line


def test_unknown_plugin_key_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = validate(write(tmp_path, "plugins:\n  cpu:\n    reserve: 0-1\n"), capsys)
    assert code == 2
    assert "plugins.cpu.reserve: unknown key" in err


def test_unknown_plugin_key_lists_known_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, err = validate(write(tmp_path, "plugins:\n  cpu:\n    reserve: 0-1\n"), capsys)
    assert "known keys: " in err
    assert "reserved" in err.split("known keys: ")[1]


def test_bad_types_name_path_and_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "metrics:\n  port: eighty\nlog_level: LOUD\n")
    code, _, err = validate(path, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2
    assert any(line.startswith(f"{path}: metrics.port: ") and "'eighty'" in line for line in lines)
    assert any(line.startswith(f"{path}: log_level: ") and "'LOUD'" in line for line in lines)


def test_bad_plugin_setting_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = validate(write(tmp_path, "plugins:\n  example_fpga:\n    count: -1\n"), capsys)
    assert code == 2
    assert "plugins.example_fpga.count: " in err
    assert "-1" in err


def test_every_error_is_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(
        tmp_path,
        "nodename: n1\n"
        "discovery:\n"
        "  interval: soon\n"
        "plugins:\n"
        "  cpu:\n"
        '    reserved: "0-3,x"\n'
        "    mode: clustered\n"
        "  not_a_plugin: {}\n",
    )
    code, out, err = validate(path, capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    paths = [line.removeprefix(f"{path}: ").split(":")[0] for line in lines]
    assert sorted(paths) == sorted(
        [
            "nodename",
            "discovery.interval",
            "plugins.cpu.reserved",
            "plugins.cpu.mode",
            "plugins.not_a_plugin",
        ]
    )


def test_plugin_not_installed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = validate(write(tmp_path, "plugins:\n  cpu: {}\n  tpu: {}\n"), capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert "plugins.tpu: plugin not installed" in line
    for e in installed_plugins():
        assert e.name in line


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = validate(tmp_path / "absent.yaml", capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert "cannot read" in line
    assert "absent.yaml" in line


def test_not_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = validate(write(tmp_path, "plugins: [cpu\n"), capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert "not valid YAML at line 2" in line
    assert "Traceback" not in err


def test_top_level_not_a_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = validate(write(tmp_path, "- cpu\n- amd_ainic\n"), capsys)
    assert code == 2
    assert "the top level must be a mapping of settings, got list" in err


def test_load_settings_raises_with_every_error(tmp_path: Path) -> None:
    path = write(tmp_path, "health:\n  resend: 45\n  interval: 0\n")
    with pytest.raises(ConfigInvalid) as exc:
        load_settings(path)
    assert exc.value.source == str(path)
    assert sorted(p for p, _ in exc.value.errors) == ["health.interval", "health.resend"]
    assert all(line.startswith("health.") for line in exc.value.lines())


# -- bounds: every number a range, every list and name a size, the file a depth ---------------


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("health:\n  interval: .inf\n", "health.interval: Input should be a finite number"),
        ("health:\n  interval: .nan\n", "health.interval: Input should be a finite number"),
        ("health:\n  interval: 0.001\n", "health.interval: Input should be greater than or equal"),
        ("health:\n  interval: 1e12\n", "health.interval: Input should be less than or equal to"),
        ("health:\n  resend: 0.0001\n", "health.resend: Input should be greater than or equal"),
        ("discovery:\n  interval: .inf\n", "discovery.interval: Input should be a finite"),
        ("discovery:\n  interval: 0.01\n", "discovery.interval: Input should be greater than or"),
        ("metrics:\n  port: 99999\n", "metrics.port: Input should be less than or equal to 65535"),
        ('node_name: "Node_1"\n', "node_name: 'Node_1' is not a Kubernetes node name"),
        (f"node_name: {'n' * 300}\n", "node_name: 'nnnnnnnnnn"),
        (f"state_dir: /{'d' * 5000}\n", "state_dir: not a usable path (at most 4096 bytes"),
        (f"publish_strategy: {'s' * 300}\n", "publish_strategy: String should have at most 253"),
        ('plugins:\n  cpu:\n    reserved: "0-99999999999"\n', "CPU ids run from 0 to 8191"),
        ("plugins:\n  cpu:\n    driver: Acme_FPGA\n", "'Acme_FPGA' is not a DRA driver name"),
        ("plugins:\n  cpu:\n    driver: ../../x\n", "'../../x' is not a DRA driver name"),
        (f"plugins:\n  cpu:\n    strategy: {'s' * 300}\n", "String should have at most 253"),
    ],
)
def test_out_of_range_values_are_one_line_errors_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragment: str
) -> None:
    code, out, err = validate(write(tmp_path, text), capsys)
    assert (code, out) == (2, "")
    assert fragment in one_line(err)


def test_the_largest_cpu_id_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = validate(write(tmp_path, "plugins:\n  cpu:\n    reserved: 0-8191\n"), capsys)
    assert (code, err) == (0, "")


def test_a_long_cpu_list_is_refused_before_it_is_parsed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = ",".join(["0"] * 40000)  # 80 KB of CPU 0
    code, _, err = validate(write(tmp_path, f'plugins:\n  cpu:\n    reserved: "{text}"\n'), capsys)
    assert code == 2
    assert "too long (at most 65536)" in one_line(err)


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 100_000 + "]" * 100_000 + "\n",  # a RecursionError in PyYAML's composer
        "a:\n" + "".join(f"{'  ' * i}k{i}:\n" for i in range(1, 40)),
    ],
)
def test_deep_yaml_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    code, _, err = validate(write(tmp_path, text), capsys)
    assert code == 2
    assert "nested more than 32 levels deep at line" in one_line(err)


def test_a_huge_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = validate(write(tmp_path, "# " + "x" * (1 << 20) + "\n"), capsys)
    assert code == 2
    assert "the file is over 1024 KiB" in one_line(err)


def test_an_error_from_a_variable_names_the_variable_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "health:\n  resend: 45\n")
    monkeypatch.setenv("DRAKIT_HEALTH__INTERVAL", "inf")
    with pytest.raises(ConfigInvalid) as exc:
        load_settings(path)
    assert exc.value.source == f"{path} and environment"
    errors = dict(exc.value.errors)
    assert "DRAKIT_HEALTH__INTERVAL" in errors["health.interval"]
    assert "DRAKIT_" not in errors["health.resend"]

    monkeypatch.setenv("DRAKIT_PLUGINS", '{"cpu": {"reserved": "0-99999999999"}}')
    with pytest.raises(ConfigInvalid) as exc:
        load_settings(None)
    assert exc.value.source == "environment"
    assert "set by DRAKIT_HEALTH__INTERVAL" in str(exc.value)


def test_deep_json_in_a_variable_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAKIT_PLUGINS", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigInvalid) as exc:
        load_settings(None)
    assert len(exc.value.lines()) == 1


def test_a_key_with_a_newline_stays_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the property test: the unknown key was echoed raw, splitting the line."""
    code, _, err = validate(write(tmp_path, 'health:\n  "a\\nb": 1\n'), capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "health.'a\\nb': unknown key" in err
