#!/usr/bin/env python3
"""Write the real node's container images as OCI image layouts, from Debian packages, no registry.

Usage (from anywhere; Python 3.11 standard library only)::

    python3 hack/node/images.py --out DIR            # both images
    python3 hack/node/images.py --out DIR --image test

It writes into DIR (created if missing), and prints DIR on stdout (progress goes to stderr):

- ``test.tar``: ``docker.io/drakit/test:1``, one gzip layer holding ``/bin/busybox`` from
  Debian bookworm's ``busybox-static`` and its applet links, a minimal ``/etc/passwd`` and
  ``/etc/group``. Its command waits for SIGTERM, so it serves as the sandbox ("pause") image
  too; pods give their own command.
- ``drakit.tar``: ``docker.io/drakit/drakit:<version of core/pyproject.toml>``, drakit's own
  image built by ``deployments/Dockerfile``'s recipe: the Debian packages of
  ``deployments/image/debian-packages.txt`` and their dependencies (resolved by apt as on an
  empty system, no recommends; each ``.deb`` extracted with ``dpkg-deb -x``, filtered by
  ``deployments/image/dpkg-excludes.cfg``, laid out merged-/usr), plus the virtual environment
  that ``deployments/image/install.sh`` makes at ``/opt/drakit`` from ``uv.lock``, pointed at
  the image's ``/usr/bin/python3.11``; ENV, USER, ENTRYPOINT and CMD come from the Dockerfile's
  runtime stage. Before it is written, ``drakit --version`` and ``drakit plugins`` run inside
  the root filesystem (``chroot`` as root, else ``unshare -r chroot``).

Each tarball is an OCI image layout whose index names the image in the
``io.containerd.image.name`` annotation: ``ctr -n k8s.io images import --platform linux/amd64
DIR/test.tar``. Nothing is installed on the host: packages come from the mirror configured for
apt (``apt-get download``), with dpkg's and apt's state left alone.

Built images are cached under ``${DRAKIT_CACHE_DIR:-~/.cache/drakit}/images/<name>-<key>/``,
the key being a digest of everything that goes into the image (this script, the Dockerfile,
the package list and filters, apt's package lists, ``install.sh``, ``uv.lock``, the sources of
the shipped distributions, the host Python and uv used for the install); the downloaded
``.deb`` files are kept under ``images/debs/``; the four most recently used entries of each
image stay. DIR receives hard links to the cached files (copies across file systems).

env: ``UV`` (the uv binary; else ``hack/ensure-uv.sh`` finds it), ``DRAKIT_IMAGE_HOST_PYTHON``
(a Python 3.11 on the host that ``install.sh`` makes the environment with; default
``/usr/bin/python3.11``, else ``python3.11`` on PATH).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import fnmatch
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol


class User(NamedTuple):
    """One ``/etc/passwd`` entry (its group has the same name)."""

    name: str
    uid: int
    gid: int
    home: str
    login_shell: str


REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "deployments" / "Dockerfile"
PACKAGE_LIST = REPO_ROOT / "deployments" / "image" / "debian-packages.txt"
DPKG_EXCLUDES = REPO_ROOT / "deployments" / "image" / "dpkg-excludes.cfg"
INSTALL_SH = REPO_ROOT / "deployments" / "image" / "install.sh"

TEST_IMAGE = "docker.io/drakit/test:1"
DRAKIT_REPOSITORY = "docker.io/drakit/drakit"
# Where the Dockerfile's build stage puts the virtual environment, and its interpreter there.
VENV = "/opt/drakit"
IMAGE_PYTHON = "/usr/bin/python3.11"
# The image user the Dockerfile's runtime stage adds (groupadd/useradd).
IMAGE_USER = User(
    name="drakit", uid=65532, gid=65532, home="/nonexistent", login_shell="/usr/sbin/nologin"
)
# debian:bookworm-slim's own PATH, which the Dockerfile's ENV PATH=...:${PATH} extends.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The sandbox's wait: PID 1 of the pod, ends on SIGTERM (the kubelet stops a sandbox with it).
WAIT_FOR_SIGNAL = ["sh", "-c", "trap 'exit 0' TERM INT; sleep 2147483647 & wait"]
# Run inside the image: every shared object of the environment and the standard library loads
# (dlopen resolves the libraries it needs, so a Debian package missing from the list shows here).
LOAD_SHARED_OBJECTS = """
import ctypes, os, sys
count, failed = 0, []
for top in sys.argv[1:]:
    for d, _, files in os.walk(top):
        for f in files:
            if f.endswith(".so") or ".so." in f:
                count += 1
                try:
                    ctypes.CDLL(os.path.join(d, f))
                except OSError as exc:
                    failed.append(f"{os.path.join(d, f)}: {exc}")
