"""Physically pruned models: attention heads removed from the weights, not just masked.

transformers 5 dropped `prune_heads`, and its attention modules assume `num_heads × head_dim`
outputs only through the weights' shapes (`view(..., -1, head_dim)`), so a layer keeps
working when its query/key/value projections are sliced to the kept heads and its output
projection to the matching input columns. A layer with no head left gets an attention
forward that returns an empty context: the output projection then adds only its bias to
the residual, exactly what masking all of the layer's heads with `zero` ablation gives.

Pruned heads are listed in the config's `pruned_heads` (`{"layer": [heads]}`, the field
transformers 4.x read on loading), in the original head numbers. bertscope keeps speaking
of the original numbers everywhere: a pruned model still has `num_attention_heads` heads
per layer as far as masks, heatmaps and JSON are concerned; its pruned heads report
all-zero attention (as a `zero`-masked head does), and masking them changes nothing.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from torch import Tensor, nn

from bertscope.base.errors import ModelLoadError

if TYPE_CHECKING:  # only in annotations
    from transformers import PreTrainedConfig, PreTrainedModel

    from bertscope.model.families import Family

M = TypeVar("M", bound="PreTrainedModel")

PRUNING_FILE = "bertscope-pruning.json"


def pruned_heads_of(config: PreTrainedConfig) -> dict[int, list[int]]:
    """`config.pruned_heads` with integer keys, sorted; {} for an unpruned model."""
    raw = getattr(config, "pruned_heads", None) or {}
    if not isinstance(raw, Mapping):
        raise ModelLoadError("the config's pruned_heads is not a mapping of layer to heads; save the model again")
    heads = config.num_attention_heads
    result: dict[int, list[int]] = {}
    for layer, removed in raw.items():
        try:
            layer_index = int(layer)
            removed = sorted({int(head) for head in removed})
        except (TypeError, ValueError):
            raise ModelLoadError(f"pruned_heads entry {layer!r}: {removed!r} is not a layer and a list of heads") from None
        if not 0 <= layer_index < config.num_hidden_layers or any(not 0 <= h < heads for h in removed):
            raise ModelLoadError(f"pruned_heads entry {layer!r}: {removed!r} is outside the model's layers or heads")
        if removed:
            result[layer_index] = removed
    return dict(sorted(result.items()))


def kept_heads(config: PreTrainedConfig) -> list[Tensor | None] | None:
    """Per layer, the original numbers of its kept heads (None: the layer is whole); None if nothing is pruned."""
    pruned = pruned_heads_of(config)
    if not pruned:
        return None
    heads = config.num_attention_heads
    return [
        torch.tensor([h for h in range(heads) if h not in pruned[layer]], dtype=torch.long) if layer in pruned else None
        for layer in range(config.num_hidden_layers)
    ]


def prune_layer(
    self_attention: Any,  # a transformers attention module: its head counts are set by name
    output_projection: nn.Linear,
    remove: Sequence[int],
    num_heads: int,
    projections: Sequence[str] = ("query", "key", "value"),
    projects_itself: bool = False,
) -> nn.Linear:
    """Remove heads `remove` (original numbers) from one layer in place; returns the new output projection.

    The caller puts the returned projection back where the old one was (its parent module).
    Heads already missing from the layer (`self_attention.bertscope_kept`) are skipped.
    `projects_itself`: the attention module applies its output projection itself (DistilBERT),
    so a layer left with no head must still add that projection's bias.
    """
    present = list(getattr(self_attention, "bertscope_kept", range(num_heads)))
    head_dim = output_projection.in_features // len(present) if present else 0
    keep = [head for head in present if head not in set(remove)]
    positions = [present.index(head) for head in keep]
    rows = torch.cat([torch.arange(p * head_dim, (p + 1) * head_dim) for p in positions]) if positions else torch.zeros(0, dtype=torch.long)
    for name in projections:
        setattr(self_attention, name, _slice_linear(getattr(self_attention, name), rows, dim=0))
    new_output = _slice_linear(output_projection, rows, dim=1)
    self_attention.num_attention_heads = len(keep)
    self_attention.all_head_size = len(keep) * head_dim
    self_attention.bertscope_kept = tuple(keep)
    self_attention.bertscope_num_heads = num_heads
    if not keep:
        forward = _no_heads_projected_forward if projects_itself else _no_heads_forward
        self_attention.forward = types.MethodType(forward, self_attention)
        self_attention.__dict__["bertscope_output"] = new_output  # not a second submodule: the same projection
    return new_output


def _slice_linear(linear: nn.Linear, index: Tensor, dim: int) -> nn.Linear:
    """A copy of `linear` keeping output rows (dim 0) or input columns (dim 1) `index`."""
    weight = linear.weight.index_select(dim, index.to(linear.weight.device)).detach().clone()
    bias: Tensor | None = linear.bias
    if bias is not None and dim == 0:
        bias = bias.index_select(0, index.to(bias.device))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Initializing zero-element tensors")  # a layer with no head left
        new = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype)
    new.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias.detach().clone(), requires_grad=linear.bias.requires_grad)
    return new


def _no_heads_forward(
    self: nn.Module, hidden_states: Tensor, attention_mask: Tensor | None = None, *args: Any, **kwargs: Any
) -> tuple[Tensor, Tensor | None]:
    """Attention of a layer whose heads are all pruned: an empty context, zero weights when asked."""
    from bertscope.model.ablation import empty_attention

    return empty_attention(self, hidden_states)


def _no_heads_projected_forward(
    self: Any,  # the attention module, its output projection kept by `prune_layer` as `bertscope_output`
    hidden_states: Tensor,
    attention_mask: Tensor | None = None,
    *args: Any,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """The same, for an attention module that applies its output projection itself: the projection's bias."""
    context, weights = _no_heads_forward(self, hidden_states)
    return self.bertscope_output(context), weights


