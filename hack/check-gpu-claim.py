"""Check a prepared NVIDIA GPU claim's CDI spec against the node it was prepared on.

Usage, on a GPU node after drakit prepared a claim (from the repository root)::

    uv run python hack/check-gpu-claim.py --claim-uid <uid>            # exit 0: all good
    uv run python hack/check-gpu-claim.py --claim-uid <uid> --json     # the findings as JSON
    uv run python hack/check-gpu-claim.py --spec /var/run/cdi/k8s.<driver>-claim_<uid>.json

What it checks, per CDI device of the claim's spec:

* every device node exists on the host (``hostPath``, else ``--device-root`` + ``path``) and
  is a character device; ``/dev/nvidia<N>`` and ``/dev/nvidia-caps/nvidia-cap<N>`` have minor
  ``N``, and each node's major is the one ``/proc/devices`` gives its driver (``nvidia-frontend``
  or ``nvidia``, ``nvidia-uvm``, ``nvidia-caps``);
* ``NVIDIA_VISIBLE_DEVICES`` is set, the same on every device of the claim, and names only
  GPUs (or MIG devices) the node has (``nvidia-smi -L``, or ``--uuids``);
* every mount's ``hostPath`` exists, and the driver's ``libcuda.so.<version>`` is mounted
  (``--no-driver-files`` when the NVIDIA runtime in legacy mode brings the libraries instead);
* every hook's ``path`` is an executable file.

It reads files only; ``nvidia-smi`` is run for ``-L`` unless ``--uuids`` is given. It has not been
run on real hardware yet (see ``docs/gpu-backends.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

VISIBLE = "NVIDIA_VISIBLE_DEVICES"
_NODE_MAJOR = (
    (re.compile(r"^/dev/nvidia(\d+)$"), ("nvidia-frontend", "nvidia")),
    (re.compile(r"^/dev/nvidia(ctl)$"), ("nvidia-frontend", "nvidia")),
    (re.compile(r"^/dev/nvidia-uvm(-tools)?$"), ("nvidia-uvm",)),
    (re.compile(r"^/dev/nvidia-caps/nvidia-cap(\d+)$"), ("nvidia-caps",)),
)
_UUID = re.compile(r"\(UUID: ((?:GPU|MIG)-[^)]+)\)")


def proc_devices(text: str) -> dict[str, int]:
    """Character device driver name -> major, from ``/proc/devices``."""
    out: dict[str, int] = {}
    block = False
    for line in text.splitlines():
        if line.startswith("Character devices:"):
            block = True
            continue
        if line.startswith("Block devices:"):
            break
        parts = line.split()
        if block and len(parts) == 2 and parts[0].isdigit():  # noqa: PLR2004 - "<major> <name>"
            out.setdefault(parts[1], int(parts[0]))
    return out


def smi_uuids(text: str) -> set[str]:
    """The GPU and MIG UUIDs ``nvidia-smi -L`` lists."""
    return set(_UUID.findall(text))


def check_node(node: dict[str, Any], device_root: str, majors: dict[str, int]) -> list[str]:
    """Problems with one ``deviceNodes`` entry (empty: none)."""
    path = str(node["path"])
    host = str(node.get("hostPath") or f"{device_root.rstrip('/')}{path}")
    try:
        st = os.stat(host)
    except OSError as e:
        return [f"{path}: {host} is missing on the host ({os.strerror(e.errno or 0)})"]
    if not stat.S_ISCHR(st.st_mode):
        return [f"{path}: {host} is not a character device"]
    problems = []
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    for pattern, drivers in _NODE_MAJOR:
        m = pattern.match(path)
        if m is None:
            continue
        if m.group(1) and m.group(1).isdigit() and int(m.group(1)) != minor:
            problems.append(f"{path}: {host} has minor {minor}, expected {m.group(1)}")
        want = next((majors[d] for d in drivers if d in majors), None)
        if want is not None and major != want:
            problems.append(
                f"{path}: {host} has major {major}, but /proc/devices gives {drivers[0]} {want}"
            )
    return problems


def check_spec(
    spec: dict[str, Any],
    *,
    device_root: str,
    majors: dict[str, int],
    uuids: set[str] | None,
    driver_files: bool,
) -> list[str]:
    """Every problem with a claim's CDI spec (empty: it is good)."""
    problems: list[str] = []
    visible: set[str] = set()
    devices = spec.get("devices") or []
    if not devices:
        return ["the spec has no devices"]
    shared = spec.get("containerEdits") or {}  # applied with any device of the spec (go-cdi)
    for dev in devices:
        name = dev.get("name", "?")
        own = dev.get("containerEdits") or {}
        edits = {k: [*(shared.get(k) or []), *(own.get(k) or [])] for k in {*shared, *own}}
        for node in edits.get("deviceNodes") or []:
            problems += [f"device {name}: {p}" for p in check_node(node, device_root, majors)]
        env = dict(e.split("=", 1) for e in edits.get("env") or [] if "=" in e)
        if VISIBLE not in env:
            problems.append(f"device {name}: {VISIBLE} is not set")
        else:
            visible.add(env[VISIBLE])
        mounts = edits.get("mounts") or []
        for mount in mounts:
            if not os.path.lexists(mount["hostPath"]):
                problems.append(
                    f"device {name}: mount {mount['containerPath']}: {mount['hostPath']} is "
                    "missing on the host"
                )
        if driver_files and not any(re.search(r"/libcuda\.so\.\d", m["hostPath"]) for m in mounts):
            problems.append(f"device {name}: no libcuda.so.<version> is mounted")
        for hook in edits.get("hooks") or []:
            if not (os.path.isfile(hook["path"]) and os.access(hook["path"], os.X_OK)):
                problems.append(f"device {name}: hook {hook['path']} is not an executable file")
    if len(visible) > 1:
        problems.append(f"the devices disagree on {VISIBLE}: {sorted(visible)}")
    named = {u for v in visible for u in v.split(",") if u}
    if uuids is not None:
        problems += [
            f"{VISIBLE} names {u}, which this node does not have" for u in sorted(named - uuids)
        ]
    return problems


