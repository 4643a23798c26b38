"""Switching heads off, and reading attention weights only when they are wanted.

transformers 5 removed `head_mask`, and its default SDPA attention returns no weights.
bertscope loads every model with its own attention implementation, `bertscope`,
registered through the AttentionInterface: by default it is exactly SDPA; during a pass
that wants weights it computes eager attention; during a `uniform` ablation it mixes the
chosen heads' output towards uniform attention over the real tokens (Kovaleva et al.).

`zero` ablation (Michel et al., and what `head_mask` did) gates each head's slice of the
context with a forward pre-hook on the layer's attention output projection. Gates may be
float tensors that require grad: ∂L/∂gate is Michel's head importance.

Families that compute attention in their own code (DeBERTa, MPNet; model.families)
run eager; a forward hook on the module applied to their attention weights alone (their
dropout) reads the weights and, for `uniform`, replaces them, so the context the model
computes from them is the ablated one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from bertscope.model.masks import Ablation
from bertscope.model.norms import weighted_norms

ATTENTION_IMPLEMENTATION = "bertscope"
# SDPA's kernels on a GPU, cuDNN's left out: cuDNN builds an execution plan for each new batch shape the
# first time it sees one, which over a corpus of varied lengths is seconds (benchmarks/README.md, issue 36).
GPU_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@dataclass(frozen=True)
class AttentionSite:
    """Where a layer's attention can be read and changed (model.families)."""

    attention: nn.Module  # the self-attention module (the one handed to the attention function)
    projection: nn.Linear  # reads the heads' outputs side by side: gated, and W_O of the value norms
    weights: nn.Module | None = None  # families with their own attention: the module applied to their weights alone
    values: nn.Linear | None = None  # ... and the projection giving their heads' values [B, T, H·d]


@dataclass
class _PassState:
    """What the current forward pass asks of the attention function (one per pass)."""

    layer_of: dict[int, int]  # id(self-attention module) -> layer index
    gates: Tensor | None  # [L, H] or [B, L, H]; 1 keeps a head, 0 removes it
    ablation: Ablation
    padding_mask: Tensor | None  # [B, T] bool, True for real tokens
    want_weights: bool
    recorded: dict[int, Tensor]  # layer -> the weights it reported (when layers are run one by one)
    kept: Sequence[Tensor | None] | None = None  # per layer, the original numbers of its heads (pruned models)
    on_weights: Callable[[int, Tensor], None] | None = None  # takes each layer's weights instead of `recorded`
    on_norms: Callable[[int, Tensor], None] | None = None  # takes each layer's value-weighted norms (model.norms)
    projection_of: dict[int, nn.Linear] = field(default_factory=dict)  # id(self-attention module) -> its attention output projection
    values: dict[int, Tensor] = field(default_factory=dict)  # families with their own attention: each layer's values [B, H, K, d]


_current_pass: ContextVar[_PassState | None] = ContextVar("bertscope_pass", default=None)


def layer_gates(gates: Tensor, layer: int, kept: Sequence[Tensor | None] | None = None) -> Tensor:
    """The gates of one layer, shaped to broadcast over `[B, T, H, d]`.

    In a pruned model (`kept`), gates stay in the original head numbers and only the
    layer's remaining heads are taken, in the order they sit in its weights.
    """
    heads = gates[layer] if gates.dim() == 2 else gates[:, layer]
    layer_kept = None if kept is None else kept[layer]
    if layer_kept is not None:
        heads = heads.index_select(-1, layer_kept.to(heads.device))
    if gates.dim() == 2:
        return heads.view(1, 1, -1, 1)
    return heads.reshape(gates.shape[0], 1, -1, 1)


def bertscope_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """SDPA, or eager attention with weights, plus uniform ablation; same signature as both."""
    state = _current_pass.get()
    if state is None or not state.want_weights:
        output, weights = sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    else:
        output, weights = _eager_attention(module, query, key, value, attention_mask, scaling, dropout)
    if state is None:
        return output, weights
    if state.gates is not None:
        output, weights = _ablate(state, module, key, value, output, weights, attention_mask)
    if weights is not None:
        if state.on_norms is not None:  # from the same weights and values: no second pass
            norms = _in_original_heads(state, module, weighted_norms(weights, value, state.projection_of[id(module)]))
        weights = _in_original_heads(state, module, weights)
        _report(state, state.layer_of[id(module)], weights)
        if state.on_norms is not None:
            state.on_norms(state.layer_of[id(module)], norms)
    return output, weights


def _report(state: _PassState, layer: int, weights: Tensor) -> None:
    """Hand a layer's weights to the pass's consumer, or keep them for the caller."""
    if state.on_weights is not None:
        state.on_weights(layer, weights)  # consumed now: no pass keeps every layer's maps
    else:
        state.recorded[layer] = weights


