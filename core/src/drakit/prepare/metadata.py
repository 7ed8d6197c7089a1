"""KEP-5304 device metadata files: the attributes of a claim's prepared devices, for its containers.

The protocol (Kubernetes 1.37, beta; the Go helper ``k8s.io/dynamic-resource-allocation``
v0.37, ``kubeletplugin/metadata.go`` and ``api/metadata``, writes the same):

* inside a container, one file per driver and request under
  ``/var/run/kubernetes.io/dra-device-attributes/``: at
  ``resourceclaims/<claim name>/<request>/<driver>-metadata.json``, or, for a claim made from a
  ResourceClaimTemplate (annotation ``resource.kubernetes.io/pod-claim-name``), at
  ``resourceclaimtemplates/<pod claim name>/<request>/<driver>-metadata.json``; ``<request>``
  is the top-level request (a prioritized list's ``/<subrequest>`` is dropped from the path and
  kept in the file's ``requests[].name``);
* the file is a stream of ``DeviceMetadata`` objects, the same content once per API version,
  newest first (:data:`API_VERSIONS`: ``metadata.resource.k8s.io/v1beta1``, then ``v1alpha1``),
  so a consumer takes the first it can decode;
* ``metadata.generation`` starts at 1 and grows whenever the content changes;
* the file is bind-mounted read-only into the containers that use the request's devices.

drakit writes the files at prepare, before the claim's CDI spec, under
``<state dir>/<driver>/device-metadata/<claim uid>/<request>/metadata.json`` (atomically: temp
file, fsync, rename; mode 0644), and the pipeline adds the mount to the CDI edits of each of the
request's devices (:func:`with_mount`). Unprepare removes the spec first, then the claim's
directory; a directory left by a crash is removed by the next unprepare of the claim, or by
:meth:`MetadataWriter.sweep` (claims with neither a checkpoint record nor a CDI spec).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.errors import PermanentError
from drakit.models import CdiEdits
from drakit.prepare.safefs import check_component
from drakit.statefiles import (
    DIR_MODE,
    PUBLIC_FILE_MODE,
    NotRegular,
    ensure_dir,
    fs_error,
    read_regular,
    write_atomic,
)

__all__ = [
    "API_VERSIONS",
    "CONTAINER_DIR",
    "KIND",
    "POD_CLAIM_NAME_ANNOTATION",
    "DeviceMetadata",
    "MetadataDevice",
    "MetadataRequest",
    "MetadataWriter",
    "container_path",
    "read_metadata",
    "with_mount",
]

CONTAINER_DIR: Final = "/var/run/kubernetes.io/dra-device-attributes"
"""Where the files appear inside a container (``metadata.ContainerDir``)."""
RESOURCE_CLAIMS_SUBDIR: Final = "resourceclaims"
RESOURCE_CLAIM_TEMPLATES_SUBDIR: Final = "resourceclaimtemplates"
FILE_SUFFIX: Final = "-metadata.json"
API_VERSIONS: Final = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
"""The versions each file carries, newest first (the 1.37 helper knows these two)."""
KIND: Final = "DeviceMetadata"
POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
"""Set by the resource claim controller on claims it makes from a pod's template."""
SUBDIR: Final = "device-metadata"
"""The directory under ``<state dir>/<driver>/`` that holds the files on the host."""
_FILE: Final = "metadata.json"
_MAX_BYTES: Final = 1 << 20


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class MetadataDevice(_Wire):
    """One prepared device: its attributes as its ResourceSlice publishes them."""

    driver: str
    pool: str
    name: str
    attributes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    network_data: dict[str, Any] | None = Field(default=None, alias="networkData")


class MetadataRequest(_Wire):
    """One request of the claim (``<request>`` or ``<request>/<subrequest>``) and its devices."""

    name: str
    devices: list[MetadataDevice] = Field(default_factory=list)


class ObjectMeta(_Wire):
    """The claim the file describes, and the file's generation."""

    name: str
    namespace: str
    uid: str
    generation: int = Field(ge=1)


class DeviceMetadata(_Wire):
    """One object of a metadata file (``metadata.resource.k8s.io``, kind ``DeviceMetadata``)."""

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta
    pod_claim_name: str | None = Field(default=None, alias="podClaimName")
    requests: list[MetadataRequest] = Field(default_factory=list)

    def content(self) -> tuple[Any, ...]:
        """What the consumer reads, without the version and the generation."""
        meta = self.metadata
        return (meta.name, meta.namespace, meta.uid, self.pod_claim_name, self.requests)


def base_request(request: str) -> str:
    """The top-level request of ``<request>/<subrequest>`` (the file's directory)."""
    return request.split("/", 1)[0]


def container_path(driver: str, claim_name: str, pod_claim_name: str | None, request: str) -> str:
    """The file's path inside the container (``metadata.ResourceClaim[Template]FilePath``)."""
    if pod_claim_name:
        where = f"{RESOURCE_CLAIM_TEMPLATES_SUBDIR}/{pod_claim_name}"
    else:
        where = f"{RESOURCE_CLAIMS_SUBDIR}/{claim_name}"
    return f"{CONTAINER_DIR}/{where}/{base_request(request)}/{driver}{FILE_SUFFIX}"


