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
the key being a digest of everything that goes into the image (this script and its two parts,
the Dockerfile, the package list and filters, apt's package lists, ``install.sh``, ``uv.lock``,
the sources of the shipped distributions, the host Python and uv used for the install); the
downloaded ``.deb`` files are kept under ``images/debs/``; the four most recently used entries
of each image stay. DIR receives hard links to the cached files (copies across file systems).

Its parts beside it in hack/node: ``image_recipe.py`` (what the Dockerfile and the files of
``deployments/image`` say) and ``oci_layout.py`` (the tarballs); running the script puts its
directory first on ``sys.path``, which is how it finds them.

env: ``UV`` (the uv binary; else ``hack/ensure-uv.sh`` finds it), ``DRAKIT_IMAGE_HOST_PYTHON``
(a Python 3.11 on the host that ``install.sh`` makes the environment with; default
``/usr/bin/python3.11``, else ``python3.11`` on PATH).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from image_recipe import (
    BASE_PATH,
    DOCKERFILE,
    DPKG_EXCLUDES,
    IMAGE_PYTHON,
    IMAGE_USER,
    INSTALL_SH,
    PACKAGE_LIST,
    REPO_ROOT,
    VENV,
    ImageError,
    RuntimeConfig,
    User,
    dpkg_filters,
    drakit_version,
    filtered_out,
    install_command,
    package_list,
    runtime_config,
)
from oci_layout import write_layer, write_oci_tar

TEST_IMAGE = "docker.io/drakit/test:1"
DRAKIT_REPOSITORY = "docker.io/drakit/drakit"
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
APT_LISTS = Path("/var/lib/apt/lists")
# Cache entries kept per image (each drakit entry is about 60 MB): a few worktrees or commits.
KEEP_ENTRIES = 4
# Source trees whose content goes into the wheels: anything else under core/ and plugins/
# (tests, caches) does not change the image.
SKIPPED_DIRS = {"tests", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "dist"}


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
    here = Path(__file__).resolve().parent
    _hash_files(h, [here / "images.py", here / "image_recipe.py", here / "oci_layout.py"])
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
