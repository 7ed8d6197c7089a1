"""deployments/Dockerfile and hack/node/images.py are one recipe for drakit's image.

Both take the Debian packages of ``deployments/image/debian-packages.txt`` with the path
filters of ``deployments/image/dpkg-excludes.cfg``, both make the virtual environment with
``deployments/image/install.sh`` at ``/opt/drakit`` for ``/usr/bin/python3.11``, and images.py
takes the image config (ENV, USER, ENTRYPOINT, CMD) from the Dockerfile's runtime stage; these
tests read the Dockerfile and hold images.py to it, and check images.py's parts (the Dockerfile
reader, dpkg's filters, the merged /usr, the OCI layout) on small inputs. No network: the build
itself is checked by ``tests/integration/test_node_images.py``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shlex
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.nodeimages import load_script
from tests.public_api import REPO_ROOT

DOCKERFILE = REPO_ROOT / "deployments" / "Dockerfile"


@pytest.fixture(scope="module")
def images() -> ModuleType:
    return load_script()


@pytest.fixture(scope="module")
def recipe() -> ModuleType:
    return load_script("image_recipe")


@pytest.fixture(scope="module")
def oci() -> ModuleType:
    return load_script("oci_layout")


@pytest.fixture(scope="module")
def stages(recipe: ModuleType) -> list[Any]:
    return list(recipe.parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8")))


def runtime_chain(stages: list[Any]) -> list[Any]:
    """The last stage and the stages it is built FROM, base first."""
    by_name = {s.name: s for s in stages if s.name}
    chain = [stages[-1]]
    while chain[0].base in by_name:
        chain.insert(0, by_name[chain[0].base])
    return chain


# ---- the Dockerfile and images.py agree --------------------------------------------------------


def test_the_runtime_config_is_the_dockerfiles(recipe: ModuleType) -> None:
    config = recipe.runtime_config(DOCKERFILE.read_text(encoding="utf-8"))
    assert config.env == {
        "PATH": f"/opt/drakit/bin:{recipe.BASE_PATH}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    assert config.user == f"{recipe.IMAGE_USER.uid}:{recipe.IMAGE_USER.gid}"
    assert config.entrypoint == ["drakit"]
    assert config.cmd == ["--help"]


def test_the_runtime_stage_stands_on_debian_bookworm(stages: list[Any]) -> None:
    chain = runtime_chain(stages)
    assert chain[0].base == "${DEBIAN_IMAGE}"
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "ARG DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim\n" in text


def test_apt_installs_only_the_package_list(stages: list[Any], recipe: ModuleType) -> None:
    """What the runtime image gets from apt is the list images.py reads, filtered alike."""
    chain = runtime_chain(stages)
    copies = [c for s in chain for c in s.copies]
    assert "deployments/image/debian-packages.txt /tmp/debian-packages.txt" in copies
    assert "deployments/image/dpkg-excludes.cfg /etc/dpkg/dpkg.cfg.d/drakit" in copies
    installs = [r for s in chain for r in s.runs if "apt-get install" in r]
    assert len(installs) == 1
    command = installs[0]
    assert "/tmp/debian-packages.txt | xargs apt-get install -y --no-install-recommends" in (
        " ".join(command.split())
    )
    # nothing else after `install` on that line: the packages come from the file alone
    tail = command.split("--no-install-recommends", 1)[1].split("&&", 1)[0]
    assert tail.strip() == ""
    assert recipe.PACKAGE_LIST == REPO_ROOT / "deployments/image/debian-packages.txt"
    assert recipe.DPKG_EXCLUDES == REPO_ROOT / "deployments/image/dpkg-excludes.cfg"
    assert "python3.11" in recipe.package_list()


def test_both_install_the_environment_with_install_sh(
    stages: list[Any], recipe: ModuleType, tmp_path: Path
) -> None:
    """Same script, same place, same interpreter: the same wheel set from uv.lock."""
    build = next(s for s in stages if s.name == "build")
    runs = [shlex.split(r) for r in build.runs if "install.sh" in r]
    assert runs == [
        [
            f"DRAKIT_IMAGE_PYTHON={recipe.IMAGE_PYTHON}",
            "deployments/image/install.sh",
            recipe.VENV,
            "/tmp/wheels",
        ]
    ]
    assert f"--from=build {recipe.VENV} {recipe.VENV}" in runtime_chain(stages)[-1].copies
    assert recipe.install_command(tmp_path / "venv", tmp_path / "wheels") == [
        "bash",
        str(REPO_ROOT / "deployments/image/install.sh"),
        str(tmp_path / "venv"),
        str(tmp_path / "wheels"),
    ]


def test_the_image_user_is_the_dockerfiles(stages: list[Any], recipe: ModuleType) -> None:
    run = next(r for r in runtime_chain(stages)[-1].runs if "useradd" in r)
    groupadd, useradd = (shlex.split(part) for part in run.split("&&"))

    def flag(words: list[str], name: str) -> str:
        return words[words.index(name) + 1]

    user = recipe.IMAGE_USER
    assert groupadd[-1] == useradd[-1] == user.name
    assert flag(groupadd, "--gid") == str(user.gid)
    assert flag(useradd, "--uid") == str(user.uid)
    assert flag(useradd, "--gid") == str(user.gid)
    assert flag(useradd, "--home-dir") == user.home
    assert flag(useradd, "--shell") == user.login_shell


# ---- the Dockerfile reader ---------------------------------------------------------------------


def test_dockerfile_reader_follows_stages_and_expands_env(recipe: ModuleType) -> None:
    text = """\
