"""Regenerate drakit's protobuf stubs from the .proto files committed next to them.

Two packages hold .proto files:

- ``drakit/kubelet/_proto``: the kubelet's gRPC APIs (messages and gRPC stubs);
- ``drakit/nri/_proto``: NRI's ``api.proto``, pinned to the NRI version containerd ships, and
  ttrpc's envelope (messages only: NRI speaks ttrpc, not gRPC, and drakit.nri imports no grpc).

Usage (from the repository root)::

    uv run python hack/gen-protos.py            # rewrite the committed stubs
    uv run python hack/gen-protos.py --out DIR   # write them under DIR/<package> (tests)
    uv run python hack/gen-protos.py --fetch-nri # re-fetch api.proto from the Go proxy first

``--fetch-nri`` runs ``go mod download`` for ``github.com/containerd/nri`` at :data:`NRI_VERSION`
and copies its ``pkg/api/api.proto`` after checking :data:`NRI_API_PROTO_SHA256`; to move to
another NRI version, change both and regenerate.

It runs protoc from grpcio-tools with the mypy-protobuf plugins, so the output depends only on the
versions pinned in uv.lock. protoc writes absolute imports (``from drakit.kubelet._proto import
x_pb2``); they are rewritten to package-relative ones (``from . import x_pb2``) so that the
generated modules only ever import each other as ``<package>.*``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.resources
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SRC_ROOT = REPO_ROOT / "core" / "src"
# Each package with .proto files, and whether it gets gRPC stubs too.
PACKAGES: dict[str, bool] = {"drakit.kubelet._proto": True, "drakit.nri._proto": False}

# NRI's api.proto: the version containerd v2.4.2 embeds (its go.mod), and the file's digest there.
NRI_MODULE = "github.com/containerd/nri"
NRI_VERSION = "v0.12.3"
NRI_API_PROTO_SHA256 = "b0dd9ea3b722e6e4a8d626a5164d4dfc1e72ffd176e7633cff3a70fd061cbc09"
NRI_PROTO_DIR = SRC_ROOT / "drakit" / "nri" / "_proto"

_BARE_IMPORT = re.compile(r"^import (\w+_pb2)( as \w+)?$", re.MULTILINE)


def package_dir(package: str, root: Path = SRC_ROOT) -> Path:
    """The directory of a dotted package under ``root``."""
    return root.joinpath(*package.split("."))


def _plugin(name: str) -> Path:
    """Find a protoc plugin installed next to the running interpreter (or on PATH)."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return candidate
    found = shutil.which(name)
    if found is None:
        sys.exit(
            f"{name} not found: run `uv sync --all-packages` (mypy-protobuf is a dev dependency)"
        )
    return Path(found)


def _relativise(text: str, package: str) -> str:
    """Rewrite absolute imports of sibling generated modules into package-relative ones."""
    absolute = re.compile(rf"^from {re.escape(package)} import (\w+_pb2)( as \w+)?$", re.MULTILINE)
    text = absolute.sub(r"from . import \1\2", text)
    return _BARE_IMPORT.sub(r"from . import \1\2", text)


def fetch_nri_proto() -> Path:
    """Copy NRI's ``pkg/api/api.proto`` at :data:`NRI_VERSION` from the Go module proxy.

    Returns:
        The path of the committed copy.
    """
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{NRI_MODULE}@{NRI_VERSION}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"go mod download {NRI_MODULE}@{NRI_VERSION} failed: {proc.stderr or proc.stdout}")
    source = Path(json.loads(proc.stdout)["Dir"]) / "pkg" / "api" / "api.proto"
    data = source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != NRI_API_PROTO_SHA256:
        sys.exit(
            f"{source}: sha256 {digest}, expected {NRI_API_PROTO_SHA256} for {NRI_VERSION}; "
            "if NRI_VERSION changed on purpose, update NRI_API_PROTO_SHA256 too"
        )
    target = NRI_PROTO_DIR / "api.proto"
    target.write_bytes(data)
    return target


def generate(out_root: Path = SRC_ROOT) -> list[Path]:
    """Generate the stubs of every package in :data:`PACKAGES` under ``out_root``.

    Args:
        out_root: Root that receives each package's directory (``<root>/drakit/kubelet/_proto``,
            ...) with its ``*_pb2.py``, ``*_pb2_grpc.py`` and ``*.pyi`` files.

    Returns:
        The files written, sorted.
    """
    written: list[Path] = []
    for package, grpc in PACKAGES.items():
        written += _generate_package(package, package_dir(package, out_root), grpc=grpc)
    return sorted(written)


def _generate_package(package: str, out_dir: Path, *, grpc: bool) -> list[Path]:
    from grpc_tools import protoc  # noqa: PLC0415 - a dev-only dependency, imported on use

    source_dir = package_dir(package)
    protos = sorted(source_dir.glob("*.proto"))
    if not protos:
        sys.exit(f"no .proto files in {source_dir}")
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="drakit-protos-") as tmp:
        args = [
            "grpc_tools.protoc",
            f"--proto_path={SRC_ROOT}",
            f"--proto_path={well_known}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--python_out={tmp}",
            f"--mypy_out={tmp}",
        ]
        if grpc:
            args += [
                f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
                f"--grpc_python_out={tmp}",
                f"--mypy_grpc_out={tmp}",
            ]
        args += [str(p.relative_to(SRC_ROOT)) for p in protos]
        if protoc.main(args) != 0:
            sys.exit("protoc failed")
        generated = package_dir(package, Path(tmp))
        written: list[Path] = []
        for path in sorted(generated.iterdir()):
            if path.suffix not in {".py", ".pyi"}:
                continue
            text = path.read_text(encoding="utf-8")
            text = _relativise(text, package)
            target = out_dir / path.name
            target.write_text(text, encoding="utf-8")
            written.append(target)
    return written


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=SRC_ROOT,
        help=f"root of the output packages (default: {SRC_ROOT})",
    )
    parser.add_argument(
        "--fetch-nri",
        action="store_true",
        help=f"first copy api.proto of {NRI_MODULE}@{NRI_VERSION} from the Go module proxy",
    )
    ns = parser.parse_args()
    if ns.fetch_nri:
        sys.stdout.write(f"fetched {fetch_nri_proto()}\n")
    for path in generate(ns.out):
        sys.stdout.write(f"wrote {path}\n")


if __name__ == "__main__":
    main()