def _in_original_heads(state: _PassState, module: nn.Module, weights: Tensor) -> Tensor:
    """A pruned layer's weights spread back over the original head numbers, pruned heads all zero."""
    kept = None if state.kept is None else state.kept[state.layer_of[id(module)]]
    if kept is None:
        return weights
    full = weights.new_zeros((weights.shape[0], _original_heads(module), *weights.shape[2:]))
    full[:, kept.to(weights.device)] = weights
    return full


def empty_attention(module: nn.Module, hidden_states: Tensor) -> tuple[Tensor, Tensor | None]:
    """The attention of a layer with every head pruned: no context; all-zero weights when a pass wants them."""
    batch, length, _ = hidden_states.shape
    output = hidden_states.new_zeros((batch, length, 0))
    state = _current_pass.get()
    if state is None or not state.want_weights:
        return output, None
    weights = hidden_states.new_zeros((batch, _original_heads(module), length, length))
    _report(state, state.layer_of[id(module)], weights)
    if state.on_norms is not None:
        state.on_norms(state.layer_of[id(module)], weights.float())
    return output, weights


def _original_heads(module: nn.Module) -> int:
    """How many heads a pruned attention module had: the count `pruning.prune_layer` noted on it."""
    return cast(int, module.bertscope_num_heads)


