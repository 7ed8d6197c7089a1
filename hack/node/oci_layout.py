"""OCI image layouts in one tar, as ``ctr images import`` reads them: one gzip layer per image.

Python 3.11 standard library only; used by hack/node/images.py.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

PLATFORM = {"architecture": "amd64", "os": "linux"}
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


class _Sink(Protocol):
    def write(self, data: memoryview, /) -> int: ...


class _HashingWriter(io.RawIOBase):
    """Writes through to ``sink``, hashing and counting what passes."""

    def __init__(self, sink: _Sink) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.size += len(view)
        self.sink.write(view)
        return len(view)


@dataclass(frozen=True)
class Layer:
    """A gzip layer blob: its digest and size, and the digest of the tar inside (diff_id)."""

    path: Path
    digest: str
    size: int
    diff_id: str
    tar_size: int


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = int(info.mtime)
    return info


def write_layer(rootfs: Path, blob: Path) -> Layer:
    """A gzip tar of ``rootfs`` (entries sorted, owned by root, hard links kept).

    gzip level 1: the images stay on this machine, and on a loaded 2-core machine level 6
    took 14 s for the drakit layer against 6 s, for a layer about a fifth smaller.
    """
    with blob.open("wb") as raw:
        compressed = _HashingWriter(raw)
        with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0, compresslevel=1) as gz:
            plain = _HashingWriter(gz)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for path in _walk_sorted(rootfs):
                    arcname = path.relative_to(rootfs).as_posix()
                    tar.add(path, arcname=arcname, recursive=False, filter=_root_owned)
    return Layer(
        path=blob,
        digest=f"sha256:{compressed.sha.hexdigest()}",
        size=compressed.size,
        diff_id=f"sha256:{plain.sha.hexdigest()}",
        tar_size=plain.size,
    )


def _walk_sorted(root: Path) -> Iterator[Path]:
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        yield entry
        if entry.is_dir() and not entry.is_symlink():
            yield from _walk_sorted(entry)


def _blob(data: bytes) -> tuple[str, bytes]:
    return f"sha256:{hashlib.sha256(data).hexdigest()}", data


def write_oci_tar(
    out: Path, name: str, layer: Layer, config: dict[str, Any], created_by: str
) -> None:
    """An OCI image layout as one tar: ``oci-layout``, ``index.json`` naming ``name``, the blobs."""
    image_config = {
        "created": "1970-01-01T00:00:00Z",
        **PLATFORM,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": created_by}],
    }
    config_digest, config_bytes = _blob(json.dumps(image_config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": layer.digest, "size": layer.size}],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    tag = name.rsplit(":", 1)[1]
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": PLATFORM,
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:

        def add_bytes(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))

        def add_dir(arcname: str) -> None:
            info = tarfile.TarInfo(arcname)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)

        add_bytes("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes("index.json", json.dumps(index, sort_keys=True).encode())
        add_dir("blobs")
        add_dir("blobs/sha256")
        add_bytes(f"blobs/sha256/{config_digest[7:]}", config_bytes)
        add_bytes(f"blobs/sha256/{manifest_digest[7:]}", manifest_bytes)
        info = tarfile.TarInfo(f"blobs/sha256/{layer.digest[7:]}")
        info.size = layer.size
        info.mode = 0o644
        with layer.path.open("rb") as f:
            tar.addfile(info, f)
    os.replace(tmp, out)
