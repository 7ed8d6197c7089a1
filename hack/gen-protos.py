"""Regenerate drakit's kubelet gRPC stubs from the .proto files in drakit/kubelet/_proto.

Usage (from the repository root)::

    uv run python hack/gen-protos.py            # rewrite the committed stubs
    uv run python hack/gen-protos.py --out DIR  # write them to DIR instead (used by the tests)

It runs protoc from grpcio-tools with the mypy-protobuf plugins, so the output depends only on the
versions pinned in uv.lock. protoc writes absolute imports (``from drakit.kubelet._proto import
x_pb2``); they are rewritten to package-relative ones (``from . import x_pb2``) so that the
generated modules only ever import each other as ``drakit.kubelet._proto.*``.
"""

from __future__ import annotations

import argparse
import importlib.resources
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SRC_ROOT = REPO_ROOT / "core" / "src"
PROTO_PACKAGE = "drakit.kubelet._proto"
PROTO_DIR = SRC_ROOT.joinpath(*PROTO_PACKAGE.split("."))

# Python import lines protoc and its plugins write for sibling modules of the package.
_ABSOLUTE_IMPORT = re.compile(
    rf"^from {re.escape(PROTO_PACKAGE)} import (\w+_pb2)( as \w+)?$", re.MULTILINE
)
_BARE_IMPORT = re.compile(r"^import (\w+_pb2)( as \w+)?$", re.MULTILINE)


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


def _relativise(text: str) -> str:
    """Rewrite absolute imports of sibling generated modules into package-relative ones."""
    text = _ABSOLUTE_IMPORT.sub(r"from . import \1\2", text)
    return _BARE_IMPORT.sub(r"from . import \1\2", text)


def generate(out_dir: Path) -> list[Path]:
    """Generate the stubs for every .proto in the package into ``out_dir``.

    Args:
        out_dir: Directory that receives the ``*_pb2.py``, ``*_pb2_grpc.py`` and ``*.pyi`` files.

    Returns:
        The files written, sorted.
    """
    from grpc_tools import protoc  # noqa: PLC0415 - a dev-only dependency, imported on use

    protos = sorted(PROTO_DIR.glob("*.proto"))
    if not protos:
        sys.exit(f"no .proto files in {PROTO_DIR}")
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="drakit-protos-") as tmp:
        args = [
            "grpc_tools.protoc",
            f"--proto_path={SRC_ROOT}",
            f"--proto_path={well_known}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            *(str(p.relative_to(SRC_ROOT)) for p in protos),
        ]
        if protoc.main(args) != 0:
            sys.exit("protoc failed")
        generated = Path(tmp).joinpath(*PROTO_PACKAGE.split("."))
        written = []
        for path in sorted(generated.iterdir()):
            if path.suffix not in {".py", ".pyi"}:
                continue
            text = path.read_text(encoding="utf-8")
            text = _relativise(text)
            target = out_dir / path.name
            target.write_text(text, encoding="utf-8")
            written.append(target)
    return written


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=PROTO_DIR, help=f"output directory (default: {PROTO_DIR})"
    )
    ns = parser.parse_args()
    for path in generate(ns.out):
        sys.stdout.write(f"wrote {path}\n")


if __name__ == "__main__":
    main()
