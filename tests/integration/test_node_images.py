"""hack/node/images.py builds the real node's images: what is in them, read back from the tarballs.

This needs what the build needs: apt with a Debian bookworm mirror configured (the packages are
downloaded with ``apt-get download``, once: ``.deb`` files and images are cached under
``${DRAKIT_CACHE_DIR:-~/.cache/drakit}/images``), ``dpkg-deb``, a Python 3.11 on the host, and
root or user namespaces for the check that runs drakit inside the root filesystem. A warm cache
answers in well under a second; a cold build of both images takes about half a minute.

The drakit image holds exactly the wheel set the Dockerfile's build stage installs: every
distribution that ``uv.lock`` requires for drakit and its backends on Linux/CPython 3.11, at the
locked version, plus the six workspace distributions (``install.sh`` does both; the Dockerfile
and images.py run it alike, see ``tests/unit/test_image_recipe.py``).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.utils import canonicalize_name
from tests.nodeimages import Image, build_images, load_script
from tests.public_api import REPO_ROOT
from tests.uvbin import uv

SHIPPED = ["drakit", "drakit-cpu", "drakit-nvidia-gpu", "drakit-amd-gpu", "drakit-amd-ainic",
           "drakit-composite"]  # fmt: skip
IMAGE_PYTHON_ENV = {
    "python_version": "3.11",
    "python_full_version": "3.11.2",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("apt-get") and shutil.which("dpkg-deb")),
        reason="hack/node/images.py needs apt-get and dpkg-deb (a Debian host)",
    ),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Image]:
    return build_images(tmp_path_factory.mktemp("images"))


class Unpacked:
    """An OCI layout tarball read back: the image's name, config, and its one layer's files."""

    def __init__(self, tar: Path) -> None:
        with tarfile.open(tar) as t:
            blobs = {
                m.name: f.read()
                for m in t.getmembers()
                if m.isfile() and (f := t.extractfile(m)) is not None
            }
        (entry,) = json.loads(blobs["index.json"])["manifests"]
        self.name: str = entry["annotations"]["io.containerd.image.name"]
        manifest = json.loads(blobs[f"blobs/sha256/{entry['digest'][7:]}"])
        self.config: dict[str, Any] = json.loads(
            blobs[f"blobs/sha256/{manifest['config']['digest'][7:]}"]
        )
        (layer,) = manifest["layers"]
        self.layer = tarfile.open(  # noqa: SIM115 - kept open while the test reads it
            fileobj=io.BytesIO(gzip.decompress(blobs[f"blobs/sha256/{layer['digest'][7:]}"]))
        )
        self.members = {m.name: m for m in self.layer.getmembers()}

    def read(self, name: str) -> str:
        f = self.layer.extractfile(self.members[name])
        assert f is not None
        return f.read().decode()


@pytest.fixture(scope="module")
def drakit_image(built: dict[str, Image]) -> Unpacked:
    return Unpacked(built["drakit"].tar)


def test_script_prints_the_out_dir_and_caches(built: dict[str, Image], tmp_path: Path) -> None:
    again = build_images(tmp_path, "test")  # warm: from the cache, linked into a new dir
    assert again["test"].tar.read_bytes() == built["test"].tar.read_bytes()


def test_test_image(built: dict[str, Image]) -> None:
    image = Unpacked(built["test"].tar)
    assert image.name == built["test"].name == "docker.io/drakit/test:1"
    assert image.config["config"]["Cmd"] == [
        "sh",
        "-c",
        "trap 'exit 0' TERM INT; sleep 2147483647 & wait",
    ]
    assert "Entrypoint" not in image.config["config"]  # a pod's command replaces the wait
    assert image.members["bin/busybox"].isfile()
    for applet in ("bin/sh", "bin/cat", "bin/ls", "usr/bin/env", "bin/sleep", "bin/stat",
                   "bin/grep"):  # fmt: skip
        assert image.members[applet].linkname == "/bin/busybox", applet
    assert image.read("etc/passwd").startswith("root:x:0:0:")
    assert image.members["tmp"].mode == 0o1777


def test_drakit_image_config_is_the_dockerfiles(
    built: dict[str, Image], drakit_image: Unpacked
) -> None:
    script = load_script()
    runtime = load_script("image_recipe").runtime_config(
        (REPO_ROOT / "deployments" / "Dockerfile").read_text()
    )
    image = drakit_image
    assert (
        image.name == built["drakit"].name == f"docker.io/drakit/drakit:{script.drakit_version()}"
    )
    config = image.config["config"]
    assert config["Env"] == [f"{k}={v}" for k, v in runtime.env.items()]
    assert config["User"] == runtime.user == "65532:65532"
    assert config["Entrypoint"] == runtime.entrypoint == ["drakit"]
    assert config["Cmd"] == runtime.cmd
    assert "drakit:x:65532:65532:" in image.read("etc/passwd")
    assert "\nhosts:          files dns\n" in image.read("etc/nsswitch.conf")


def test_drakit_image_has_debians_python_and_a_venv_for_it(drakit_image: Unpacked) -> None:
    image = drakit_image
    assert image.members["usr/bin/python3.11"].isfile()
    assert image.members["bin"].linkname == "usr/bin"  # merged /usr, as bookworm
    assert image.members["opt/drakit/bin/python"].linkname == "/usr/bin/python3.11"
    cfg = image.read("opt/drakit/pyvenv.cfg")
    assert "home = /usr/bin\n" in cfg
    assert re.search(r"^version_info = 3\.11\.\d+$", cfg, re.MULTILINE)
    assert image.read("opt/drakit/bin/drakit").startswith("#!/opt/drakit/bin/python\n")
    assert "usr/share/doc/python3.11/copyright" in image.members
    assert not [n for n in image.members if n.startswith("usr/share/man/man1/")]


def locked_wheel_set() -> dict[str, str]:
    """What uv.lock requires for the shipped distributions on the image's Python."""
    argv = [uv(), "export", "--frozen", "--no-dev", "--no-emit-workspace", "--no-hashes",
            "--format", "requirements-txt"]  # fmt: skip
    for name in SHIPPED:
        argv += ["--package", name]
    out = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    wanted: dict[str, str] = {}
    for line in out.splitlines():
        if not line or line.startswith(("#", " ")):
            continue
        requirement, _, marker = line.partition(";")
        name, _, version = requirement.strip().partition("==")
        if marker.strip() and not Marker(marker.strip()).evaluate(IMAGE_PYTHON_ENV):
            continue
        wanted[canonicalize_name(name)] = version
    return wanted


