"""Linear layers through oneDNN on the CPU (model.cpu_linear): same numbers, same gradients."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bertscope
from bertscope.model import cpu_linear

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch was built without oneDNN")


@needs_onednn
def test_a_session_told_to_use_onednn_runs_its_linear_layers_through_it(tiny_bert_dir, monkeypatch):
    session = bertscope.load(str(tiny_bert_dir), device="cpu", cpu_linear="onednn")
    assert session.linear_path == "onednn"
    linears = [module for module in session.model.modules() if isinstance(module, nn.Linear)]
    assert linears and all(type(module) is cpu_linear.OneDNNLinear for module in linears)
    assert session.random_copy().linear_path == "onednn"  # a probing baseline runs on the same kernels
    fast = session.forward("The keys to the cabinet are on the table.", attentions=True)
    monkeypatch.setattr(cpu_linear, "_available", False)
    blas = session.forward("The keys to the cabinet are on the table.", attentions=True)
    assert abs(fast.hidden_states - blas.hidden_states).max() < 1e-5
    assert abs(fast.attentions - blas.attentions).max() < 1e-5


@needs_onednn
def test_the_state_dict_and_hooks_are_those_of_nn_linear():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    keys = list(model.state_dict())
    assert cpu_linear.use_onednn(model) == 2
    assert list(model.state_dict()) == keys
    seen = []
    model[2].register_forward_pre_hook(lambda module, args: seen.append(args[0].shape))
    x = torch.randn(3, 5, 8)
    with torch.inference_mode():
        out = model(x)
    assert seen == [torch.Size([3, 5, 16])]
    reference = F.linear(F.linear(x, model[0].weight, model[0].bias).relu(), model[2].weight, model[2].bias)
    assert torch.allclose(out, reference, atol=1e-5)


def test_special_linear_subclasses_are_left_alone():
    class Special(nn.Linear):
        pass

    model = nn.Sequential(Special(4, 4))
    cpu_linear.use_onednn(model)
    assert type(model[0]) is Special


@needs_onednn
def test_gradients_flow_as_through_f_linear():
    """Attribution and head importance differentiate through the model: those passes keep the BLAS."""
    torch.manual_seed(0)
    layer = nn.Linear(6, 3)
    cpu_linear.use_onednn(layer)
    x = torch.randn(4, 6, requires_grad=True)
    layer(x).square().sum().backward()
    expected_x = x.grad.clone()
    x.grad = None
    F.linear(x, layer.weight, layer.bias).square().sum().backward()
    assert torch.allclose(x.grad, expected_x)


@needs_onednn
def test_an_operator_that_fails_falls_back_for_good(monkeypatch):
    def refuse(*args):
        raise RuntimeError("no kernel for these inputs")

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", refuse)
    monkeypatch.setattr(cpu_linear, "_available", True)
    a, weight, bias = torch.randn(5, 4), torch.randn(3, 4), torch.randn(3)
    assert torch.allclose(cpu_linear.product(a, weight, bias), a @ weight.T + bias)
    assert not cpu_linear.onednn_enabled()


def test_blas_keeps_torch_default_and_auto_chooses_by_timing(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTSCOPE_CACHE_DIR", str(tmp_path))  # nothing measured before
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
    assert cpu_linear.choose(model, "blas") == "blas"
    assert all(type(module) is nn.Linear for module in model)
    if not cpu_linear.onednn_enabled():
        return
    timings = {F.linear: 1.0, cpu_linear.product: 0.5}  # oneDNN twice as fast: taken
    monkeypatch.setattr(cpu_linear, "_seconds", lambda weight, linear: timings[linear])
    assert cpu_linear.choose(model, "auto") == "onednn" and type(model[0]) is cpu_linear.OneDNNLinear
    other = nn.Sequential(nn.Linear(64, 128))
    timings[cpu_linear.product] = 0.95  # within the margin: torch's default stays
    assert cpu_linear.choose(other, "auto") == "blas" and type(other[0]) is nn.Linear
    monkeypatch.setenv("BERTSCOPE_CPU_LINEAR", "onednn")
    assert cpu_linear.choose(other) == "onednn"


def test_the_choice_is_measured_once_per_machine_and_layer_shape(monkeypatch, tmp_path):
    """A start after the first takes the kernels measured then (no 0.2 s of timing, and the same numerics); another
    layer shape is measured on its own; an unreadable record is measured again and rewritten."""
    if not cpu_linear.onednn_enabled():
        pytest.skip("this torch has no oneDNN")
    monkeypatch.setenv("BERTSCOPE_CACHE_DIR", str(tmp_path))
    timed = []
    monkeypatch.setattr(
        cpu_linear, "_seconds", lambda weight, linear: timed.append(linear) or (0.5 if linear is cpu_linear.product else 1.0)
    )
    assert cpu_linear.choose(nn.Sequential(nn.Linear(32, 96)), "auto") == "onednn" and len(timed) == 2
    record = json.loads((tmp_path / "cpu-linear.json").read_text())
    assert list(record.values()) == ["onednn"] and "(96, 32)" in next(iter(record)) and "torch" in next(iter(record))
    again = nn.Sequential(nn.Linear(32, 96))
    assert cpu_linear.choose(again, "auto") == "onednn" and len(timed) == 2  # remembered: not timed again
    assert type(again[0]) is cpu_linear.OneDNNLinear
    assert cpu_linear.choose(nn.Sequential(nn.Linear(32, 48)), "auto") == "onednn" and len(timed) == 4
    assert len(json.loads((tmp_path / "cpu-linear.json").read_text())) == 2
    (tmp_path / "cpu-linear.json").write_text("{not json")
    assert cpu_linear.choose(nn.Sequential(nn.Linear(32, 96)), "auto") == "onednn" and len(timed) == 6
    assert len(json.loads((tmp_path / "cpu-linear.json").read_text())) == 1
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary left beside it


def test_a_cache_that_cannot_be_written_still_chooses(monkeypatch, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("BERTSCOPE_CACHE_DIR", str(blocked))
    monkeypatch.setattr(cpu_linear, "_seconds", lambda weight, linear: 1.0)  # a tie: torch's default
    assert cpu_linear.choose(nn.Sequential(nn.Linear(32, 96)), "auto") == "blas"
    assert blocked.read_text() == "not a directory"


# Products over 100 new input shapes after 100 others, in a fresh process (the caches read their
# capacity once): malloc's bytes in use, grown. A 512×512 layer's cached computation holds about
# half a MB, so 100 kept shapes are tens of MB; bounded caches are full after the first 100 and keep nothing more.
SHAPES_SCRIPT = r"""
import ctypes, sys, torch
from torch import nn
import bertscope
from bertscope.model import cpu_linear

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = Info
session = bertscope.load(sys.argv[1], device="cpu", cpu_linear="onednn")
layer = nn.Linear(512, 512)
with torch.inference_mode():
    for rows in range(1, 101):
        cpu_linear.product(torch.randn(rows, 512), layer.weight, layer.bias)
    before = mallinfo2().uordblks
    for rows in range(101, 201):
        cpu_linear.product(torch.randn(rows, 512), layer.weight, layer.bias)
    print(mallinfo2().uordblks - before)
