"""The Helm chart, linted and rendered by the real helm CLI for every backend set.

What the server says about the rendered objects is in ``tests/e2e/test_chart.py``; here: the
chart renders, the schema refuses bad values naming the key, and what is rendered follows the
values (backends, privileges, drivers in the admission policy, drakit.yaml that drakit accepts).
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.clirun import run_cli
from tests.helmchart import (
    BACKEND_SETS,
    CHART,
    Helm,
    HelmError,
    backend_values,
    by_kind,
    helm_binary,
    one,
)

from drakit.host.settings import NriSettings

# The first test may build helm on a cold cache (make test builds it beforehand).
pytestmark = [pytest.mark.timeout(1800), pytest.mark.usefixtures("clean_drakit_env")]

DRIVERS = {
    "cpu": "cpu.drakit.io",
    "nvidia_gpu": "gpu.nvidia.drakit.io",
    "amd_gpu": "gpu.amd.drakit.io",
    "amd_ainic": "ainic.amd.drakit.io",
    "composite": "pairs.composite.drakit.io",
}
MEMBERS = ("nvidia_gpu", "amd_gpu", "amd_ainic")
TYPES = {
    "nvidia_gpu": ["gpu", "mig"],
    "amd_gpu": ["amdgpu", "amdgpu-partition"],
    "amd_ainic": ["pf", "vf", "shared"],
    "composite": ["gpu-nic-pair"],
}


def compact(types: list[str]) -> str:
    """A list as Helm's toJson writes it."""
    return json.dumps(types, separators=(",", ":"))


def driver_of(name: str, enabled: tuple[str, ...]) -> str:
    """With the composite enabled, its members publish under its driver (docs/composite.md)."""
    if "composite" in enabled and name in MEMBERS:
        return DRIVERS["composite"]
    return DRIVERS[name]


CLASSES = {
    "cpu": "cpu",
    "nvidia_gpu": "nvidia-gpu",
    "amd_gpu": "amd-gpu",
    "amd_ainic": "amd-ainic",
    "composite": "gpu-nic-pair",
}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    work = tmp_path_factory.mktemp("helm")
    try:
        binary = helm_binary()
    except HelmError as exc:
        pytest.fail(f"helm unavailable: {exc}", pytrace=False)
    yield Helm(binary, work)
    shutil.rmtree(work, ignore_errors=True)


def enabled_in(name: str) -> tuple[str, ...]:
    return BACKEND_SETS[name] or ("cpu",)


def drakit_yaml(objects: list[dict[str, Any]]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(one(objects, "ConfigMap")["data"]["drakit.yaml"])
    return loaded


def node_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][
        0
    ]
    return container