def read_metadata(data: bytes) -> list[DeviceMetadata]:
    """Every object of a metadata file's stream, in order.

    Raises:
        ValueError: the bytes are not a stream of ``DeviceMetadata`` objects.
    """
    decoder = json.JSONDecoder()
    text = data.decode()
    out: list[DeviceMetadata] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return out
        obj, pos = decoder.raw_decode(text, pos)
        try:
            out.append(DeviceMetadata.model_validate(obj))
        except ValidationError as e:
            raise ValueError(f"not a DeviceMetadata object: {e}") from e


def with_mount(edits: CdiEdits, host_path: str, container_file: str) -> CdiEdits:
    """``edits`` with a read-only bind mount of the metadata file added (CDI JSON form)."""
    cdi = edits.to_cdi()
    mount = {"hostPath": host_path, "containerPath": container_file, "options": ["ro", "bind"]}
    cdi["mounts"] = [*cdi.get("mounts", []), mount]
    return CdiEdits.model_validate(cdi)


class MetadataWriter:
    """Writes and removes one driver's device metadata files on the host.

    Args:
        root: ``<state dir>/<driver>/device-metadata`` (it must be the same path on the host
            as where drakit runs: the container runtime reads the mounts' host paths).
        driver: the DRA driver name.
    """

    def __init__(self, root: Path, driver: str) -> None:
        self.root = root
        self.driver = driver

    def host_path(self, claim_uid: str, request: str) -> Path:
        """Where the file of one request of a claim is on the host.

        Raises:
            PermanentError: the UID or the request cannot be a file-name component.
        """
        check_component(claim_uid, "claim uid", max_bytes=128)
        base = check_component(base_request(request), "request", max_bytes=63)
        return self.root / claim_uid / base / _FILE

    def write(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        pod_claim_name: str | None,
        requests: Mapping[str, Sequence[MetadataDevice]],
    ) -> dict[str, Path]:
        """Write one file per request of ``requests`` (a request ref -> its devices).

        A file whose content is already what it would be is left alone (a repeated prepare);
        one with other content is replaced with the next generation.

        Returns:
            Each request ref -> its file's host path.

        Raises:
            PermanentError: a name cannot be a file-name component, or a directory is a link.
            RetryableError: the file system refused, named as such.
        """
        out: dict[str, Path] = {}
        for request, devices in requests.items():
            path = self.host_path(uid, request)
            doc = DeviceMetadata(
                api_version=API_VERSIONS[0],
                kind=KIND,
                metadata=ObjectMeta(name=name, namespace=namespace, uid=uid, generation=1),
                pod_claim_name=pod_claim_name,
                requests=[MetadataRequest(name=request, devices=list(devices))],
            )
            old = self._read(path)
            if old is not None and old.content() == doc.content():
                out[request] = path
                continue
            if old is not None:
                generation = old.metadata.generation + 1
                doc = doc.model_copy(
                    update={"metadata": doc.metadata.model_copy(update={"generation": generation})}
                )
            self._write_file(path, _stream(doc))
            out[request] = path
        return out

    def _read(self, path: Path) -> DeviceMetadata | None:
        try:
            raw = read_regular(path, _MAX_BYTES)
            docs = read_metadata(raw) if raw is not None else []
        except (NotRegular, ValueError, OSError, PermanentError):
            return None
        return docs[0] if docs else None

    def _write_file(self, path: Path, data: bytes) -> None:
        ensure_dir(path.parent, DIR_MODE, private=False)
        try:  # no directory fsync, as for the CDI spec this file is mounted by
            write_atomic(path, data, mode=PUBLIC_FILE_MODE, sync_dir=False)
        except IsADirectoryError as e:
            raise PermanentError(
                f"{path} is a directory, not a device metadata file: remove it by hand"
            ) from e
        except OSError as e:
            raise fs_error("write the device metadata file", path, e) from e

    def remove(self, claim_uid: str) -> bool:
        """Remove a claim's files; ``False`` if it had none. Links are removed, never followed.

        Raises:
            PermanentError: a bad UID.
            RetryableError: the file system refused, named as such.
        """
        check_component(claim_uid, "claim uid", max_bytes=128)
        path = self.root / claim_uid
        try:
            st = path.lstat()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise fs_error("inspect the device metadata directory", path, e) from e
        try:
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise fs_error("remove the device metadata directory", path, e) from e
        return True

    def claim_uids(self) -> set[str]:
        """The claims that have files here."""
        try:
            names = os.listdir(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return set()
        except OSError as e:
            raise fs_error("list the device metadata directory", self.root, e) from e
        out = set()
        for n in names:
            try:
                out.add(check_component(n, "claim uid", max_bytes=128))
            except PermanentError:
                continue
        return out

    def sweep(self, keep: Iterable[str]) -> list[str]:
        """Remove the files of every claim not in ``keep``; the UIDs removed.

        The pipeline keeps the claims with a checkpoint record or a CDI spec: anything else
        was left by a crash between writing the files and recording the claim, or between
        removing the claim's spec and its files.
        """
        gone = sorted(self.claim_uids() - set(keep))
        for uid in gone:
            self.remove(uid)
        return gone


def _stream(doc: DeviceMetadata) -> bytes:
    """The file: ``doc`` once per version of :data:`API_VERSIONS`, newest first."""
    parts = []
    body = doc.model_dump(mode="json", by_alias=True, exclude_none=True)
    for version in API_VERSIONS:
        body["apiVersion"] = version
        # orjson: the stdlib's indenting encoder is pure Python and cost ~0.8 ms per file
        parts.append(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    return b"".join(parts)
