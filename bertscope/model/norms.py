"""Value-weighted attention norms (Kobayashi et al. 2020, "Attention is Not Only a Weight").

A head adds Σ_j α_ij f_h(x_j) to token i, with f_h(x) = (x W_V^h + b_V^h) W_O^h: the
value of token j (with its bias) through the head's slice of the attention output
projection. The weight α_ij says where the head looks; the norm ‖α_ij f_h(x_j)‖ says how
much it moves. As in the paper, the bias of W_O is left out: it is added once per layer,
not per token j, so it belongs to no pair.

Since α_ij ≥ 0, ‖α_ij f_h(x_j)‖ = α_ij ‖f_h(x_j)‖, and with W_O^h = Q_h R_h (the head's
slice of the output projection, D × d, factored once per weights: Q_h's columns are
orthonormal), ‖f_h(x_j)‖ = ‖v_j R_hᵀ‖: the norms cost a d × d product per token and head,
not a projection to the hidden size. Computed inside the attention function, in the same
forward pass as the weights (model.ablation). Outputs name this definition with
`results.NORM_DEFINITION`.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn


def value_norms(value: Tensor, output_projection: nn.Linear) -> Tensor:
    """`[B, H, K]`: ‖f_h(x_k)‖ for each key token, from the heads' values `[B, H, K, d]` (bias of W_V included)."""
    factors = _head_factors(output_projection, value.shape[1], value.shape[-1])
    with torch.no_grad():  # no gradient flows through a norm (as detach(), with no operation of its own)
        return cast(Tensor, torch.linalg.vector_norm(torch.matmul(_float32(value), factors), dim=-1))


def _head_factors(output_projection: nn.Linear, heads: int, size: int) -> Tensor:
    """`[H, d, d]`: R_hᵀ of each head's W_O^h = Q_h R_h, kept on the projection while its weights stay the same (one
    factoring, not some operations a layer on every pass: on a GPU each is a launch)."""
    weight = output_projection.weight
    key = (weight.data_ptr(), weight._version, heads, size)
    kept = getattr(output_projection, "_bertscope_head_factors", None)
    if kept is not None and kept[0] == key:
        return cast(Tensor, kept[1])
    per_head = weight.detach().float().view(weight.shape[0], heads, size).transpose(0, 1)  # [H, D, d]: the heads side by side
    with torch.inference_mode(False), torch.no_grad():  # a plain tensor, usable in and out of inference mode
        factors: Tensor = torch.linalg.qr(per_head.clone(), mode="r").R.transpose(1, 2).contiguous()
    output_projection._bertscope_head_factors = (key, factors)  # type: ignore[assignment]  # not a parameter: no state
    return factors


def weighted_norms(weights: Tensor, value: Tensor, output_projection: nn.Linear) -> Tensor:
    """`[B, H, T, K]`: ‖α_ij f_h(x_j)‖ from the weights `[B, H, T, K]` (after any ablation) and the values."""
    with torch.no_grad():
        return _float32(weights) * value_norms(value, output_projection).unsqueeze(2)


def _float32(tensor: Tensor) -> Tensor:
    """The tensor in float32: itself when it is (`.float()` would still be an operation of the pass to dispatch)."""
    return tensor if tensor.dtype == torch.float32 else tensor.float()
