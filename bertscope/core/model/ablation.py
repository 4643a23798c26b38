"""Switching heads off, and reading attention weights only when they are wanted.

transformers 5 removed `head_mask`, and its default SDPA attention returns no weights.
bertscope loads every model with its own attention implementation, `bertscope`,
registered through the AttentionInterface: by default it is exactly SDPA; during a pass
that wants weights it computes eager attention; during a `uniform` ablation it mixes the
chosen heads' output towards uniform attention over the real tokens (Kovaleva et al.).

`zero` ablation (Michel et al., and what `head_mask` did) gates each head's slice of the
context with a forward pre-hook on the layer's `attention.output.dense`. Gates may be
float tensors that require grad: ∂L/∂gate is Michel's head importance.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from bertscope.core.model.masks import Ablation
from bertscope.core.model.norms import weighted_norms

ATTENTION_IMPLEMENTATION = "bertscope"


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
    on_norms: Callable[[int, Tensor], None] | None = None  # takes each layer's value-weighted norms (core.model.norms)
    projection_of: dict[int, nn.Module] | None = None  # id(self-attention module) -> its attention output projection


_current_pass: ContextVar[_PassState | None] = ContextVar("bertscope_pass", default=None)


def layer_gates(gates: Tensor, layer: int, kept: Sequence[Tensor | None] | None = None) -> Tensor:
    """The gates of one layer, shaped to broadcast over `[B, T, H, d]`.

    In a pruned model (`kept`), gates stay in the original head numbers and only the
    layer's remaining heads are taken, in the order they sit in its weights.
    """
    heads = gates[layer] if gates.dim() == 2 else gates[:, layer]
    if kept is not None and kept[layer] is not None:
        heads = heads.index_select(-1, kept[layer].to(heads.device))
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
    **kwargs,
) -> tuple[Tensor, Tensor | None]:
    """SDPA, or eager attention with weights, plus uniform ablation; same signature as both."""
    state = _current_pass.get()
    if state is None or not state.want_weights:
        output, weights = sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    else:
        output, weights = _eager_attention(module, query, key, value, attention_mask, scaling, dropout)
    if state is None:
        return output, weights
    if state.gates is not None:
        output, weights = _ablate(state, module, key, value, output, weights)
    if weights is not None:
        norms = None
        if state.on_norms is not None:  # from the same weights and values: no second pass
            norms = _in_original_heads(state, module, weighted_norms(weights, value, state.projection_of[id(module)]))
        weights = _in_original_heads(state, module, weights)
        _report(state, state.layer_of[id(module)], weights)
        if norms is not None:
            state.on_norms(state.layer_of[id(module)], norms)
    return output, weights


def _report(state: _PassState, layer: int, weights: Tensor) -> None:
    """Hand a layer's weights to the pass's consumer, or keep them for the caller."""
    if state.on_weights is not None:
        state.on_weights(layer, weights)  # consumed now: no pass keeps every layer's maps
    else:
        state.recorded[layer] = weights


def _in_original_heads(state: _PassState, module, weights: Tensor) -> Tensor:
    """A pruned layer's weights spread back over the original head numbers, pruned heads all zero."""
    if state.kept is None or state.kept[state.layer_of[id(module)]] is None:
        return weights
    kept = state.kept[state.layer_of[id(module)]]
    full = weights.new_zeros((weights.shape[0], module.bertscope_num_heads, *weights.shape[2:]))
    full[:, kept.to(weights.device)] = weights
    return full


def empty_attention(module: nn.Module, hidden_states: Tensor) -> tuple[Tensor, Tensor | None]:
    """The attention of a layer with every head pruned: no context; all-zero weights when a pass wants them."""
    batch, length, _ = hidden_states.shape
    output = hidden_states.new_zeros((batch, length, 0))
    state = _current_pass.get()
    if state is None or not state.want_weights:
        return output, None
    weights = hidden_states.new_zeros((batch, module.bertscope_num_heads, length, length))
    _report(state, state.layer_of[id(module)], weights)
    if state.on_norms is not None:
        state.on_norms(state.layer_of[id(module)], weights.float())
    return output, weights


