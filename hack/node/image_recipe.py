"""deployments/Dockerfile's recipe for drakit's image, as hack/node/images.py reads it.

The Dockerfile's stages and the directives that end up in an image's config (ENV, USER,
ENTRYPOINT, CMD, WORKDIR), the Debian package list and dpkg's path filters of
``deployments/image``, and the constants both builds share: where the virtual environment
goes, its interpreter, the image's user. Python 3.11 standard library only.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple


class ImageError(Exception):
    """A build step failed; the message names the step and what to do."""


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

# Where the Dockerfile's build stage puts the virtual environment, and its interpreter there.
VENV = "/opt/drakit"
IMAGE_PYTHON = "/usr/bin/python3.11"
# The image user the Dockerfile's runtime stage adds (groupadd/useradd).
IMAGE_USER = User(
    name="drakit", uid=65532, gid=65532, home="/nonexistent", login_shell="/usr/sbin/nologin"
)
# debian:bookworm-slim's own PATH, which the Dockerfile's ENV PATH=...:${PATH} extends.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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