"""


def _growth_over_new_shapes(model_dir, **environment) -> int:
    env = {key: value for key, value in os.environ.items() if key not in ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")}
    done = subprocess.run(
        [sys.executable, "-c", SHAPES_SCRIPT, str(model_dir)],
        capture_output=True,
        text=True,
        env={**env, "OMP_NUM_THREADS": "1", **environment},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.strip().splitlines()[-1])


@needs_onednn
@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="needs glibc's mallinfo2")
def test_new_input_shapes_do_not_grow_memory_after_load(tiny_bert_dir):
    """A corpus job's batches come in ever new shapes; torch's oneDNN bridge kept one computation per shape (issue 15)."""
    assert _growth_over_new_shapes(tiny_bert_dir) < 2 << 20
    # the user's own setting wins, and with ideep's default of 1,024 the same loop keeps tens of MB
    assert _growth_over_new_shapes(tiny_bert_dir, LRU_CACHE_CAPACITY="1024") > 10 << 20


def test_bounding_the_caches_keeps_the_users_settings(monkeypatch):
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "8")
    cpu_linear.bound_primitive_cache()
    assert os.environ["LRU_CACHE_CAPACITY"] == cpu_linear.IDEEP_CACHE
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "8"


@needs_onednn
def test_a_layer_with_every_head_pruned_leaves_onednn_on(monkeypatch):
    """A weight of width 0 (a layer that lost every head) is computed plainly, and oneDNN stays on for the rest."""
    monkeypatch.setattr(cpu_linear, "_available", True)
    rows, empty_weight = torch.randn(3, 0), torch.randn(4, 0)
    assert torch.equal(cpu_linear.product(rows, empty_weight), torch.zeros(3, 4))
    assert cpu_linear.onednn_enabled()