print(count)
sys.exit("\\n".join(failed) or None)
"""
# Debian's default /etc/nsswitch.conf (libc-bin's maintainer script installs it from
# /usr/share/libc-bin/nsswitch.conf). Without one glibc asks DNS before /etc/hosts, and stops at
# DNS's answer: "localhost" would not resolve in a pod whose DNS does not know it.
NSSWITCH_CONF = """\
passwd:         files
group:          files
shadow:         files
gshadow:        files

hosts:          files dns
networks:       files

protocols:      db files
services:       db files
ethers:         db files
rpc:            db files

netgroup:       nis
"""
# The first lines of a script uv writes when its interpreter's path is too long for "#!".
SH_LAUNCHER = re.compile(rb"#!/bin/sh\n'''exec' '[^\n]*/bin/python' \"\$0\" \"\$@\"\n' '''\n")
# Merged /usr, as every bookworm system: these are links into /usr.
MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
PLATFORM = {"architecture": "amd64", "os": "linux"}
APT_LISTS = Path("/var/lib/apt/lists")
# Source trees whose content goes into the wheels: anything else under core/ and plugins/
# (tests, caches) does not change the image.
# Cache entries kept per image (each drakit entry is about 60 MB): a few worktrees or commits.
KEEP_ENTRIES = 4
SKIPPED_DIRS = {"tests", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "dist"}

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


class ImageError(Exception):
    """A build step failed; the message names the step and what to do."""


_STARTED = time.monotonic()


def log(message: str) -> None:
    """Progress on stderr (stdout carries only the output directory), with the time so far."""
    print(f"[images {time.monotonic() - _STARTED:5.1f}s] {message}", file=sys.stderr, flush=True)


def run(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    what: str,
) -> str:
    """Run ``argv``; its stdout, or an ImageError with ``what`` and the command's stderr."""
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise ImageError(f"{what}: {argv[0]} not found ({exc.strerror})") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise ImageError(
            f"{what} failed ({shlex.join(argv[:6])} ...: exit {proc.returncode})\n{tail}"
        )
    return proc.stdout


# ---- the recipe: what the Dockerfile and the package files say ----------------------------------


@dataclass
class Stage:
    """One ``FROM`` stage of a Dockerfile: its base, and the directives images.py takes over."""

    base: str
    name: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    workdir: str | None = None
    runs: list[str] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RuntimeConfig:
    """The image configuration of the Dockerfile's last stage, as ``docker build`` makes it."""

    env: dict[str, str]
    user: str | None
    entrypoint: list[str] | None
    cmd: list[str] | None
    workdir: str | None


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs: continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, rest = pending.strip().partition(" ")
        out.append((keyword.upper(), rest.strip()))
        pending = ""
    if pending:
        keyword, _, rest = pending.strip().partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # legacy form: ENV KEY value with spaces
        return {words[0]: " ".join(words[1:])}
    pairs: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise ImageError(f"{DOCKERFILE}: ENV {args!r}: expected KEY=value pairs")
        pairs[key] = value
    return pairs


def _exec_form(keyword: str, args: str) -> list[str]:
    try:
        value = json.loads(args)
    except json.JSONDecodeError as exc:
        raise ImageError(
            f"{DOCKERFILE}: {keyword} {args}: images.py takes only the exec form "
            f'({keyword} ["drakit"]), as docker does without a shell'
        ) from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImageError(f"{DOCKERFILE}: {keyword} {args}: expected a JSON list of strings")
    return value


