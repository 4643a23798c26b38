"""Value-weighted attention norms (Kobayashi et al. 2020, "Attention is Not Only a Weight").

A head adds Σ_j α_ij f_h(x_j) to token i, with f_h(x) = (x W_V^h + b_V^h) W_O^h: the
value of token j (with its bias) through the head's slice of the attention output
projection. The weight α_ij says where the head looks; the norm ‖α_ij f_h(x_j)‖ says how
much it moves. As in the paper, the bias of W_O is left out: it is added once per layer,
not per token j, so it belongs to no pair.

Since α_ij ≥ 0, ‖α_ij f_h(x_j)‖ = α_ij ‖f_h(x_j)‖, and ‖f_h(x_j)‖² = v_j G_h v_jᵀ with the
head's Gram matrix G_h = W_O^h W_O^hᵀ (d × d): the norms cost a d × d product per token
and head, not a projection to the hidden size. Computed inside the attention function,
in the same forward pass as the weights (core.model.ablation). Outputs name this definition
with `results.NORM_DEFINITION`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def value_norms(value: Tensor, output_projection: nn.Linear) -> Tensor:
    """`[B, H, K]`: ‖f_h(x_k)‖ for each key token, from the heads' values `[B, H, K, d]` (bias of W_V included)."""
    batch, heads, keys, size = value.shape
    weight = output_projection.weight.detach().float()  # [D, H * d]: the output projection reads the heads side by side
    per_head = weight.view(weight.shape[0], heads, size)  # [D, H, d]
    gram = torch.einsum("ohd,ohe->hde", per_head, per_head)  # [H, d, d]
    value = value.detach().float()
    squared = (torch.matmul(value, gram[None]) * value).sum(-1)
    return squared.clamp(min=0).sqrt()


def weighted_norms(weights: Tensor, value: Tensor, output_projection: nn.Linear) -> Tensor:
    """`[B, H, T, K]`: ‖α_ij f_h(x_j)‖ from the weights `[B, H, T, K]` (after any ablation) and the values."""
    return weights.detach().float() * value_norms(value, output_projection)[:, :, None, :]