def apply_pruning(model: PreTrainedModel, family: Family, pruned: Mapping[int, Sequence[int]]) -> None:
    """Remove `pruned` heads (original numbers) from `model` in place."""
    num_heads = model.config.num_attention_heads
    for layer_index, layer in enumerate(family.layers(model)):
        remove = pruned.get(layer_index)
        if not remove:
            continue
        attention = family.self_attention(layer)
        family.set_attention_output(
            layer,
            prune_layer(
                attention, family.attention_output(layer), remove, num_heads, family.head_projections(layer), family.projects_in_attention
            ),
        )


def zero_heads(model: PreTrainedModel, family: Family, heads: Mapping[int, Sequence[int]]) -> None:
    """Zero `heads`' input columns of each layer's attention output projection, in place.

    A head's whole contribution to the layer passes through those columns, so this removes
    it exactly (what `zero` ablation does) while every shape stays as the config says: any
    transformers loads the result, with no `pruned_heads` to honour.
    """
    for layer_index, layer in enumerate(family.layers(model)):
        weight = family.attention_output(layer).weight
        head_dim = weight.shape[1] // model.config.num_attention_heads
        with torch.no_grad():
            for head in heads.get(layer_index, ()):
                weight[:, head * head_dim : (head + 1) * head_dim] = 0.0


def pruned_class(model_class: type[M], family: Family) -> type[M]:
    """A subclass of `model_class` whose constructor removes the heads its config lists as pruned.

    from_pretrained builds the model with the constructor before it reads the weights, so the
    sliced shapes meet the pruned checkpoint's tensors; everything else (key prefixes,
    dtype, safetensors, shards) stays transformers' own loading.
    """

    def __init__(self: PreTrainedModel, config: PreTrainedConfig, *args: Any, **kwargs: Any) -> None:
        model_class.__init__(self, config, *args, **kwargs)
        apply_pruning(self, family, pruned_heads_of(config))

    pruned = type(model_class.__name__, (model_class,), {"__init__": __init__, "__module__": model_class.__module__})
    return cast(type[M], pruned)  # a subclass of model_class, made at run time where mypy cannot follow it