def parse_dockerfile(text: str) -> list[Stage]:
    """The stages of a Dockerfile, with the directives that end up in an image's config."""
    stages: list[Stage] = []
    for keyword, args in dockerfile_instructions(text):
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None  # noqa: PLR2004
            stages.append(Stage(base=words[0], name=name))
            continue
        if not stages:
            continue  # ARG before the first FROM
        stage = stages[-1]
        if keyword == "ENV":
            stage.env.update(_env_pairs(args))
        elif keyword == "USER":
            stage.user = args
        elif keyword == "ENTRYPOINT":
            stage.entrypoint = _exec_form(keyword, args)
        elif keyword == "CMD":
            stage.cmd = _exec_form(keyword, args)
        elif keyword == "WORKDIR":
            stage.workdir = args
        elif keyword == "RUN":
            stage.runs.append(args)
        elif keyword == "COPY":
            stage.copies.append(args)
    return stages


def runtime_config(text: str, base_path: str = BASE_PATH) -> RuntimeConfig:
    """The last stage's config, following ``FROM <stage>`` back to the Debian base.

    ENV values expand ``${VAR}``/``$VAR`` from what the earlier stages and the base image set
    (the base sets only PATH), as docker does.
    """
    stages = parse_dockerfile(text)
    if not stages:
        raise ImageError(f"{DOCKERFILE}: no FROM")
    by_name = {s.name: s for s in stages if s.name}
    chain: list[Stage] = []
    stage: Stage | None = stages[-1]
    while stage is not None:
        chain.insert(0, stage)
        stage = by_name.get(stage.base)
    env: dict[str, str] = {"PATH": base_path}
    config: dict[str, Any] = {"user": None, "entrypoint": None, "cmd": None, "workdir": None}
    for s in chain:
        for key, value in s.env.items():
            env[key] = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m[1] or m[2], ""), value)
        for attr in config:
            if getattr(s, attr) is not None:
                config[attr] = getattr(s, attr)
    return RuntimeConfig(env=env, **config)


def package_list(path: Path = PACKAGE_LIST) -> list[str]:
    """The Debian packages of ``debian-packages.txt``."""
    names: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", line):
            raise ImageError(
                f"{path}:{number}: {line!r} is not a Debian package name (one name a line)"
            )
        names.append(line)
    if not names:
        raise ImageError(f"{path}: names no package")
    return names


def dpkg_filters(path: Path = DPKG_EXCLUDES) -> list[tuple[bool, str]]:
    """``(include, pattern)`` from ``path-exclude``/``path-include`` lines, in order."""
    rules: list[tuple[bool, str]] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        keyword, _, pattern = line.partition(" ")
        if keyword not in {"path-exclude", "path-include"} or not pattern.startswith("/"):
            raise ImageError(
                f"{path}:{number}: {line!r}: expected 'path-exclude /glob' or 'path-include /glob'"
            )
        rules.append((keyword == "path-include", pattern.strip()))
    return rules


def filtered_out(path: str, rules: list[tuple[bool, str]]) -> bool:
    """Whether dpkg leaves ``path`` (absolute, in the package) out: the last matching rule wins."""
    keep = True
    for include, pattern in rules:
        if fnmatch.fnmatchcase(path, pattern):
            keep = include
    return not keep


def drakit_version() -> str:
    """The core distribution's version, the drakit image's tag."""
    data = tomllib.loads((REPO_ROOT / "core" / "pyproject.toml").read_text(encoding="utf-8"))
    return str(data["project"]["version"])


def install_command(venv: Path, wheels: Path) -> list[str]:
    """``install.sh`` as the Dockerfile's build stage runs it (only the venv's place differs)."""
    return ["bash", str(INSTALL_SH), str(venv), str(wheels)]


# ---- Debian packages: resolve, download (cached), extract ---------------------------------------


@dataclass(frozen=True)
class Deb:
    """One resolved Debian package."""

    name: str
    version: str
    arch: str

    @property
    def filename(self) -> str:
        """The file name apt gives it (``:`` of an epoch quoted as ``%3a``)."""
        return f"{self.name}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