@pytest.mark.parametrize("backend_set", list(BACKEND_SETS))
def test_lint_strict(helm: Helm, backend_set: str) -> None:
    values = helm.values_file(backend_values(BACKEND_SETS[backend_set]), f"{backend_set}.yaml")
    proc = helm.run("lint", "--strict", str(CHART), "--values", str(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("backend_set", list(BACKEND_SETS))
def test_template_renders_the_backends(helm: Helm, backend_set: str) -> None:
    enabled = enabled_in(backend_set)
    objects = helm.template(backend_values(BACKEND_SETS[backend_set]))

    kinds = sorted({o["kind"] for o in objects})
    assert kinds == sorted(
        {
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
            "DeviceClass",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "Secret",
            "Deployment",
            "Service",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        }
    )
    # drakit.yaml loads the enabled backends in pluginOrder, each with its driver.
    plugins = drakit_yaml(objects)["plugins"]
    assert list(plugins) == list(enabled)
    drivers = {name: driver_of(name, enabled) for name in enabled}
    assert {name: section["driver"] for name, section in plugins.items()} == drivers
    # One DeviceClass per enabled backend, selecting its driver, and under a shared driver its
    # devices' types.
    classes = {
        c["metadata"]["name"]: [s["cel"]["expression"] for s in c["spec"]["selectors"]]
        for c in by_kind(objects, "DeviceClass")
    }
    shared = {n for n in enabled if list(drivers.values()).count(drivers[n]) > 1}
    # One selector each, the driver first (one CEL call per device for the scheduler).
    assert classes == {
        CLASSES[n]: [
            f'device.driver == "{drivers[n]}"'
            + (
                f' && (device.attributes["{drivers[n]}"].type in {compact(TYPES[n])})'
                if n in shared
                else ""
            )
        ]
        for n in enabled
    }
    # The admission policy lets the node driver write slices of exactly these drivers.
    policies = {
        p["metadata"]["name"].rsplit("-own-", 1)[1]: p
        for p in by_kind(objects, "ValidatingAdmissionPolicy")
    }
    assert set(policies) == {"node-slices", "node-labels"}
    policy = policies["node-slices"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert json.loads(variables["drivers"]) == list(dict.fromkeys(drivers.values()))


@pytest.mark.parametrize("backend_set", list(BACKEND_SETS))
def test_security_context_is_the_least_each_backend_needs(helm: Helm, backend_set: str) -> None:
    enabled = enabled_in(backend_set)
    objects = helm.template(backend_values(BACKEND_SETS[backend_set]))
    container = node_container(objects)
    ctx = container["securityContext"]
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    # NVML and amdkfd need the GPUs' device nodes; the AINIC backend sets VFs through netlink
    # in the host's network namespace and creates them through a writable /sys
    if set(enabled) & {"nvidia_gpu", "amd_gpu", "amd_ainic"}:
        assert ctx["privileged"] is True
    else:
        assert ctx["privileged"] is False
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["readOnlyRootFilesystem"] is True
    ainic = "amd_ainic" in enabled
    assert pod.get("hostNetwork", False) is ainic
    assert pod.get("dnsPolicy") == ("ClusterFirstWithHostNet" if ainic else None)
    sys_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/sys")
    assert sys_mount["readOnly"] is not ainic
    webhook = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert webhook["securityContext"]["runAsNonRoot"] is True
    assert webhook["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_daemonset_mounts_probes_and_updates(helm: Helm) -> None:
    objects = helm.template({"kubeletDir": "/srv/kubelet", "cdiDir": "/etc/cdi"})
    ds = one(objects, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    container = node_container(objects)
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert pod["priorityClassName"] == "system-node-critical"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host == {
        "plugins-registry": "/srv/kubelet/plugins_registry",
        "plugins": "/srv/kubelet/plugins",
        "cdi": "/etc/cdi",
        "state": "/var/lib/drakit",
        "sys": "/sys",
    }
    for name, path in host.items():
        assert mounts[name]["mountPath"] == path
    assert mounts["sys"]["readOnly"] is True
    assert "--kubelet-dir=/srv/kubelet" in container["args"]
    assert "--cdi-dir=/etc/cdi" in container["args"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_UID": "metadata.uid"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}


@pytest.mark.parametrize(
    ("root", "dev"), [("/", "/dev"), ("/run/nvidia/driver/", "/run/nvidia/driver/dev")]
)
def test_backends_with_device_nodes_see_the_hosts_device_root(
    helm: Helm, root: str, dev: str
) -> None:
    """The CDI specs name nodes under deviceRoot; the pod mounts them to check them at prepare."""
    objects = helm.template({"deviceRoot": root, "backends": {"nvidia_gpu": {"enabled": True}}})
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    container = node_container(objects)
    assert f"--device-root={root}" in container["args"]
    assert "--device-root-mount=/var/run/drakit/device-root" in container["args"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "dev"]
    assert volume["hostPath"] == {"path": dev, "type": "Directory"}
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "dev"]
    assert mount == {
        "name": "dev",
        "mountPath": "/var/run/drakit/device-root/dev",
        "readOnly": True,
        "mountPropagation": "HostToContainer",
    }
    # CPUs alone hand out no device nodes: nothing of the host's /dev is mounted
    cpu_only = node_container(helm.template())
    assert "dev" not in {m["name"] for m in cpu_only["volumeMounts"]}
    assert not any(a.startswith("--device-root-mount") for a in cpu_only["args"])


def test_webhook_configurations(helm: Helm) -> None:
    objects = helm.template()
    mutating = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    validating = one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    secret = one(objects, "Secret")
    assert mutating["clientConfig"]["service"]["path"] == "/mutate-pods"
    assert validating["clientConfig"]["service"]["path"] == "/validate-claims"
    # The chart made the CA, and both configurations trust it.
    assert mutating["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert validating["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert mutating["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert "composite.drakit.io/gpu-nic-pairs" in mutating["matchConditions"][0]["expression"]
    assert validating["rules"][0]["resources"] == [
        "resourceclaims",
        "resourceclaimtemplates",
        "deviceclasses",
    ]
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:1] == ["webhook"]
    assert "--port=8443" in args


def test_webhook_has_no_side_effects_and_may_authenticate_the_api_server(helm: Helm) -> None:
    objects = helm.template()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert one(objects, kind)["webhooks"][0]["sideEffects"] == "None"
    assert not [o for o in by_kind(objects, "ConfigMap") if "admission" in o["metadata"]["name"]]

    objects = helm.template({"webhook": {"clientAuth": {"enabled": True}}})
    client = next(o for o in by_kind(objects, "Secret") if o["metadata"]["name"].endswith("client"))
    assert set(client["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--client-ca=/etc/drakit/client-ca/ca.crt" in args
    assert "--client-name=drakit-apiserver" in args
    [volume] = [v for v in pod["volumes"] if v["name"] == "client-ca"]
    # the pod gets the CA only, never the API server's key
    assert volume["secret"] == {
        "secretName": client["metadata"]["name"],
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    [shipped] = [o for o in by_kind(objects, "ConfigMap") if "admission" in o["metadata"]["name"]]
    admission = yaml.safe_load(shipped["data"]["admission-config.yaml"])
    assert admission["kind"] == "AdmissionConfiguration"
    assert {p["name"] for p in admission["plugins"]} == {
        "ValidatingAdmissionWebhook",
        "MutatingAdmissionWebhook",
    }
    kubeconfig = yaml.safe_load(shipped["data"]["webhook-kubeconfig.yaml"])
    [user] = kubeconfig["users"]
    assert user["name"] == "drakit-drakit-webhook.drakit.svc"  # the service the API server calls
    assert user["user"]["client-certificate"] == "/etc/kubernetes/drakit-webhook/tls.crt"

    objects = helm.template(
        {"webhook": {"clientAuth": {"enabled": True, "source": "secret", "caSecret": "mine"}}}
    )
    assert not [o for o in by_kind(objects, "Secret") if o["metadata"]["name"].endswith("client")]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert [v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "client-ca"] == [
        "mine"
    ]


def test_cert_manager_tls(helm: Helm) -> None:
    objects = helm.template({"webhook": {"tls": {"source": "certManager"}}})
    assert sorted(o["kind"] for o in objects if o["apiVersion"] == "cert-manager.io/v1") == [
        "Certificate",
        "Issuer",
    ]
    assert not by_kind(objects, "Secret")
    annotation = one(objects, "ValidatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotation == {"cert-manager.io/inject-ca-from": "drakit/drakit-drakit-webhook"}


def test_webhook_can_be_left_out(helm: Helm) -> None:
    objects = helm.template({"webhook": {"enabled": False}})
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"Deployment", "Service", "Secret", "MutatingWebhookConfiguration"}
    assert [o["metadata"]["name"] for o in by_kind(objects, "ServiceAccount")] == [
        "drakit-drakit-node"
    ]


def test_extended_resource_names(helm: Helm) -> None:
    objects = helm.template(
        {
            "backends": {"cpu": {"deviceClass": {"extendedResourceName": "drakit.io/cpu"}}},
            "extraDeviceClasses": [
                {"name": "gpu-nic-pair-numa0", "driver": "pairs.composite.drakit.io"}
            ],
        }
    )
    specs = {c["metadata"]["name"]: c["spec"] for c in by_kind(objects, "DeviceClass")}
    assert specs["cpu"]["extendedResourceName"] == "drakit.io/cpu"
    assert "extendedResourceName" not in specs["gpu-nic-pair-numa0"]


@pytest.mark.parametrize("version", ["1.34.0", "1.35.0", "1.36.0", "1.37.2"])
def test_supported_kubernetes_versions(helm: Helm, version: str) -> None:
    assert helm.template(extra=["--kube-version", version])


def test_older_kubernetes_is_refused(helm: Helm) -> None:
    with pytest.raises(HelmError, match=r"requires kubeVersion: >=1\.34"):
        helm.template(extra=["--kube-version", "1.33.0"])


BAD_VALUES = [
    pytest.param({"backends": {"cpu": {"enabled": "yes"}}}, "/backends/cpu/enabled", id="type"),
    pytest.param({"nodeSelector": {"a": "b"}}, "nodeSelector", id="unknown-key"),
    pytest.param({"backends": {"cpu": {"driver": "CPU_driver"}}}, "/backends/cpu/driver", id="drv"),
    pytest.param({"kubeletDir": "var/lib/kubelet"}, "/kubeletDir", id="relative-path"),
    pytest.param({"deviceRoot": "run/nvidia"}, "/deviceRoot", id="relative-device-root"),
    pytest.param({"webhook": {"failurePolicy": "Sometimes"}}, "/webhook/failurePolicy", id="enum"),
    pytest.param({"metrics": {"port": 70000}}, "/metrics/port", id="port"),
    pytest.param({"config": {"plugins": {"cpu": {}}}}, "plugins", id="plugins-in-config"),
    pytest.param(
        {"backends": {"cpu": {"deviceClass": {"extendedResourceName": "cpu"}}}},
        "/backends/cpu/deviceClass/extendedResourceName",
        id="extended-resource-name",
    ),
]


@pytest.mark.parametrize(("values", "field"), BAD_VALUES)
def test_schema_refuses_bad_values(helm: Helm, values: dict[str, Any], field: str) -> None:
    with pytest.raises(HelmError) as info:
        helm.template(values)
    message = str(info.value)
    assert "values don't meet the specifications of the schema" in message
    assert field in message


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"backends": {"cpu": {"enabled": False}}},
            "backends: no backend is enabled; set backends.<name>.enabled=true",
            id="no-backend",
        ),
        pytest.param(
            {"pluginOrder": ["cpu", "tpu"]},
            'pluginOrder: "tpu" has no entry in backends',
            id="order-unknown",
        ),
        pytest.param(
            {"webhook": {"tls": {"source": "secret"}}},
            "webhook.tls.source=secret needs webhook.tls.secretName",
            id="tls-secret",
        ),
    ],
)
def test_template_refuses_inconsistent_values(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError, match=message.replace(".", r"\.").replace("<", ".")):
        helm.template(values)


def installed(plugins: tuple[str, ...]) -> list[str]:
    names = {ep.name for ep in importlib.metadata.entry_points(group="drakit.plugins")}
    return [p for p in plugins if p not in names]


@pytest.mark.parametrize("backend_set", list(BACKEND_SETS))
def test_rendered_config_is_valid_for_drakit(
    helm: Helm, backend_set: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    enabled = enabled_in(backend_set)
    assert installed(enabled) == [], "every backend the chart offers is a workspace member"
    config = tmp_path / "drakit.yaml"
    objects = helm.template(backend_values(BACKEND_SETS[backend_set]))
    config.write_text(one(objects, "ConfigMap")["data"]["drakit.yaml"])
    code, out, err = run_cli(["config", "validate", str(config)], capsys)
    assert (code, err) == (0, "")
    assert out == f"{config}: valid ({', '.join(enabled)})\n"


def _printed_and_rendered_classes(
    objects: list[dict[str, Any]], config: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Class name -> spec, as ``drakit deviceclasses --config`` prints them and as rendered."""
    code, out, err = run_cli(["deviceclasses", "--config", str(config), "-o", "json"], capsys)
    assert (code, err) == (0, "")
    printed = json.loads(out)
    items = printed["items"] if isinstance(printed, dict) else printed
    want = {c["metadata"]["name"]: c["spec"] for c in items}
    got = {c["metadata"]["name"]: c["spec"] for c in by_kind(objects, "DeviceClass")}
    return want, got


def test_device_classes_match_drakit_deviceclasses(
    helm: Helm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart's DeviceClasses are the objects ``drakit deviceclasses`` prints."""
    assert installed(BACKEND_SETS["all"]) == []
    values = backend_values(BACKEND_SETS["all"])
    # the per-NUMA pair classes, as values.yaml documents them for a 2-NUMA node
    values["extraDeviceClasses"] = [
        {
            "name": f"gpu-nic-pair-numa{k}",
            "driver": "pairs.composite.drakit.io",
            "types": ["gpu-nic-pair"],
            "numaNode": k,
            "extendedResourceName": f"composite.drakit.io/gpu-nic-pair-numa{k}",
        }
        for k in (0, 1)
    ]
    objects = helm.template(values)
    config = tmp_path / "drakit.yaml"
    config.write_text(one(objects, "ConfigMap")["data"]["drakit.yaml"])
    want, got = _printed_and_rendered_classes(objects, config, capsys)
    assert {"gpu-nic-pair-numa0", "gpu-nic-pair-numa1", "gpu-nic-pair", "cpu"} <= set(got)
    assert {name: want.get(name) for name in got} == got


def test_locked_in_shares_from_values(
    helm: Helm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Locked-in CPU shares (docs/composite.md) configured through values alone.

    The CPU backend becomes a composite member (its devices told apart by ``type``), the
    composite divides it and makes no pairs, and its own class is the share class: what the
    chart renders is what ``drakit deviceclasses`` prints and a drakit.yaml that ``drakit config
    validate`` accepts.
    """
    values: dict[str, Any] = backend_values(("cpu", "composite"))
    values["backends"]["cpu"]["deviceClass"] = {"name": "cpu", "types": ["cpu-group", "cpu"]}
    values["backends"]["composite"].update(
        members=["cpu"],
        config={
            "gpu_plugins": [],
            "nic_plugins": [],
            "locked": [{"plugin": "cpu", "capacity": "cpu", "shares": 4}],
        },
        deviceClass={
            "name": "cpu-share",
            "types": ["cpu-share"],
            "extendedResourceName": "composite.drakit.io/cpu-share",
        },
    )
    objects = helm.template(values)
    config = tmp_path / "drakit.yaml"
    config.write_text(one(objects, "ConfigMap")["data"]["drakit.yaml"])
    assert drakit_yaml(objects)["plugins"]["composite"]["locked"][0]["shares"] == 4
    code, _out, err = run_cli(["config", "validate", str(config)], capsys)
    assert (code, err) == (0, "")
    want, got = _printed_and_rendered_classes(objects, config, capsys)
    assert set(got) == set(want) == {"cpu", "cpu-share"}
    assert got == want
    assert got["cpu-share"]["extendedResourceName"] == "composite.drakit.io/cpu-share"
    exprs = {n: [s["cel"]["expression"] for s in spec["selectors"]] for n, spec in got.items()}
    assert any('["cpu-share"]' in e for e in exprs["cpu-share"])
    assert any('["cpu-group","cpu"]' in e for e in exprs["cpu"])  # the groups, not the shares


def test_nri_mounts_the_runtimes_socket_directory_only_when_enabled(helm: Helm) -> None:
    """With config.nri.enabled the node driver reaches the runtime's NRI socket (docs/nri.md)."""
    off = one(helm.template(), "DaemonSet")["spec"]["template"]["spec"]
    assert "nri" not in {v["name"] for v in off["volumes"]}
    objects = helm.template({"config": {"nri": {"enabled": True, "socket": "/run/nri/x.sock"}}})
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "nri"]
    assert volume["hostPath"] == {"path": "/run/nri", "type": "Directory"}
    [mount] = [m for m in node_container(objects)["volumeMounts"] if m["name"] == "nri"]
    assert mount["mountPath"] == "/run/nri"
    nri = drakit_yaml(objects)["nri"]
    assert nri == {
        "enabled": True,
        "socket": "/run/nri/x.sock",
        "fail_closed": True,
        "memory_nodes": False,
    }
    assert NriSettings.model_validate(nri).socket == Path("/run/nri/x.sock")


def test_pod_network_namespaces_are_mounted_for_netdev_moves_only_with_nri_and_the_nic(
    helm: Helm,
) -> None:
    """With NRI and the AINIC backend, the node driver opens the netns paths NRI reports."""

    def netns(values: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        objects = helm.template(values)
        pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
        volumes = [v for v in pod["volumes"] if v["name"] == "netns"]
        mounts = [m for m in node_container(objects)["volumeMounts"] if m["name"] == "netns"]
        return volumes, mounts

    nic = {"backends": {"amd_ainic": {"enabled": True}}}
    assert netns(nic) == ([], []), "without NRI nothing moves"
    nri = {"config": {"nri": {"enabled": True}}}
    assert netns(nri) == ([], []), "without a backend that moves netdevs"
    volumes, mounts = netns({**nic, **nri})
    assert volumes == [
        {"name": "netns", "hostPath": {"path": "/var/run/netns", "type": "DirectoryOrCreate"}}
    ]
    assert mounts == [
        {
            "name": "netns",
            "mountPath": "/var/run/netns",
            "mountPropagation": "HostToContainer",
            "readOnly": True,
        }
    ]


@pytest.mark.parametrize("root", ["/", "/run/nvidia/driver"])
def test_the_nvidia_backend_mounts_the_driver_root_read_only_and_is_told_where(
    helm: Helm, root: str
) -> None:
    """backends.nvidia_gpu.driverRoot: mounted, and plugins.nvidia_gpu's roots set to match."""
    values: dict[str, Any] = {"backends": {"nvidia_gpu": {"enabled": True, "driverRoot": root}}}
    objects = helm.template(values)
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "nvidia-driver-root"]
    assert volume["hostPath"] == {"path": root, "type": "DirectoryOrCreate"}
    [mount] = [m for m in node_container(objects)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {
        "name": "nvidia-driver-root",
        "mountPath": "/var/run/drakit/driver-root",
        "readOnly": True,
        "mountPropagation": "HostToContainer",
    }
    section = drakit_yaml(objects)["plugins"]["nvidia_gpu"]
    assert section["driver_root"] == root
    assert section["driver_root_seen"] == mount["mountPath"]
    # nvidia-ctk finds the host's dev/ where the device-root mount puts it
    [dev] = [m for m in node_container(objects)["volumeMounts"] if m["name"] == "dev"]
    assert section["toolkit_dev_root"] + "/dev" == dev["mountPath"]
    # without the NVIDIA backend nothing of the driver is mounted
    cpu_only = node_container(helm.template())
    assert "nvidia-driver-root" not in {m["name"] for m in cpu_only["volumeMounts"]}


def test_a_simulated_root_holds_the_nvidia_driver_root(helm: Helm) -> None:
    objects = helm.template(
        {"simulatedRoot": "/srv/sim", "backends": {"nvidia_gpu": {"enabled": True}}}
    )
    assert "nvidia-driver-root" not in {m["name"] for m in node_container(objects)["volumeMounts"]}
    section = drakit_yaml(objects)["plugins"]["nvidia_gpu"]
    assert section["driver_root"] == "/"
    assert "driver_root_seen" not in section


@pytest.mark.parametrize("key", ["driver_root", "driver_root_seen", "toolkit_dev_root"])
def test_the_nvidia_driver_root_is_set_through_driver_root_only(helm: Helm, key: str) -> None:
    values = {"backends": {"nvidia_gpu": {"enabled": True, "config": {key: "/opt/x"}}}}
    set_by_chart = rf"backends\.nvidia_gpu\.config\.{key} is set by the chart"
    with pytest.raises(HelmError, match=set_by_chart):
        helm.template(values)
    with pytest.raises(HelmError, match="driverRoot"):
        helm.template({"backends": {"nvidia_gpu": {"enabled": True, "driverRoot": "relative"}}})
