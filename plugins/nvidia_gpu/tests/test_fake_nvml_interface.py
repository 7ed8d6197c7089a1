"""The fake NVML keeps pynvml's interface: same names, parameters, constants and error codes.

The backend calls one set of functions on either library, so every function, constant and
error class the fake offers must exist in nvidia-ml-py with the same shape; a drift in either
shows up here rather than on a GPU node.
"""

from __future__ import annotations

import inspect

import pynvml
import pytest

from drakit_nvidia_gpu.sim import FakeNvml

FUNCTIONS = sorted(n for n, v in vars(FakeNvml).items() if n.startswith("nvml") and callable(v))
CONSTANTS = sorted(
    n
    for n, v in vars(FakeNvml).items()
    if (n.isupper() or n.startswith("nvmlEventType")) and isinstance(v, int)
)
ERRORS = sorted(n for n in vars(FakeNvml) if n.startswith("NVMLError_"))


def test_the_fake_covers_what_the_backend_calls() -> None:
    assert len(FUNCTIONS) > 30
    assert {
        "nvmlInitWithFlags",
        "nvmlEventSetWait",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
    } <= set(FUNCTIONS)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_function_exists_in_pynvml_with_the_same_parameters(name: str) -> None:
    real = getattr(pynvml, name)
    fake = inspect.signature(getattr(FakeNvml, name))
    ours = [p for p in list(fake.parameters.values())[1:]]  # without self
    theirs = list(inspect.signature(real).parameters.values())
    assert len(ours) == len(theirs), (name, ours, theirs)
    required = [p for p in theirs if p.default is inspect.Parameter.empty]
    assert len([p for p in ours if p.default is inspect.Parameter.empty]) == len(required)


@pytest.mark.parametrize("name", CONSTANTS)
def test_each_constant_has_pynvmls_value(name: str) -> None:
    assert getattr(FakeNvml, name) == getattr(pynvml, name)


@pytest.mark.parametrize("name", ERRORS)
def test_each_error_has_pynvmls_code(name: str) -> None:
    fake_cls = getattr(FakeNvml, name)
    real_cls = getattr(pynvml, name)
    assert fake_cls.value == real_cls(fake_cls.value).value
    assert issubclass(real_cls, pynvml.NVMLError)


def test_the_placement_structure_has_pynvmls_layout() -> None:
    assert (
        FakeNvml.c_nvmlGpuInstancePlacement_t._fields_
        == pynvml.c_nvmlGpuInstancePlacement_t._fields_
    )