def apt_options(scratch: Path) -> list[str]:
    """Options that keep apt off the host's state: an empty dpkg status, no cache files, no lock."""
    status = scratch / "dpkg-status"
    status.touch()
    opts = [
        f"-oDir::State::status={status}",
        "-oDir::Cache::pkgcache=",
        "-oDir::Cache::srcpkgcache=",
        "-oDebug::NoLocking=1",
        "-oAPT::Install-Recommends=false",
        "-oAPT::Get::AllowUnauthenticated=false",
    ]
    if os.geteuid() == 0:
        opts.append("-oAPT::Sandbox::User=root")  # the download dir is not _apt's to write
    return opts


def resolve(packages: list[str], scratch: Path) -> list[Deb]:
    """The packages and their dependency closure, as apt installs them on an empty system."""
    out = run(
        ["apt-get", "--simulate", *apt_options(scratch), "install", *packages],
        what="resolving the Debian packages (apt-get --simulate install)",
    )
    debs = []
    for line in out.splitlines():
        m = re.match(r"Inst (\S+) \((\S+) .*\[(\w+)\]\)", line)
        if m:
            debs.append(Deb(name=m[1], version=m[2], arch=m[3]))
    if not debs:
        raise ImageError(
            f"apt resolved no package for {packages}: run 'apt-get update' (apt's package lists "
            f"under {APT_LISTS} are empty or name no bookworm mirror)"
        )
    return debs


def fetch(debs: list[Deb], cache: Path, scratch: Path) -> list[Path]:
    """The ``.deb`` files, from the cache or downloaded by ``apt-get download`` into it."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [d for d in debs if not (cache / d.filename).is_file()]
    if missing:
        log(f"downloading {len(missing)} Debian packages")
        downloads = Path(tempfile.mkdtemp(prefix="debs-", dir=scratch))
        run(
            [
                "apt-get",
                *apt_options(scratch),
                "download",
                *(f"{d.name}={d.version}" for d in missing),
            ],
            cwd=downloads,
            what=(
                "downloading Debian packages (apt-get download; a mirror that no longer has "
                "these versions needs an 'apt-get update' first)"
            ),
        )
        for d in missing:
            got = downloads / d.filename
            if not got.is_file():
                raise ImageError(f"apt-get download did not write {d.filename}")
            os.replace(got, cache / d.filename)
    return [cache / d.filename for d in debs]


def extract(deb: Path, rootfs: Path) -> None:
    """``dpkg-deb -x``: the package's files, no maintainer scripts, no dpkg database."""
    run(["dpkg-deb", "-x", str(deb), str(rootfs)], what=f"extracting {deb.name}")


def apply_filters(rootfs: Path, rules: list[tuple[bool, str]]) -> int:
    """Remove what dpkg's path filters leave out; an excluded directory stays if it keeps files."""
    removed = 0
    for dirpath, dirnames, filenames in os.walk(rootfs, topdown=False):
        here = Path(dirpath)
        rel = "/" + here.relative_to(rootfs).as_posix() if here != rootfs else "/"
        for name in filenames + [d for d in dirnames if (here / d).is_symlink()]:
            path = f"{rel.rstrip('/')}/{name}"
            if filtered_out(path, rules):
                (here / name).unlink()
                removed += 1
        if here != rootfs and filtered_out(rel, rules) and not any(here.iterdir()):
            here.rmdir()
    return removed


def merge_usr(rootfs: Path) -> None:
    """Move ``/bin``, ``/lib``, ... into ``/usr`` and leave links, as bookworm's merged /usr."""
    for top in MERGED_USR:
        src = rootfs / top
        if src.is_symlink():
            continue
        if src.is_dir():
            _merge_into(src, rootfs / "usr" / top)
            src.rmdir()
            src.symlink_to(f"usr/{top}")
        elif top in {"bin", "sbin", "lib", "lib64"}:
            (rootfs / "usr" / top).mkdir(parents=True, exist_ok=True)
            src.symlink_to(f"usr/{top}")


