"""The committed protobuf stubs (kubelet, NRI) are exactly what hack/gen-protos.py generates."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "core" / "src"
PROTO_DIR = SRC / "drakit" / "kubelet" / "_proto"
NRI_PROTO_DIR = SRC / "drakit" / "nri" / "_proto"
GENERATOR = REPO / "hack" / "gen-protos.py"
FIX = "the committed stubs are stale: run `uv run python hack/gen-protos.py` and commit the result"


def _generated(directory: Path) -> dict[str, str]:
    return {
        p.name: p.read_text(encoding="utf-8")
        for p in sorted(directory.iterdir())
        if p.name.endswith(("_pb2.py", "_pb2_grpc.py", "_pb2.pyi", "_pb2_grpc.pyi"))
    }


@pytest.fixture(scope="module")
def regenerated_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("protos")
    proc = subprocess.run(
        [sys.executable, str(GENERATOR), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"hack/gen-protos.py failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.mark.parametrize("committed_dir", [PROTO_DIR, NRI_PROTO_DIR], ids=["kubelet", "nri"])
def test_committed_stubs_match_the_generator(regenerated_root: Path, committed_dir: Path) -> None:
    regenerated = _generated(regenerated_root / committed_dir.relative_to(SRC))
    committed = _generated(committed_dir)
    assert sorted(committed) == sorted(regenerated), FIX
    stale = [name for name, text in regenerated.items() if committed[name] != text]
    assert stale == [], f"{FIX} (differs: {', '.join(stale)})"


def test_nri_api_proto_is_the_pinned_one() -> None:
    # containerd v2.4.2 embeds NRI v0.12.3; the digest is the file's in that Go module.
    spec = importlib.util.spec_from_file_location("gen_protos", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.NRI_VERSION == "v0.12.3"
    digest = hashlib.sha256((NRI_PROTO_DIR / "api.proto").read_bytes()).hexdigest()
    assert digest == gen.NRI_API_PROTO_SHA256, (
        "core/src/drakit/nri/_proto/api.proto differs from NRI's: "
        "run `uv run python hack/gen-protos.py --fetch-nri`"
    )


def test_nri_stubs_have_no_grpc() -> None:
    # NRI speaks ttrpc; drakit.nri must not need grpc.
    names = {p.name for p in NRI_PROTO_DIR.iterdir()}
    assert {"api_pb2.py", "api_pb2.pyi", "ttrpc_pb2.py", "ttrpc_pb2.pyi"} <= names
    assert not [n for n in names if "grpc" in n]


def test_every_proto_has_stubs() -> None:
    stems = {p.stem for p in PROTO_DIR.glob("*.proto")}
    assert stems == {"pluginregistration", "dra_v1", "dra_v1beta1", "health_v1alpha1", "health_v1"}
    committed = _generated(PROTO_DIR)
    for stem in stems:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi"):
            assert stem + suffix in committed, f"{stem}{suffix} missing: {FIX}"


def test_generated_imports_are_package_relative() -> None:
    absolute = re.compile(r"^(import \w+_pb2|from drakit\.\w+\._proto import)", re.MULTILINE)
    for directory in (PROTO_DIR, NRI_PROTO_DIR):
        for name, text in _generated(directory).items():
            assert not absolute.search(text), f"{name} imports a sibling absolutely: {FIX}"


@pytest.mark.parametrize(
    ("module", "full_name"),
    [
        ("pluginregistration_pb2", "pluginregistration.Registration"),
        ("dra_v1_pb2", "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"),
        ("dra_v1beta1_pb2", "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"),
        ("health_v1alpha1_pb2", "v1alpha1.DRAResourceHealth"),
        ("health_v1_pb2", "v1.DRAResourceHealth"),
    ],
)
def test_wire_service_names(module: str, full_name: str) -> None:
    mod = importlib.import_module(f"drakit.kubelet._proto.{module}")
    services = mod.DESCRIPTOR.services_by_name
    assert [s.full_name for s in services.values()] == [full_name]


def test_wire_field_numbers() -> None:
    from drakit.kubelet._proto import dra_v1_pb2, dra_v1beta1_pb2, health_v1alpha1_pb2

    def numbers(message: object) -> dict[str, int]:
        fields = message.DESCRIPTOR.fields  # type: ignore[attr-defined]
        return {f.name: f.number for f in fields}

    for api in (dra_v1_pb2, dra_v1beta1_pb2):
        assert numbers(api.Claim) == {"namespace": 1, "uid": 2, "name": 3}
        assert numbers(api.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
    device_v1 = {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert numbers(dra_v1_pb2.Device) == device_v1
    assert numbers(dra_v1beta1_pb2.Device) == {
        k: v for k, v in device_v1.items() if k != "share_id"
    }
    assert numbers(health_v1alpha1_pb2.DeviceHealth) == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }
