"""Pytest plugin: a real control plane for the ``e2e`` tests.

Fixtures:
    control_plane: session-scoped :class:`ControlPlane` (etcd, kube-apiserver,
        kube-controller-manager, kube-scheduler), stopped at the end of the run even
        when tests fail.
    kube_api: a ``kubernetes.client.ApiClient`` for the admin kubeconfig.
    kube_dynamic: a ``kubernetes.dynamic.DynamicClient`` on top of it.
    kube: drakit's own :class:`~drakit.kube.KubeClient` for the admin kubeconfig, one per
        test module.
    namespace: a fresh namespace per test; its pods are force-deleted and the
        namespace deleted afterwards.
    fake_node: factory creating schedulable fake Nodes, removed (with their
        ResourceSlices) after the test.
    kubelet_standin: a :class:`KubeletStandIn` for the stand-in binary.
    kueue_dir: the Kueue build (``hack/kueue/build.sh``), built after collection when tests
        marked ``kueue`` are selected; ``tests/e2e/kueueproc.py`` runs it.
    real_node: session-scoped :class:`~tests.e2e.realnode.RealNode` (containerd, runc, CNI and
        the real kubelet, registered and Ready), for tests marked ``real_node``; its binaries
        and images are built after collection when such tests are selected.

Binaries are resolved (and built if needed, which only happens on a cold cache)
once after collection when e2e tests are selected, so the build is not subject
to per-test timeouts. ``DRAKIT_K8S_BIN_DIR`` points at prebuilt binaries.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import (
    STANDIN_BINARY,
    ControlPlane,
    ControlPlaneError,
    KubeletStandIn,
    fresh_namespace,
    resolve_bin_dir,
)
from tests.e2e.kueueproc import KueueError, resolve_kueue_dir
from tests.e2e.realnode import RealNode, RealNodeError, build_images, resolve_node_bin_dir

from drakit.kube import KubeClient

_BIN_DIR = pytest.StashKey[Path]()
_BIN_ERROR = pytest.StashKey[str]()
_NODE_BUILD = pytest.StashKey[tuple[Path, Path]]()
_NODE_ERROR = pytest.StashKey[str]()
_STARTED = pytest.StashKey[ControlPlane]()
_KUEUE_DIR = pytest.StashKey[Path]()
_KUEUE_ERROR = pytest.StashKey[str]()

FakeNodeFactory = Callable[..., dict[str, Any]]


def _is_e2e(item: pytest.Item) -> bool:
    return item.get_closest_marker("e2e") is not None


def _announce(config: pytest.Config, message: str) -> None:
    """Write a line to the terminal even while output is captured."""
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if capman is None or reporter is None:
        sys.stderr.write(message + "\n")
        return
    with capman.global_and_fixture_disabled():
        reporter.write_line(message)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Resolve (or build) the control-plane binaries when e2e tests will run."""
    config = session.config
    if config.option.collectonly or not any(_is_e2e(item) for item in session.items):
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    # build.sh reports progress on stderr; a cold build takes a while, so show it.
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        try:
            config.stash[_BIN_DIR] = resolve_bin_dir(build=True)
        except (ControlPlaneError, OSError, subprocess.SubprocessError) as exc:
            config.stash[_BIN_ERROR] = str(exc)
        if any(item.get_closest_marker("real_node") for item in session.items):
            try:
                config.stash[_NODE_BUILD] = (resolve_node_bin_dir(build=True), build_images())
            except (RealNodeError, OSError, subprocess.SubprocessError) as exc:
                config.stash[_NODE_ERROR] = str(exc)
        if any(item.get_closest_marker("kueue") for item in session.items):
            try:
                config.stash[_KUEUE_DIR] = resolve_kueue_dir(build=True)
            except (KueueError, OSError, subprocess.SubprocessError) as exc:
                config.stash[_KUEUE_ERROR] = str(exc)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Report start-up time and where the control-plane logs are."""
    cp = config.stash.get(_STARTED, None)
    if cp is not None:
        report = cp.report
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in report.components.items())
        terminalreporter.write_sep("-", "drakit e2e control plane")
        terminalreporter.write_line(f"started in {report.total_seconds:.1f}s ({parts})")
        terminalreporter.write_line(f"feature gates: {report.feature_gates or '(defaults)'}")
        terminalreporter.write_line(f"logs: {cp.logs_dir}")
    error = config.stash.get(_BIN_ERROR, None)
    if error is not None:
        terminalreporter.write_sep("-", "drakit e2e control plane")
        terminalreporter.write_line(f"not available: {error}")


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """The running control plane, shared by the whole test session."""
    config = request.config
    if _BIN_ERROR in config.stash:
        pytest.fail(
            f"control plane binaries unavailable: {config.stash[_BIN_ERROR]}", pytrace=False
        )
    bin_dir = config.stash.get(_BIN_DIR, None) or resolve_bin_dir(build=False)
    cp = ControlPlane(bin_dir)
    _announce(config, f"\n[drakit e2e] starting control plane from {bin_dir}; logs: {cp.logs_dir}")
    try:
        cp.start()
    except ControlPlaneError as exc:
        pytest.fail(f"control plane did not start: {exc}", pytrace=False)
    config.stash[_STARTED] = cp
    _announce(
        config, f"[drakit e2e] control plane ready in {cp.report.total_seconds:.1f}s at {cp.server}"
    )
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kube_api(control_plane: ControlPlane) -> Iterator[Any]:
    """A ``kubernetes.client.ApiClient`` for the admin kubeconfig."""
    from kubernetes import config as kube_config

    api = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(control_plane.kubeconfig)
    )
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="module")
def kube(control_plane: ControlPlane) -> Iterator[KubeClient]:
    """drakit's API client for the admin kubeconfig (one per test module)."""
    client = KubeClient.from_kubeconfig(control_plane.kubeconfig)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def kube_dynamic(kube_api: Any, control_plane: ControlPlane) -> Any:
    """A ``kubernetes.dynamic.DynamicClient`` (discovery cached in the run dir)."""
    from kubernetes.dynamic import DynamicClient

    return DynamicClient(  # type: ignore[no-untyped-call]
        kube_api, cache_file=str(control_plane.run_dir / "discovery.json")
    )


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace; pods are force-deleted and the namespace removed after the test.

    Without a kubelet, gracefully deleted pods never go away, so teardown deletes
    them with ``gracePeriodSeconds=0`` first.
    """
    with fresh_namespace(control_plane) as name:
        yield name


@pytest.fixture
def fake_node(control_plane: ControlPlane) -> Iterator[FakeNodeFactory]:
    """Factory: ``fake_node(name=None, *, labels=..., cpu=..., memory=..., pods=...)``.

    Returns the created Node JSON. Nodes and their ResourceSlices are deleted after
    the test.
    """
    created: list[str] = []

    def make(name: str | None = None, **kwargs: Any) -> dict[str, Any]:
        node_name = name or f"node-{uuid.uuid4().hex[:6]}"
        node = control_plane.create_node(node_name, **kwargs)
        created.append(node_name)
        return node

    try:
        yield make
    finally:
        for node_name in created:
            control_plane.delete_node(node_name)


@pytest.fixture(scope="session")
def kubelet_standin(control_plane: ControlPlane) -> KubeletStandIn:
    """The kubelet stand-in, preconfigured with the admin kubeconfig."""
    binary = control_plane.binary(STANDIN_BINARY)
    if not binary.exists():
        pytest.fail(f"{binary} missing; hack/control-plane/build.sh builds it", pytrace=False)
    return KubeletStandIn(binary, control_plane.kubeconfig)


@pytest.fixture(scope="session")
def kueue_dir(request: pytest.FixtureRequest) -> Path:
    """The Kueue build (``bin/kueue``, ``crd/``, ``webhook/``), for tests marked ``kueue``."""
    config = request.config
    if _KUEUE_ERROR in config.stash:
        pytest.fail(f"Kueue unavailable: {config.stash[_KUEUE_ERROR]}", pytrace=False)
    return config.stash.get(_KUEUE_DIR, None) or resolve_kueue_dir(build=False)


@pytest.fixture(scope="session")
def real_node(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[RealNode]:
    """A real node (containerd + kubelet) registered with the control plane and Ready."""
    config = request.config
    if _NODE_ERROR in config.stash:
        pytest.fail(f"real node unavailable: {config.stash[_NODE_ERROR]}", pytrace=False)
    node_bin, images = config.stash.get(_NODE_BUILD, None) or (
        resolve_node_bin_dir(build=False),
        build_images(),
    )
    node = RealNode(control_plane, node_bin, [images / "test.tar"])
    try:
        node.start()
    except (RealNodeError, TimeoutError) as exc:
        pytest.fail(f"real node did not start: {exc}", pytrace=False)
    _announce(
        config,
        f"[drakit e2e] real node {node.name} Ready in {node.timings['ready']:.1f}s; "
        f"logs: {node.logs_dir}",
    )
    try:
        yield node
    finally:
        node.stop()