def _ablate(
    state: _PassState,
    module: nn.Module,
    key: Tensor,
    value: Tensor,
    output: Tensor,
    weights: Tensor | None,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Apply this layer's gates: uniform mixes the output itself; zero only reports it (the hook gates)."""
    assert state.gates is not None  # called only under gates
    gates = layer_gates(state.gates, state.layer_of[id(module)], state.kept).to(output.dtype)  # [B|1, 1, H, 1]
    if state.ablation == "uniform":
        uniform = _uniform_weights(attention_mask, key.shape[-2], key.device)  # [B|1, Q|1, K]
        uniform_output = torch.einsum("bqk,bhkd->bqhd", uniform.to(value.dtype), value)
        output = gates * output + (1 - gates) * uniform_output
        if weights is not None:
            head_gates = gates.transpose(1, 2)  # [B|1, H, 1, 1]
            weights = head_gates * weights + (1 - head_gates) * uniform[:, None].to(weights.dtype)
    elif weights is not None:
        # zero: the output is gated by the pre-hook; report what the head contributes.
        weights = weights * gates.transpose(1, 2)
    return output, weights


def _eager_attention(
    module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None, scaling: float | None, dropout: float
) -> tuple[Tensor, Tensor]:
    """Attention with its weights; the mask is SDPA's boolean one (True = may attend) or None."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    # the scores are a new tensor: scaled and masked in place, not copied twice more (each copy the size of the weights)
    scores = torch.matmul(query, key.transpose(2, 3)).mul_(scaling)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores.masked_fill_(attention_mask.logical_not(), torch.finfo(scores.dtype).min)
        else:  # an additive mask, which may be of another dtype
            scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def _uniform_weights(attention_mask: Tensor | None, length: int, device: torch.device) -> Tensor:
    """`[B|1, Q|1, K]`: for each query, 1/n on each of the n tokens it may attend to: the real (not padding) tokens,
    and in a local layer (ModernBERT) those within its window. `attention_mask` is the pass's own: SDPA's boolean
    `[B, 1, Q, K]` (True = may attend), an additive float one, or None (every token)."""
    if attention_mask is None:
        return torch.full((1, 1, length), 1.0 / length, device=device)
    allowed = attention_mask[:, 0]
    if allowed.dtype != torch.bool:  # additive: 0 where allowed, the dtype's minimum where not
        allowed = allowed > torch.finfo(allowed.dtype).min / 2
    allowed = allowed.to(device=device, dtype=torch.float32)
    return allowed / allowed.sum(dim=-1, keepdim=True).clamp_min(1)


AttentionInterface.register(ATTENTION_IMPLEMENTATION, bertscope_attention)
AttentionMaskInterface.register(ATTENTION_IMPLEMENTATION, sdpa_mask)


@contextlib.contextmanager
def attention_pass(
    layers: Sequence[AttentionSite],
    *,
    gates: Tensor | None = None,
    ablation: Ablation = "zero",
    padding_mask: Tensor | None = None,
    want_weights: bool = False,
    kept: Sequence[Tensor | None] | None = None,
    on_weights: Callable[[int, Tensor], None] | None = None,
    on_norms: Callable[[int, Tensor], None] | None = None,
) -> Iterator[dict[int, Tensor]]:
    """Run the forward passes inside this block with these gates and this ablation.

    `layers` holds each layer's `AttentionSite`.
    `gates` is `[L, H]` (one mask for the batch) or `[B, L, H]` (a mask per sequence).
    Yields a dict that collects each layer's attention weights when they are wanted (for
    callers that run layers one by one, without transformers' output capturing). Hooks and
    pass state are removed on leaving, also when the forward raises. `kept` is a pruned
    model's map from each layer's remaining heads to their original numbers (model.pruning).
    `on_weights(layer, weights)`, when given, receives each layer's weights as the pass
    computes them (it implies `want_weights`), and the dict stays empty: a corpus job then
    holds one layer's attention maps at a time, not all of them. `on_norms(layer, norms)`
    likewise receives each layer's value-weighted norms `[B, H, T, T]` (model.norms),
    computed from the same weights and values (it implies `want_weights`).
    """
    if gates is not None:
        expected = len(layers)
        if gates.dim() not in (2, 3) or gates.shape[-2] != expected:
            raise ValueError(f"gates must be [L, H] or [B, L, H] with L={expected}; got {tuple(gates.shape)}")
    state = _PassState(
        layer_of={id(site.attention): index for index, site in enumerate(layers)},
        gates=gates,
        ablation=ablation,
        padding_mask=padding_mask,
        want_weights=want_weights or on_weights is not None or on_norms is not None,
        recorded={},
        kept=kept,
        on_weights=on_weights,
        on_norms=on_norms,
        projection_of={id(site.attention): site.projection for site in layers},
        values={},
    )
    handles = []
    token = _current_pass.set(state)
    on_gpu = bool(layers) and layers[0].projection.weight.device.type == "cuda"
    try:
        if gates is not None and ablation == "zero":
            for index, site in enumerate(layers):
                handles.append(site.projection.register_forward_pre_hook(_zero_gate_hook(gates, index, kept)))
        for index, site in enumerate(layers):
            if site.weights is not None and (state.want_weights or gates is not None):
                handles.append(site.weights.register_forward_hook(_own_attention_hook(state, index, site)))
                if state.on_norms is not None:
                    assert site.values is not None  # a family with its own attention names its value projection too
                    handles.append(site.values.register_forward_hook(_keep_values(state, index, site)))
        with sdpa_kernel(GPU_SDPA_BACKENDS) if on_gpu else contextlib.nullcontext():
            yield state.recorded
    finally:
        for handle in handles:
            handle.remove()
        _current_pass.reset(token)


def _keep_values(state: _PassState, layer: int, site: AttentionSite) -> Callable[[nn.Module, tuple[Any, ...], Tensor], None]:
    """Keep a layer's values `[B, H, K, d]` for its value-weighted norms (families with their own attention)."""

    def keep(_module: nn.Module, _args: tuple[Any, ...], output: Tensor) -> None:
        heads = site.projection.in_features // cast(int, site.attention.attention_head_size)  # the family's own attribute
        batch, length, _ = output.shape
        state.values[layer] = output.view(batch, length, heads, -1).transpose(1, 2)

    return keep


def _own_attention_hook(state: _PassState, layer: int, site: AttentionSite) -> Callable[[nn.Module, tuple[Any, ...], Tensor], Tensor]:
    """On the module that takes a layer's attention weights `[B, H, T, K]` alone: `uniform` replaces them for the
    masked heads (so the model's context is the ablated one); the weights, as a masked head contributes them,
    are reported, with their value-weighted norms when asked."""

    def on_weights(_module: nn.Module, _args: tuple[Any, ...], weights: Tensor) -> Tensor:
        used = reported = weights
        if state.gates is not None:
            head_gates = layer_gates(state.gates, layer, state.kept).to(weights.dtype).transpose(1, 2)  # [B|1, H, 1, 1]
            if state.ablation == "uniform":
                padding = None if state.padding_mask is None else state.padding_mask[:, None, None, :]  # [B, 1, 1, K]
                uniform = _uniform_weights(padding, weights.shape[-1], weights.device)
                used = reported = head_gates * weights + (1 - head_gates) * uniform[:, None].to(weights.dtype)
            else:
                reported = weights * head_gates  # the pre-hook on the projection gates the context
        if state.want_weights:
            if state.on_norms is not None:
                norms = _in_original_heads(state, site.attention, weighted_norms(reported, state.values.pop(layer), site.projection))
            reported = _in_original_heads(state, site.attention, reported)
            _report(state, layer, reported)
            if state.on_norms is not None:
                state.on_norms(layer, norms)
        return used

    return on_weights


def _zero_gate_hook(
    gates: Tensor, layer: int, kept: Sequence[Tensor | None] | None
) -> Callable[[nn.Module, tuple[Tensor, ...]], tuple[Tensor, ...]]:
    layer_kept = None if kept is None else kept[layer]
    num_heads = gates.shape[-1] if layer_kept is None else len(layer_kept)

    def gate_heads(_module: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        context = args[0]  # [B, T, H * d], the heads' outputs side by side
        if num_heads == 0:
            return args  # every head of this layer is pruned: nothing to gate
        batch, length, width = context.shape
        per_head = context.view(batch, length, num_heads, width // num_heads)
        gated = per_head * layer_gates(gates, layer, kept).to(context.dtype)
        return (gated.view(batch, length, width), *args[1:])

    return gate_heads
