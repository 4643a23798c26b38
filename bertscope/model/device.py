"""Choosing where the model runs and in which precision."""

from __future__ import annotations

import numpy as np
import torch

from bertscope.base.errors import InputError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(name: str = "auto") -> torch.device:
    """`auto` takes cuda, then mps, then cpu; an explicit device must be present."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise InputError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {name!r} asked for, but torch sees no CUDA GPU here; use cpu or auto", setting="device")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise InputError(f"device {name!r} does not exist: torch sees {torch.cuda.device_count()} CUDA GPU(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"device {name!r} asked for, but MPS is not available here; use cpu or auto", setting="device")
    if device.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"unsupported device {name!r}; use auto, cpu, cuda, cuda:N or mps")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """float32 everywhere; the half precisions only on a GPU, where they pay off."""
    if name not in DTYPES:
        raise InputError(f"unknown dtype {name!r}; use one of: {', '.join(DTYPES)}")
    if name != "float32" and device.type == "cpu":
        raise InputError(f"dtype {name} is for GPUs; on the CPU use float32", setting="dtype")
    return DTYPES[name]


def float64_device(device: torch.device | str) -> torch.device:
    """Where float64 arithmetic on a model's outputs runs: on the model's device, so that a GPU's outputs are not copied
    to the host first, except MPS, which has no float64 (there: the CPU)."""
    device = torch.device(device)
    return torch.device("cpu") if device.type == "mps" else device


def upload(values: torch.Tensor | np.ndarray, device: torch.device | str) -> torch.Tensor:
    """Host values (a batch's ids, masks, indices) on `device`, without the host waiting for the device.

    A copy to a GPU from pageable memory waits for every kernel queued before it (torch synchronises the stream), so
    the host cannot prepare a batch while the GPU still runs the last one; a copy from pinned memory is queued like a
    kernel. torch keeps the pinned block until the copy is done. Elsewhere a plain copy.
    """
    tensor = torch.as_tensor(values)
    if torch.device(device).type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