def _merge_into(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        target = dst / entry.name
        if (
            entry.is_dir()
            and not entry.is_symlink()
            and target.is_dir()
            and not target.is_symlink()
        ):
            _merge_into(entry, target)
            entry.rmdir()
        elif target.exists() or target.is_symlink():
            raise ImageError(f"merging /usr: {entry} and {target} both exist")
        else:
            os.rename(entry, target)


# ---- OCI image layout --------------------------------------------------------------------------


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


# ---- the root filesystems ----------------------------------------------------------------------


def write_passwd(rootfs: Path, users: list[User]) -> None:
    """``/etc/passwd`` and ``/etc/group`` with exactly ``users`` (name, uid, gid, home, shell)."""
    etc = rootfs / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    passwd = "".join(f"{n}:x:{u}:{g}:{n}:{h}:{s}\n" for n, u, g, h, s in users)
    group = "".join(f"{n}:x:{g}:\n" for n, _, g, _, _ in users)
    (etc / "passwd").write_text(passwd, encoding="utf-8")
    (etc / "group").write_text(group, encoding="utf-8")
    (etc / "passwd").chmod(0o644)
    (etc / "group").chmod(0o644)


def base_dirs(rootfs: Path) -> None:
    """The mount points and scratch directories every container expects."""
    for name, mode in (
        ("dev", 0o755),
        ("proc", 0o755),
        ("sys", 0o755),
        ("etc", 0o755),
        ("root", 0o700),
        ("tmp", 0o1777),
        ("var", 0o755),
    ):
        path = rootfs / name
        path.mkdir(exist_ok=True)
        path.chmod(mode)
    (rootfs / "var" / "tmp").mkdir(exist_ok=True)
    (rootfs / "var" / "tmp").chmod(0o1777)


def build_test_rootfs(busybox_deb: Path, rootfs: Path, scratch: Path) -> int:
    """``/bin/busybox`` and a link for each applet; returns the number of applets."""
    unpacked = scratch / "busybox-static"
    extract(busybox_deb, unpacked)
    base_dirs(rootfs)
    (rootfs / "bin").mkdir()
    shutil.copy2(unpacked / "bin" / "busybox", rootfs / "bin" / "busybox")
    applets = run(
        [str(rootfs / "bin" / "busybox"), "--list-full"], what="listing busybox applets"
    ).split()
    for applet in applets:
        link = rootfs / applet
        if link == rootfs / "bin" / "busybox":
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("/bin/busybox")
    write_passwd(
        rootfs,
        [
            User("root", 0, 0, "/root", "/bin/sh"),
            User("nobody", 65534, 65534, "/nonexistent", "/bin/false"),
        ],
    )
    return len(applets)


def host_python() -> str:
    """A Python 3.11 on the host for ``install.sh`` (the image's wheels are chosen for it)."""
    candidates = [os.environ.get("DRAKIT_IMAGE_HOST_PYTHON", ""), IMAGE_PYTHON, "python3.11"]
    for candidate in candidates:
        found = shutil.which(candidate) if candidate else None
        if found:
            version = run(
                [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                what=f"asking {found} its version",
            ).strip()
            if version == "3.11":
                return found
    raise ImageError(
        "no Python 3.11 on the host: install.sh installs the image's wheels for the image's "
        "Python 3.11 with one; set DRAKIT_IMAGE_HOST_PYTHON=/path/to/python3.11"
    )


def uv_binary() -> str:
    """``$UV``, else what ``hack/ensure-uv.sh`` prints."""
    if os.environ.get("UV"):
        return os.environ["UV"]
    return run(["bash", str(REPO_ROOT / "hack" / "ensure-uv.sh")], what="finding uv").strip()


def in_rootfs(rootfs: Path, argv: list[str], env: dict[str, str], *, user: str | None) -> str:
    """Run ``argv`` inside ``rootfs``: ``chroot`` as root (as ``user``), else ``unshare -r``."""
    if os.geteuid() == 0:
        spec = ["--userspec", user] if user else []
        cmd = ["chroot", *spec, str(rootfs), *argv]
    else:
        cmd = ["unshare", "--map-root-user", "chroot", str(rootfs), *argv]
    shown = shlex.join(argv) if len(shlex.join(argv)) < 80 else f"{argv[0]} ..."  # noqa: PLR2004
    return run(cmd, env=env, what=f"running {shown} inside the image's root filesystem")


def fix_venv(venv: Path, image_venv: str, python_version: str) -> None:
    """Point the environment made at ``venv`` on the host at ``image_venv`` and the image's Python.

    uv writes the environment's own path into the scripts' ``#!`` lines and the activation
    scripts, and the host interpreter into ``pyvenv.cfg`` and the ``bin/python`` link.
    """
    old = str(venv).encode()
    bindir = venv / "bin"
    for entry in sorted(bindir.iterdir()):
        if entry.is_symlink():
            if os.path.isabs(os.readlink(entry)):
                entry.unlink()
                entry.symlink_to(IMAGE_PYTHON)
            continue
        data = entry.read_bytes()
        launcher = SH_LAUNCHER.match(data)
        if launcher:
            # The scratch path was too long for a #! line, so uv starts the script through
            # /bin/sh (which the image need not have); /opt/drakit fits the plain form.
            data = f"#!{image_venv}/bin/python\n".encode() + data[launcher.end() :]
            entry.write_bytes(data)
        if old in data:
            entry.write_bytes(data.replace(old, image_venv.encode()))
    cfg = venv / "pyvenv.cfg"
    lines = []
    for line in cfg.read_text(encoding="utf-8").splitlines():
        key = line.split("=", 1)[0].strip()
        if key == "home":
            lines.append(f"home = {os.path.dirname(IMAGE_PYTHON)}")
        elif key in {"version_info", "version"}:
            lines.append(f"{key} = {python_version}")
        else:
            lines.append(line)
    cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_drakit_rootfs(
    debs: list[Path], rootfs: Path, scratch: Path, config: RuntimeConfig, *, verify: bool
) -> dict[str, Any]:
    """Debian packages, the virtual environment, the user; checked by running drakit in it."""
    rules = dpkg_filters()
    log(f"extracting {len(debs)} packages")
    for deb in debs:
        extract(deb, rootfs)
    removed = apply_filters(rootfs, rules)
    os_release = rootfs / "usr" / "lib" / "os-release"
    release = os_release.read_text(encoding="utf-8") if os_release.is_file() else ""
    if "VERSION_CODENAME=bookworm" not in release.splitlines():
        raise ImageError(
            "the packages apt resolved are not Debian bookworm's (/usr/lib/os-release of "
            f"base-files, which debian-packages.txt must name, says {release.splitlines()[:2]}): "
            "the Dockerfile starts from debian:bookworm-slim, so images.py needs a host whose "
            "apt sources are bookworm's"
        )
    merge_usr(rootfs)
    base_dirs(rootfs)
    write_passwd(
        rootfs,
        [
            User("root", 0, 0, "/root", "/usr/sbin/nologin"),
            IMAGE_USER,
            User("nobody", 65534, 65534, "/nonexistent", "/usr/sbin/nologin"),
        ],
    )
    (rootfs / "etc" / "nsswitch.conf").write_text(NSSWITCH_CONF, encoding="utf-8")
    python = rootfs / IMAGE_PYTHON.lstrip("/")
    if not python.is_file():
        raise ImageError(f"the packages of {PACKAGE_LIST} put no interpreter at {IMAGE_PYTHON}")
    chroot_env = {"PATH": BASE_PATH, "LANG": "C.UTF-8"}
    image_python = in_rootfs(
        rootfs,
        [IMAGE_PYTHON, "-c", "import platform; print(platform.python_version())"],
        chroot_env,
        user=None,
    ).strip()
    # What Debian's maintainer scripts would have done: byte-compile the standard library.
    in_rootfs(
        rootfs,
        [IMAGE_PYTHON, "-m", "compileall", "-q", f"/usr/lib/python{image_python[:4]}"],
        chroot_env,
        user=None,
    )

    venv = rootfs / VENV.lstrip("/")
    venv.parent.mkdir(parents=True, exist_ok=True)
    env = {
        k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"}
    }
    env |= {"UV": uv_binary(), "DRAKIT_IMAGE_PYTHON": host_python()}
    log(f"installing the locked wheels with {env['DRAKIT_IMAGE_PYTHON']} (install.sh)")
    run(install_command(venv, scratch / "wheels"), env=env, what="deployments/image/install.sh")
    fix_venv(venv, VENV, image_python)

    checks: dict[str, Any] = {"python": image_python, "dpkg_filtered_files": removed}
    if verify:
        log("running drakit inside the root filesystem")
        user = f"{IMAGE_USER.uid}:{IMAGE_USER.gid}"
        drakit_env = dict(config.env)
        checks["drakit --version"] = in_rootfs(
            rootfs, ["drakit", "--version"], drakit_env, user=user
        ).strip()
        plugins = json.loads(
            in_rootfs(rootfs, ["drakit", "plugins", "-o", "json"], drakit_env, user=user)
        )
        checks["drakit plugins"] = sorted(f"{p['kind']}:{p['name']}" for p in plugins)
        checks["shared objects loaded"] = int(
            in_rootfs(
                rootfs,
                [
                    "python3.11",
                    "-c",
                    LOAD_SHARED_OBJECTS,
                    VENV,
                    f"/usr/lib/python{image_python[:4]}",
                ],
                drakit_env,
                user=user,
            )
        )
        log(
            f"inside the image: {checks['drakit --version']}; {len(plugins)} plugins; "
            f"{checks['shared objects loaded']} shared objects load"
        )
    return checks


# ---- build and cache ---------------------------------------------------------------------------


def cache_root() -> Path:
    """``${DRAKIT_CACHE_DIR:-~/.cache/drakit}/images``."""
    base = os.environ.get("DRAKIT_CACHE_DIR") or str(Path.home() / ".cache" / "drakit")
    return Path(base) / "images"


def _hash_files(h: Any, paths: list[Path]) -> None:
    for path in paths:
        h.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"<missing>")
        h.update(b"\0")


def _source_files() -> list[Path]:
    found = []
    for top in (REPO_ROOT / "core", REPO_ROOT / "plugins"):
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(
                d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith(".")
            )
            found += [
                Path(dirpath) / f for f in sorted(filenames) if not f.endswith((".pyc", ".pyo"))
            ]
    return found


def apt_state() -> bytes:
    """Which package lists apt has (an ``apt-get update`` can change what resolves)."""
    if not APT_LISTS.is_dir():
        return b""
    entries = sorted(
        f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
        for p in APT_LISTS.iterdir()
        if p.is_file() and "Packages" in p.name
    )
    return "\n".join(entries).encode()


def cache_key(image: str) -> str:
    """A digest of everything that goes into ``image`` ("test" or "drakit")."""
    h = hashlib.sha256()
    h.update(image.encode())
    _hash_files(h, [Path(__file__).resolve()])
    h.update(apt_state())
    if image == "drakit":
        _hash_files(
            h,
            [
                DOCKERFILE,
                PACKAGE_LIST,
                DPKG_EXCLUDES,
                INSTALL_SH,
                REPO_ROOT / "pyproject.toml",
                REPO_ROOT / "uv.lock",
                REPO_ROOT / "README.md",
                *_source_files(),
            ],
        )
        h.update(host_python().encode())
        h.update(run([uv_binary(), "--version"], what="asking uv its version").encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``: one build of a cache entry at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def dir_size(root: Path) -> int:
    """Bytes of the regular files under ``root``, each hard-linked inode once."""
    seen: set[int] = set()
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_size
    return total


def build(image: str, entry: Path, *, verify: bool) -> None:
    """Build ``image`` into the cache directory ``entry`` (``<image>.tar`` and ``build.json``)."""
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix=f"drakit-image-{image}-"))
    try:
        rootfs = scratch / "rootfs"
        rootfs.mkdir()
        rootfs.chmod(0o755)
        debcache = cache_root() / "debs"
        record: dict[str, Any] = {"image": image}
        if image == "test":
            name = TEST_IMAGE
            debs = resolve(["busybox-static"], scratch)
            busybox = [d for d in debs if d.name == "busybox-static"]
            files = fetch(busybox, debcache, scratch)
            record["applets"] = build_test_rootfs(files[0], rootfs, scratch)
            config: dict[str, Any] = {"Env": [f"PATH={BASE_PATH}"], "Cmd": WAIT_FOR_SIGNAL}
            created_by = "hack/node/images.py: busybox-static"
        else:
            name = f"{DRAKIT_REPOSITORY}:{drakit_version()}"
            runtime = runtime_config(DOCKERFILE.read_text(encoding="utf-8"))
            debs = resolve(package_list(), scratch)
            log(f"{len(debs)} Debian packages: {' '.join(d.name for d in debs)}")
            files = fetch(debs, debcache, scratch)
            record |= build_drakit_rootfs(files, rootfs, scratch, runtime, verify=verify)
            config = {"Env": [f"{k}={v}" for k, v in runtime.env.items()]}
            if runtime.user:
                config["User"] = runtime.user
            if runtime.entrypoint is not None:
                config["Entrypoint"] = runtime.entrypoint
            if runtime.cmd is not None:
                config["Cmd"] = runtime.cmd
            if runtime.workdir:
                config["WorkingDir"] = runtime.workdir
            created_by = "hack/node/images.py: deployments/Dockerfile's recipe"
        record["debian_packages"] = [f"{d.name}={d.version}" for d in debs]
        record["rootfs_bytes"] = dir_size(rootfs)
        log(f"writing the layer of {name}")
        layer = write_layer(rootfs, scratch / "layer.tar.gz")
        entry.mkdir(parents=True, exist_ok=True)
        tar = entry / f"{image}.tar"
        write_oci_tar(tar, name, layer, config, created_by)
        record |= {
            "name": name,
            "tar": tar.name,
            "tar_bytes": tar.stat().st_size,
            "layer_bytes": layer.size,
            "layer_tar_bytes": layer.tar_size,
            "build_seconds": round(time.monotonic() - started, 1),
        }
        (entry / "build.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        log(
            f"{name}: {record['tar_bytes'] / 1e6:.1f} MB tar, rootfs "
            f"{record['rootfs_bytes'] / 1e6:.1f} MB, {record['build_seconds']} s"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def ensure(image: str, out: Path, *, verify: bool) -> Path:
    """``out/<image>.tar`` from the cache, built first if its key has no complete entry.

    Under the image's lock: the build, the link into ``out`` and the pruning of old entries
    (a tarball already linked elsewhere keeps its data).
    """
    root = cache_root()
    entry = root / f"{image}-{cache_key(image)}"
    with locked(root / f".{image}.lock"):
        if not (entry / "build.json").is_file():
            log(f"building {image} into {entry}")
            shutil.rmtree(entry, ignore_errors=True)
            build(image, entry, verify=verify)
        else:
            log(f"{image}: cached in {entry}")
        (entry / "build.json").touch()  # used now: the last to be pruned
        target = place(entry / f"{image}.tar", out)
        for old in prune(root, image, keep=KEEP_ENTRIES):
            log(f"removed the older {old}")
    return target


def prune(root: Path, image: str, keep: int) -> list[Path]:
    """Remove all but the ``keep`` most recently used cache entries of ``image``."""
    entries = sorted(
        (e for e in root.glob(f"{image}-*") if (e / "build.json").is_file()),
        key=lambda e: (e / "build.json").stat().st_mtime_ns,
        reverse=True,
    )
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return entries[keep:]


def place(tar: Path, out: Path) -> Path:
    """``out/<name>.tar`` as a hard link to the cached file, or a copy across file systems."""
    target = out / tar.name
    target.unlink(missing_ok=True)
    try:
        os.link(tar, target)
    except OSError:
        shutil.copy2(tar, target)
    return target


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the images and place them in ``--out``; print its path."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", required=True, type=Path, help="directory for the tarballs")
    parser.add_argument(
        "--image",
        action="append",
        choices=["test", "drakit"],
        help="which image (repeatable; default: both)",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip running drakit and loading its shared objects inside the root filesystem",
    )
    args = parser.parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for image in args.image or ["test", "drakit"]:
            ensure(image, args.out, verify=not args.no_verify)
    except ImageError as exc:
        print(f"hack/node/images.py: {exc}", file=sys.stderr)
        return 1
    print(args.out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