def main(argv: list[str] | None = None) -> int:
    """Check the spec; 0 when it is good, 1 when not, 2 when it cannot be checked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--claim-uid", help="the claim's UID (its spec is found in --cdi-dir)")
    which.add_argument("--spec", type=Path, help="the CDI spec file itself")
    parser.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"))
    parser.add_argument("--device-root", default="/", help="drakit's device_root")
    parser.add_argument("--proc", type=Path, default=Path("/proc"), help="where /proc is")
    parser.add_argument("--uuids", help="the node's GPU/MIG UUIDs, comma-separated")
    parser.add_argument("--no-driver-files", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.spec is not None:
        specs = [args.spec]
    else:
        specs = sorted(args.cdi_dir.glob(f"*-claim_{args.claim_uid}.json"))
    if len(specs) != 1:
        print(f"expected one spec for the claim, found {len(specs)}", file=sys.stderr)
        return 2
    if args.uuids is not None:
        uuids: set[str] | None = {u for u in args.uuids.split(",") if u}
    else:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            print("nvidia-smi is not on PATH: give --uuids", file=sys.stderr)
            return 2
        out = subprocess.run([smi, "-L"], check=True, capture_output=True, text=True, timeout=60)
        uuids = smi_uuids(out.stdout)
    try:
        majors = proc_devices((args.proc / "devices").read_text())
    except OSError:
        majors = {}
    problems = check_spec(
        json.loads(specs[0].read_text()),
        device_root=args.device_root,
        majors=majors,
        uuids=uuids,
        driver_files=not args.no_driver_files,
    )
    if args.json:
        print(json.dumps({"spec": str(specs[0]), "problems": problems}, indent=2))
    else:
        print("\n".join(problems) if problems else f"{specs[0]}: good")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
