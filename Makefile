# drakit's two entry points: `make demo` and `make test` (what CI runs via .ci/run).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
UV = $(shell hack/ensure-uv.sh)

.PHONY: setup demo test lint unit e2e control-plane node helm kueue nvidia-ctk bench fmt

# --inexact: keep packages the lock does not name (a vendor's `uv pip install -e ../my-plugin`)
setup:
	$(UV) sync --all-packages --frozen --inexact

demo: setup
	$(UV) run drakit demo

lint: setup
	$(UV) run ruff check .
	$(UV) run ruff format --check .
	$(UV) run mypy
	$(UV) run lint-imports

# Builds kube-apiserver, kube-scheduler, kube-controller-manager, etcd and the kubelet
# stand-in from the Go module proxy (cached under ~/.cache/drakit/k8s/, a no-op when warm).
control-plane:
	hack/control-plane/build.sh >/dev/null

# Builds containerd, ctr, the runc shim, runc and the CNI plugins for the real-node tests
# (hack/node/build.sh pins them; cached under ~/.cache/drakit/node/, a no-op when warm). The
# kubelet comes with the control plane; the images are written when the tests start.
node:
	hack/node/build.sh >/dev/null

# Builds the helm CLI that lints and renders deployments/helm/drakit (hack/helm/go.mod pins it;
# cached under ~/.cache/drakit/helm/, a no-op when warm).
helm:
	hack/helm/build.sh >/dev/null

# Builds the Kueue manager for the Kueue e2e (hack/kueue/go.mod pins sigs.k8s.io/kueue; its CRDs
# and webhook configurations come from the same module; cached under ~/.cache/drakit/kueue/).
kueue:
	hack/kueue/build.sh >/dev/null

# Builds nvidia-ctk and nvidia-cdi-hook for the NVIDIA backend's toolkit-mode tests
# (hack/nvidia-ctk/build.sh pins the toolkit; cached under ~/.cache/drakit/nvidia-ctk/).
nvidia-ctk:
	hack/nvidia-ctk/build.sh >/dev/null

unit: setup helm nvidia-ctk
	$(UV) run pytest -m "not e2e"

test: lint control-plane node helm kueue nvidia-ctk
	DRAKIT_E2E_REQUIRED=1 $(UV) run pytest

bench: setup
	$(UV) run python benchmarks/run.py

fmt: setup
	$(UV) run ruff format .
	$(UV) run ruff check --fix .