def test_drakit_image_holds_the_locked_wheel_set(drakit_image: Unpacked) -> None:
    image = drakit_image
    site = "opt/drakit/lib/python3.11/site-packages/"
    installed: dict[str, str] = {}
    for name in image.members:
        m = re.fullmatch(re.escape(site) + r"([^/]+)-([^/-]+)\.dist-info/METADATA", name)
        if m:
            installed[canonicalize_name(m[1])] = m[2]
    workspace = {canonicalize_name(n) for n in SHIPPED}
    assert {n: v for n, v in installed.items() if n not in workspace} == locked_wheel_set()
    assert set(installed) >= workspace
    assert not {"pytest", "mypy", "drakit-example-thirdparty", "drakit-sim-profiles"} & set(
        installed
    )


def unpack(image: Unpacked, dest: Path) -> Path:
    """The layer on disk, as a snapshotter unpacks it (absolute links kept as they are)."""
    image.layer.extractall(dest, filter="fully_trusted")  # noqa: S202 - our own image
    return dest


def in_root(root: Path, argv: list[str], user: str | None = None) -> list[str]:
    """``argv`` run inside ``root`` with the host's ``/dev/null`` bound in, in a mount namespace
    of its own (``--map-root-user`` too where this is not root, and then as root)."""
    (root / "dev" / "null").touch()
    spec = f"--userspec={user} " if user and os.geteuid() == 0 else ""
    script = f'mount --bind /dev/null "$0/dev/null" && exec chroot {spec}"$0" "$@"'
    userns = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", "--mount", *userns, "sh", "-c", script, str(root), *argv]


def test_the_sandbox_command_waits_for_sigterm(built: dict[str, Image], tmp_path: Path) -> None:
    """The test image as the pod sandbox: it keeps running, and ends at once, with 0, on TERM."""
    image = Unpacked(built["test"].tar)
    root = unpack(image, tmp_path / "root")
    env = {e.split("=", 1)[0]: e.split("=", 1)[1] for e in image.config["config"]["Env"]}
    proc = subprocess.Popen(in_root(root, image.config["config"]["Cmd"]), env=env)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # reaches busybox sh: unshare, sh, chroot exec it
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 5  # not the sleep of 68 years
    finally:
        proc.kill()
        proc.wait()


def test_drakit_runs_from_the_unpacked_image(
    drakit_image: Unpacked, built: dict[str, Image], tmp_path: Path
) -> None:
    """What containerd unpacks from the tarball runs drakit as the image's user."""
    root = unpack(drakit_image, tmp_path / "root")
    config = drakit_image.config["config"]
    env = {e.split("=", 1)[0]: e.split("=", 1)[1] for e in config["Env"]}
    out = subprocess.run(
        in_root(root, [*config["Entrypoint"], "--version"], user=config["User"]),
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out == f"drakit, version {built['drakit'].name.rsplit(':', 1)[1]}\n"
