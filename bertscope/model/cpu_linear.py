"""Linear layers through oneDNN on the CPU, where no gradient is wanted.

torch's fp32 `F.linear` on the CPU calls the BLAS it was built with: MKL on x86, which
takes slower code paths on AMD processors. oneDNN (torch's other CPU kernel library) does
not: on this project's 2-core AMD EPYC machines MiniLM's forward over 4,000 sentences in
batches runs 1.9 times faster through it, one sentence 1.2-1.6 times, with hidden states
within 1e-5 (benchmarks/probe_layers.py, forward_latency.py).
torch's own matmul only sends fp32 products to oneDNN when allowed to round them to
bfloat16, so `product` calls the operator torch's compiler uses directly.

Which one is faster depends on the processor (on Intel, MKL may win), so the choice is a
measurement: `choose` times both on the model's largest layer shape when a model is first loaded
on a machine (`bertscope.load`, every command, the explorer), keeps oneDNN only where it is
faster, and remembers the answer in bertscope's cache directory (`cpu-linear.json`, per
processor, torch, thread count and layer shape): timing it at every start cost 0.2 s, and the
same machine then always takes the same kernels (a result's numerics say which).
`BERTSCOPE_CPU_LINEAR=blas` or `=onednn` decides without measuring. Where a gradient is
wanted (attribution, head importance), on other devices and dtypes, or where torch lacks
the operator, everything goes through `F.linear` as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertscope.data.cache import CHOICES_FILE, default_cache_dir
from bertscope.data.files import publish, temporary_beside

MODES = ("auto", "onednn", "blas")
FASTER_BY = 1.1  # oneDNN is kept only when at least this many times as fast: a tie is not worth a private operator

_available: bool = torch.backends.mkldnn.is_available()

# oneDNN keeps up to 1,024 primitives, one per input shape, and a corpus job's batches come in ever new shapes,
# so its memory would grow with the corpus; 64 still hold every shape of a pass.
PRIMITIVE_CACHE = "64"
# Above oneDNN, torch's bridge to it (ideep) keeps a cache of its own: per thread, up to LRU_CACHE_CAPACITY
# (default 1,024) linear computations, one per input and weight shape, each holding memory of the size of its
# weights (pytorch/pytorch#27971); one is as fast. Measured: benchmarks/README.md.
IDEEP_CACHE = "1"


def bound_primitive_cache() -> None:
    """Keep oneDNN's and ideep's per-shape caches small (process-wide: called where a model is loaded for use,
    `bertscope.load`).

    Both libraries read their setting when they first compute, so this must run before any
    pass; the user's own ONEDNN_PRIMITIVE_CACHE_CAPACITY and LRU_CACHE_CAPACITY win.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", PRIMITIVE_CACHE)
    os.environ.setdefault("LRU_CACHE_CAPACITY", IDEEP_CACHE)


def onednn_enabled() -> bool:
    """Whether CPU products go through oneDNN (false once the operator failed)."""
    return _available


def product(a: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`a @ weight.T (+ bias)`, through oneDNN for fp32 CPU tensors outside autograd."""
    global _available
    fp32_cpu = a.device.type == "cpu" and a.dtype == torch.float32 and weight.dtype == torch.float32
    # An empty product (a layer whose heads are all pruned: a weight of width 0) is refused by oneDNN; it is not a
    # reason to leave oneDNN for good, only to compute this one plainly.
    empty = a.numel() == 0 or weight.numel() == 0
    if _available and fp32_cpu and not empty and not _needs_grad(a, weight, bias):
        try:
            return cast(Tensor, torch.ops.mkldnn._linear_pointwise(a, weight, bias, "none", [], ""))
        except (AttributeError, RuntimeError):  # a torch without the operator, or one that refuses these inputs
            _available = False
    return F.linear(a, weight, bias)


def _needs_grad(*tensors: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(tensor is not None and tensor.requires_grad for tensor in tensors)


class OneDNNLinear(nn.Linear):
    """An `nn.Linear` whose forward is `product`: same parameters, hooks and state dict."""

    def forward(self, input: Tensor) -> Tensor:
        return product(input, self.weight, self.bias)


def choose(model: nn.Module, mode: str | None = None) -> str:
    """Put the model's linear layers on the faster CPU path; returns the one chosen, `onednn` or `blas`.

    `mode` (default: `$BERTSCOPE_CPU_LINEAR`, else `auto`) is `auto` (time both on the
    model's largest linear layer, about 0.1 s), `onednn` or `blas`.
    """
    mode = mode or os.environ.get("BERTSCOPE_CPU_LINEAR", "auto")
    if mode not in MODES:
        mode = "auto"
    linears = [module for module in model.modules() if type(module) is nn.Linear]
    if mode == "blas" or not _available or not linears:
        return "blas"
    if mode == "auto":
        largest = max(linears, key=lambda module: module.weight.numel())
        if largest.weight.device.type != "cpu" or largest.weight.dtype != torch.float32:
            return "blas"
        key = _measured_on(largest.weight)
        choices = _remembered()
        if key not in choices:
            blas, onednn = _seconds(largest.weight, F.linear), _seconds(largest.weight, product)
            choices[key] = "onednn" if blas > onednn * FASTER_BY else "blas"
            _remember(choices)
        if choices[key] != "onednn":
            return "blas"
    return "onednn" if use_onednn(model) else "blas"


def _measured_on(weight: Tensor) -> str:
    """What a timing depends on: the processor, torch, its threads, the layer's shape."""
    processor = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as lines:
        processor = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), processor)
    return f"{processor} | torch {torch.__version__} | {torch.get_num_threads()} threads | {tuple(weight.shape)}"


def _choices_path() -> Path:
    return default_cache_dir() / CHOICES_FILE


def _remembered() -> dict[str, str]:
    """The choices measured on this machine before; none when the file is missing or unreadable."""
    try:
        found = json.loads(_choices_path().read_text())
    except (OSError, ValueError):
        return {}
    return {key: value for key, value in found.items() if value in ("onednn", "blas")} if isinstance(found, dict) else {}


def _remember(choices: dict[str, str]) -> None:
    """Write the choices whole (a temporary file moved over the old one); where the cache cannot be written, the next
    start measures again."""
    path = _choices_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = temporary_beside(path)
        temporary.write_text(json.dumps(choices, indent=1, sort_keys=True))
        publish(temporary, path)
    except OSError:
        pass


def _seconds(weight: Tensor, linear: Callable[[Tensor, Tensor], Tensor], rows: int = 1024, repeats: int = 3) -> float:
    """Best wall-clock time of `linear` over a `[rows, in]` batch (after one warm-up)."""
    batch = torch.randn(rows, weight.shape[1], dtype=weight.dtype)
    best = float("inf")
    with torch.inference_mode():
        linear(batch, weight)
        for _ in range(repeats):
            started = time.perf_counter()
            linear(batch, weight)
            best = min(best, time.perf_counter() - started)
    return best


def use_onednn(model: nn.Module) -> int:
    """Make the model's plain `nn.Linear` layers `OneDNNLinear` in place; returns how many.

    Subclasses of `nn.Linear` (quantised or otherwise special layers) are left alone.
    """
    if not _available:
        return 0
    changed = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = OneDNNLinear
            changed += 1
    return changed