# comment
ARG BASE=debian
FROM ${BASE} AS one
ENV A=1 \\
    # a comment inside a continuation
    PATH=/one:${PATH}
USER 1:1
FROM other AS unrelated
ENV B=2
CMD ["nope"]
FROM one
ENV PATH=/two:$PATH C="x y"
ENTRYPOINT ["run", "it"]
"""
    config = recipe.runtime_config(text, base_path="/usr/bin")
    assert config.env == {"PATH": "/two:/one:/usr/bin", "A": "1", "C": "x y"}
    assert config.user == "1:1"
    assert config.entrypoint == ["run", "it"]
    assert config.cmd is None


def test_shell_form_entrypoint_is_refused(recipe: ModuleType) -> None:
    with pytest.raises(
        recipe.ImageError, match=r"only the exec form \(ENTRYPOINT \[\"drakit\"\]\)"
    ):
        recipe.runtime_config("FROM debian\nENTRYPOINT drakit node\n")


def test_a_bad_package_line_names_file_and_line(recipe: ModuleType, tmp_path: Path) -> None:
    listing = tmp_path / "debian-packages.txt"
    listing.write_text("# ok\npython3.11\nlibfoo libbar\n", encoding="utf-8")
    with pytest.raises(recipe.ImageError, match=r"debian-packages.txt:3: 'libfoo libbar'"):
        recipe.package_list(listing)
    listing.write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(recipe.ImageError, match="names no package"):
        recipe.package_list(listing)


# ---- dpkg's path filters and the merged /usr ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "left_out"),
    [
        ("/usr/share/doc/python3.11/changelog.Debian.gz", True),
        ("/usr/share/doc/python3.11/copyright", False),
        ("/usr/share/man/man1/python3.11.1.gz", True),
        ("/usr/share/locale/de/LC_MESSAGES/libc.mo", True),
        ("/usr/bin/python3.11", False),
        ("/usr/lib/python3.11/os.py", False),
        ("/usr/share/doc", False),
    ],
)
def test_dpkg_filters(recipe: ModuleType, path: str, left_out: bool) -> None:
    assert recipe.filtered_out(path, recipe.dpkg_filters()) is left_out


def test_filters_keep_the_directories_of_kept_files(
    images: ModuleType, recipe: ModuleType, tmp_path: Path
) -> None:
    for rel in (
        "usr/share/doc/pkg/copyright",
        "usr/share/doc/pkg/changelog.gz",
        "usr/share/man/man1/pkg.1.gz",
        "usr/bin/pkg",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x", encoding="utf-8")
    assert images.apply_filters(tmp_path, recipe.dpkg_filters()) == 2
    assert (tmp_path / "usr/share/doc/pkg/copyright").is_file()
    assert not (tmp_path / "usr/share/doc/pkg/changelog.gz").exists()
    assert not (tmp_path / "usr/share/man/man1").exists()
    assert (tmp_path / "usr/share/man").is_dir()
    assert (tmp_path / "usr/bin/pkg").is_file()


def test_merge_usr(images: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "lib/x86_64-linux-gnu").mkdir(parents=True)
    (tmp_path / "lib/x86_64-linux-gnu/libc.so.6").write_text("libc", encoding="utf-8")
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64/ld-linux-x86-64.so.2").symlink_to("/lib/x86_64-linux-gnu/ld.so")
    (tmp_path / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (tmp_path / "usr/lib/x86_64-linux-gnu/libpython.so").write_text("py", encoding="utf-8")
    images.merge_usr(tmp_path)
    for top in ("bin", "sbin", "lib", "lib64"):
        assert (tmp_path / top).readlink() == Path(f"usr/{top}")
    assert (tmp_path / "usr/lib/x86_64-linux-gnu/libc.so.6").read_text(encoding="utf-8") == "libc"
    assert (tmp_path / "usr/lib/x86_64-linux-gnu/libpython.so").is_file()
    assert (tmp_path / "lib64/ld-linux-x86-64.so.2").readlink() == Path(
        "/lib/x86_64-linux-gnu/ld.so"
    )


def test_merge_usr_refuses_a_clash(images: ModuleType, recipe: ModuleType, tmp_path: Path) -> None:
    for rel in ("bin/sh", "usr/bin/sh"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel, encoding="utf-8")
    with pytest.raises(recipe.ImageError, match="both exist"):
        images.merge_usr(tmp_path)


# ---- the OCI image layout ----------------------------------------------------------------------


def read_layout(tar: Path) -> dict[str, bytes]:
    with tarfile.open(tar) as t:
        return {
            m.name: f.read()
            for m in t.getmembers()
            if m.isfile() and (f := t.extractfile(m)) is not None
        }


def test_oci_layout_is_consistent(images: ModuleType, oci: ModuleType, tmp_path: Path) -> None:
    """Every digest and size matches its blob, the index names the image, the diff_id is the
    tar's digest: what ``ctr images import`` checks."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin/busybox").write_bytes(b"\x7fELF busybox")
    (rootfs / "bin/busybox").chmod(0o755)
    (rootfs / "bin/sh").symlink_to("/bin/busybox")
    (rootfs / "bin/hard").hardlink_to(rootfs / "bin/busybox")
    layer = oci.write_layer(rootfs, tmp_path / "layer.tar.gz")
    out = tmp_path / "image.tar"
    config = {"Cmd": images.WAIT_FOR_SIGNAL}
    oci.write_oci_tar(out, "docker.io/drakit/test:1", layer, config, "test")

    files = read_layout(out)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/drakit/test:1"
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    manifest_bytes = files[f"blobs/sha256/{entry['digest'][7:]}"]
    assert entry["size"] == len(manifest_bytes)
    manifest = json.loads(manifest_bytes)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    image_config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert image_config["config"] == config
    (layer_desc,) = manifest["layers"]
    assert layer_desc["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    blob = files[f"blobs/sha256/{layer_desc['digest'][7:]}"]
    assert layer_desc["size"] == len(blob)
    plain = gzip.decompress(blob)
    assert image_config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(plain).hexdigest()}"]

    with tarfile.open(fileobj=io.BytesIO(plain)) as t:
        members = {m.name: m for m in t.getmembers()}
    assert list(members) == ["bin", "bin/busybox", "bin/hard", "bin/sh"]
    assert all(m.uid == 0 and m.gid == 0 for m in members.values())
    assert members["bin/busybox"].mode == 0o755
    assert members["bin/sh"].issym()
    assert members["bin/sh"].linkname == "/bin/busybox"
    assert members["bin/hard"].islnk()
    assert members["bin/hard"].linkname == "bin/busybox"