def _ablate(state: _PassState, module, key, value, output, weights):
    """Apply this layer's gates: uniform mixes the output itself; zero only reports it (the hook gates)."""
    gates = layer_gates(state.gates, state.layer_of[id(module)], state.kept).to(output.dtype)  # [B|1, 1, H, 1]
    if state.ablation == "uniform":
        uniform = _uniform_weights(state.padding_mask, key)  # [B, K]
        uniform_output = torch.einsum("bk,bhkd->bhd", uniform.to(value.dtype), value).unsqueeze(1)
        output = gates * output + (1 - gates) * uniform_output
        if weights is not None:
            head_gates = gates.transpose(1, 2)  # [B|1, H, 1, 1]
            weights = head_gates * weights + (1 - head_gates) * uniform[:, None, None, :].to(weights.dtype)
    elif weights is not None:
        # zero: the output is gated by the pre-hook; report what the head contributes.
        weights = weights * gates.transpose(1, 2)
    return output, weights


def _eager_attention(module, query, key, value, attention_mask, scaling, dropout):
    """Attention with its weights; the mask is SDPA's boolean one (True = may attend) or None."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def _uniform_weights(padding_mask: Tensor | None, key: Tensor) -> Tensor:
    """`[B, K]`: 1/n on each of the n real (non-padding) tokens of every sequence."""
    batch, _, length, _ = key.shape
    if padding_mask is None:
        return torch.full((batch, length), 1.0 / length, device=key.device)
    real = padding_mask.to(device=key.device, dtype=torch.float32)
    return real / real.sum(dim=-1, keepdim=True)


AttentionInterface.register(ATTENTION_IMPLEMENTATION, bertscope_attention)
AttentionMaskInterface.register(ATTENTION_IMPLEMENTATION, sdpa_mask)


@contextlib.contextmanager
def attention_pass(
    layers: Sequence[tuple[nn.Module, nn.Linear]],
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

    `layers` holds each layer's (self-attention module, attention output projection).
    `gates` is `[L, H]` (one mask for the batch) or `[B, L, H]` (a mask per sequence).
    Yields a dict that collects each layer's attention weights when they are wanted (for
    callers that run layers one by one, without transformers' output capturing). Hooks and
    pass state are removed on leaving, also when the forward raises. `kept` is a pruned
    model's map from each layer's remaining heads to their original numbers (core.model.pruning).
    `on_weights(layer, weights)`, when given, receives each layer's weights as the pass
    computes them (it implies `want_weights`), and the dict stays empty: a corpus job then
    holds one layer's attention maps at a time, not all of them. `on_norms(layer, norms)`
    likewise receives each layer's value-weighted norms `[B, H, T, T]` (core.model.norms),
    computed from the same weights and values (it implies `want_weights`).
    """
    if gates is not None:
        expected = len(layers)
        if gates.dim() not in (2, 3) or gates.shape[-2] != expected:
            raise ValueError(f"gates must be [L, H] or [B, L, H] with L={expected}; got {tuple(gates.shape)}")
    state = _PassState(
        layer_of={id(attention): index for index, (attention, _) in enumerate(layers)},
        gates=gates,
        ablation=ablation,
        padding_mask=padding_mask,
        want_weights=want_weights or on_weights is not None or on_norms is not None,
        recorded={},
        kept=kept,
        on_weights=on_weights,
        on_norms=on_norms,
        projection_of={id(attention): projection for attention, projection in layers},
    )
    handles = []
    token = _current_pass.set(state)
    try:
        if gates is not None and ablation == "zero":
            for index, (_, output_projection) in enumerate(layers):
                handles.append(output_projection.register_forward_pre_hook(_zero_gate_hook(gates, index, kept)))
        yield state.recorded
    finally:
        for handle in handles:
            handle.remove()
        _current_pass.reset(token)


def _zero_gate_hook(gates: Tensor, layer: int, kept: Sequence[Tensor | None] | None):
    num_heads = gates.shape[-1] if kept is None or kept[layer] is None else len(kept[layer])

    def gate_heads(_module: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        context = args[0]  # [B, T, H * d], the heads' outputs side by side
        if num_heads == 0:
            return args  # every head of this layer is pruned: nothing to gate
        batch, length, width = context.shape
        per_head = context.view(batch, length, num_heads, width // num_heads)
        gated = per_head * layer_gates(gates, layer, kept).to(context.dtype)
        return (gated.view(batch, length, width), *args[1:])

    return gate_heads