def test_prune_keeps_the_most_recently_used_entries(images: ModuleType, tmp_path: Path) -> None:
    for age, key in enumerate(["newest", "newer", "old", "oldest"]):
        entry = tmp_path / f"drakit-{key}"
        entry.mkdir()
        (entry / "build.json").write_text("{}", encoding="utf-8")
        os.utime(entry / "build.json", ns=(0, 10**18 - age * 10**9))
    (tmp_path / "drakit-unfinished").mkdir()  # a build in progress has no build.json yet
    (tmp_path / "test-other").mkdir()
    (tmp_path / "test-other" / "build.json").write_text("{}", encoding="utf-8")

    removed = images.prune(tmp_path, "drakit", keep=2)

    assert [p.name for p in removed] == ["drakit-old", "drakit-oldest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "drakit-newer",
        "drakit-newest",
        "drakit-unfinished",
        "test-other",
    ]


def test_fix_venv_points_the_environment_at_the_image(images: ModuleType, tmp_path: Path) -> None:
    """What uv wrote for the host's path and interpreter, rewritten for /opt/drakit."""
    venv = tmp_path / "rootfs" / "opt" / "drakit"
    bindir = venv / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").symlink_to("/root/.pyenv/versions/3.11.7/bin/python3.11")
    (bindir / "python3").symlink_to("python")
    (bindir / "drakit").write_text(f"#!{venv}/bin/python\nimport drakit\n", encoding="utf-8")
    long_form = f"#!/bin/sh\n'''exec' '{venv}/bin/python' \"$0\" \"$@\"\n' '''\nimport sys\n"
    (bindir / "long").write_text(long_form, encoding="utf-8")
    (bindir / "activate").write_text(f"VIRTUAL_ENV='{venv}'\n", encoding="utf-8")
    (venv / "pyvenv.cfg").write_text(
        "home = /root/.pyenv/versions/3.11.7/bin\nimplementation = CPython\n"
        "version_info = 3.11.7\ninclude-system-site-packages = false\n",
        encoding="utf-8",
    )

    images.fix_venv(venv, "/opt/drakit", "3.11.2")

    assert (bindir / "python").readlink() == Path("/usr/bin/python3.11")
    assert (bindir / "python3").readlink() == Path("python")
    assert (bindir / "drakit").read_text(encoding="utf-8") == (
        "#!/opt/drakit/bin/python\nimport drakit\n"
    )
    assert (bindir / "long").read_text(encoding="utf-8") == (
        "#!/opt/drakit/bin/python\nimport sys\n"
    )
    assert (bindir / "activate").read_text(encoding="utf-8") == "VIRTUAL_ENV='/opt/drakit'\n"
    assert (venv / "pyvenv.cfg").read_text(encoding="utf-8") == (
        "home = /usr/bin\nimplementation = CPython\n"
        "version_info = 3.11.2\ninclude-system-site-packages = false\n"
    )
