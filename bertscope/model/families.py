"""Family adapters: where each supported encoder family keeps its modules, and how to run its layers.

Every analysis reads a model through these few questions: its layers, each layer's
attention module and the projection that reads the heads' outputs side by side (where heads
are gated), the feed-forward output projection, how to run layers one by one, and its MLM
and classifier heads. BERT, RoBERTa (XLM-R, CamemBERT) and ELECTRA share one layout in
transformers 5; DistilBERT, ALBERT, DeBERTa-v2/v3, ModernBERT and MPNet each differ in
some of these answers (their transformers modeling files, 5.24).

Two ways of computing attention: families whose attention goes through transformers'
AttentionInterface run with bertscope's own implementation (model.ablation); DeBERTa
and MPNet compute attention in their own code, so they run eager and bertscope reads and
replaces their attention weights at the dropout applied to them (`weights_module`).

This module imports no torch at load time: the model files are judged before torch loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

if TYPE_CHECKING:  # only in annotations
    from torch import Tensor, nn

from bertscope.base.errors import InputError, ModelLoadError

# A transformers model, and one of its encoder layers. The families read their submodules by the names in
# transformers' modeling code (`layer.attention.self`), which nn.Module's typing cannot follow (to it, a submodule
# read by name is `Tensor | Module`): so they are Any, named for what they hold, and what the families return of them is
# cast to what transformers' code puts there.
Model: TypeAlias = Any
Layer: TypeAlias = Any


@dataclass(frozen=True)
class Family:
    """The BERT layout; other families override what differs."""

    name: str
    model_types: frozenset[str]
    # Positions the model reserves before the first token (RoBERTa and MPNet offset by padding_idx + 1).
    reserved_positions: int = 0
    token_types: bool = True  # the model reads token_type_ids (segment embeddings)
    # "interface": attention through transformers' AttentionInterface, run as bertscope's implementation;
    # "own": the family's own attention code, run eager, its weights read at `weights_module`.
    attention: str = "interface"
    # Heads can be sliced out of the weights (model.pruning); else `--weights zeroed` only.
    physical_pruning: bool = True
    projects_in_attention: bool = False  # `self_attention` applies `attention_output` itself (DistilBERT)
    # The head classes (name endings) that load with an MLM head (ELECTRA's ForPreTraining is its discriminator).
    mlm_classes: tuple[str, ...] = ("ForMaskedLM", "ForPreTraining")

    def check_config(self, config: dict[str, Any], architecture: str) -> None:
        """Refuse, before loading, a layout of this family that bertscope cannot read layer by layer."""

    def may_have_mlm_head(self, architecture: str) -> bool:
        """Whether a model saved as `architecture` can load with an MLM head (False: it certainly has none), judged
        from the name before loading; its weights may still lack the head."""
        return architecture.endswith(self.mlm_classes)

    # --- modules ---------------------------------------------------------------------------

    def prepare(self, model: Model) -> None:
        """Make a freshly built or loaded model readable layer by layer (ALBERT: one module per application)."""

    def restore(self, model: Model) -> None:
        """Undo `prepare` on a copy about to be saved, so that it saves in the family's own layout."""

    def layers(self, model: Model) -> list[nn.Module]:
        return list(model.base_model.encoder.layer)

    def embedding_output(self, model: Model) -> nn.Module:
        """The module whose output is hidden state 0: what the model reports there, what its first layer reads, and
        what anything beside that layer reads of it (DeBERTa-v2's convolution)."""
        base = model.base_model
        projection = getattr(base, "embeddings_project", None)  # ELECTRA with embeddings narrower than its layers
        return cast("nn.Module", projection if projection is not None else base.embeddings)

    def hidden_state_module(self, model: Model, index: int) -> nn.Module:
        """The module whose output is hidden state `index` as the model reports it and as everything above reads it:
        `embedding_output` for 0, else layer index − 1, or for the last index a pre-LN model's final norm."""
        from torch import nn

        if index == 0:
            return self.embedding_output(model)
        layers = self.layers(model)
        norm = self.lens_norm(model) if index == len(layers) else None
        return norm if isinstance(norm, nn.Module) else layers[index - 1]

    def self_attention(self, layer: Layer) -> nn.Module:
        """The module that computes the layer's attention (for "interface" families: the one handed to it)."""
        return cast("nn.Module", layer.attention.self)

    def attention_output(self, layer: Layer) -> nn.Linear:
        """The projection whose input is the concatenated per-head context (where heads are gated)."""
        return cast("nn.Linear", layer.attention.output.dense)

    def feed_forward_output(self, layer: Layer) -> nn.Linear:
        """The feed-forward block's output projection (its write, before the residual and LayerNorm)."""
        return cast("nn.Linear", layer.output.dense)

    def weights_module(self, layer: Layer) -> nn.Module | None:
        """For "own" families: the module applied to the attention weights `[B, H, T, K]` alone (their dropout)."""
        return None

    def value_projection(self, layer: Layer) -> nn.Linear | None:
        """For "own" families: the projection giving the heads' values `[B, T, H·d]` (value-weighted norms)."""
        return None

    def query_key_value(self, layer: Layer) -> tuple[str, ...]:
        """Attribute names (on `self_attention`) of the query, key and value projections, for physical pruning."""
        return ("query", "key", "value")

    def head_projections(self, layer: Layer) -> tuple[str, ...]:
        """Attribute names (on `self_attention`) of every projection whose output is `[H·d]`, one slice per head: what
        physical pruning slices to the kept heads (the query, key and value, and any projection of positions)."""
        return self.query_key_value(layer)

    def set_attention_output(self, layer: Layer, projection: nn.Linear) -> None:
        """Put a (pruned) output projection back where `attention_output` found it."""
        layer.attention.output.dense = projection

    def window(self, model: Model, layer: int) -> int | None:
        """How far a head of `layer` sees (|i - j| at most this), where it cannot see the whole input."""
        return None

    # --- context mixing (analyses.mixing.run) ---------------------------------------------

    def values(self, layer: Layer) -> tuple[nn.Module, slice | None]:
        """The projection whose output holds the layer's values `[B, T, H·d]` (the bias of W_V included), and the part
        of its last dimension that holds them (None: all of it)."""
        return getattr(self.self_attention(layer), self.query_key_value(layer)[2]), None

    def attention_norm(self, layer: Layer) -> nn.Module | None:
        """The LayerNorm over the attention block's residual sum x + attention (post-LN); None where the block has no
        norm after it (pre-LN)."""
        return cast("nn.Module", layer.attention.output.LayerNorm)

    def output_norm(self, layer: Layer) -> nn.Module | None:
        """The LayerNorm over the feed-forward block's residual sum (post-LN: what the layer leaves is its output);
        None where the block has no norm after it (pre-LN)."""
        return cast("nn.Module", layer.output.LayerNorm)

    def after_attention(self, model: Model, index: int, summed: Tensor) -> Tensor:
        """The rest of layer `index` from its attention block's residual sum `[..., D]` (x + the attention output, the
        bias of W_O included) to what the layer leaves, as `run_layers` yields it. Position-wise: any rows at once."""
        layer: Layer = self.layers(model)[index]
        attended = layer.attention.output.LayerNorm(summed)
        return cast("Tensor", layer.output(layer.intermediate(attended), attended))

    # --- running ---------------------------------------------------------------------------

    def run_layers(self, model: Model, hidden: Tensor, start: int, stop: int) -> Iterator[Tensor]:
        """Run layers `start`..`stop - 1` on `hidden` (what enters layer `start`, one unpadded batch: no attention
        mask) and yield what each leaves, as the model's `hidden_states` reports it."""
        for layer in self.layers(model)[start:stop]:
            hidden = layer(hidden)
            yield hidden

    def inputs(self, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The tokenizer's tensors this family's forward takes (no segment ids where it has none)."""
        if self.token_types:
            return inputs
        return {name: value for name, value in inputs.items() if name != "token_type_ids"}

    # --- heads -----------------------------------------------------------------------------

    def classifier_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        """A function from the last hidden states `[B, T, D]` to class logits, for a sequence classifier."""
        classifier = getattr(model, "classifier", None)
        if classifier is None:
            return None
        if hasattr(classifier, "out_proj"):  # RoBERTa, ELECTRA, MPNet: a head that reads the first token itself
            return cast("nn.Module", classifier)
        pooler = model.base_model.pooler  # BERT: the pooler (tanh of a projection of [CLS]), then a linear layer
        return lambda hidden: classifier(pooler(hidden))

    def token_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        """A function from the last hidden states `[B, T, D]` to logits at every token `[B, T, C]`: a token
        classifier's labels, or a QA model's start and end (C = 2), as its forward computes them (dropout is the
        identity at inference)."""
        return cast("nn.Module | None", getattr(model, "qa_outputs", None) or getattr(model, "classifier", None))

    def mlm_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        """A function from hidden states `[..., D]` to vocabulary logits, if the model has one."""
        if hasattr(model, "cls") and hasattr(model.cls, "predictions"):
            return cast("nn.Module", model.cls.predictions)  # BertForMaskedLM, BertForPreTraining, DeBERTa-v2 (legacy head)
        if hasattr(model, "lm_head"):
            return cast("nn.Module", model.lm_head)  # RoBERTa, XLM-R, CamemBERT, MPNet
        if hasattr(model, "generator_lm_head"):  # ELECTRA generator
            predictions, lm_head = model.generator_predictions, model.generator_lm_head
            return lambda hidden: lm_head(predictions(hidden))
        return None

    def lens_norm(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        """What the MLM head expects applied to a layer's output before it reads it, beyond the layer itself
        (a pre-LN model's final norm, which only the last hidden state has been through)."""
        return None

    def describe(self) -> str:
        """What this family's hidden states are, for `info`."""
        return "index 0: the embeddings; index l: the output of layer l"


@dataclass(frozen=True)
class DistilBert(Family):
    def layers(self, model: Model) -> list[nn.Module]:
        return list(model.base_model.transformer.layer)

    def self_attention(self, layer: Layer) -> nn.Module:
        return cast("nn.Module", layer.attention)

    def attention_output(self, layer: Layer) -> nn.Linear:
        return cast("nn.Linear", layer.attention.out_lin)

    def feed_forward_output(self, layer: Layer) -> nn.Linear:
        return cast("nn.Linear", layer.ffn.lin2)

    def query_key_value(self, layer: Layer) -> tuple[str, ...]:
        return ("q_lin", "k_lin", "v_lin")

    def set_attention_output(self, layer: Layer, projection: nn.Linear) -> None:
        layer.attention.out_lin = projection

    def attention_norm(self, layer: Layer) -> nn.Module | None:
        return cast("nn.Module", layer.sa_layer_norm)

    def output_norm(self, layer: Layer) -> nn.Module | None:
        return cast("nn.Module", layer.output_layer_norm)

    def after_attention(self, model: Model, index: int, summed: Tensor) -> Tensor:
        layer: Layer = self.layers(model)[index]
        attended = layer.sa_layer_norm(summed)
        return cast("Tensor", layer.output_layer_norm(layer.ffn(attended) + attended))

    def classifier_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        if not hasattr(model, "pre_classifier"):
            return None
        import torch

        return lambda hidden: model.classifier(torch.relu(model.pre_classifier(hidden[:, 0])))

    def mlm_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        if not hasattr(model, "vocab_projector"):
            return None
        return lambda hidden: model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(hidden))))


@dataclass(frozen=True)
class Albert(Family):
    """One layer's weights applied N times. `prepare` gives each application its own module objects over the
    same parameters, so that a hook, a gate or a statistic belongs to an application, not to the shared weights."""

    def check_config(self, config: dict[str, Any], architecture: str) -> None:
        inner = config.get("inner_group_num", 1)
        if inner != 1:
            raise ModelLoadError(
                f"{architecture} runs {inner} layers in each application of a layer group (inner_group_num={inner}), "
                "and transformers reports one hidden state per application, not per layer; bertscope reads ALBERT "
                "with one layer per group (inner_group_num=1, as in every released ALBERT)",
                setting="model",
            )

    def prepare(self, model: Model) -> None:
        import copy

        encoder = model.base_model.encoder
        config = encoder.config
        groups = encoder.albert_layer_groups
        if len(groups) == config.num_hidden_layers and getattr(encoder, "bertscope_unshared", False):
            return
        per_group = config.num_hidden_layers / config.num_hidden_groups
        applications = []
        for index in range(config.num_hidden_layers):
            group = groups[int(index / per_group)]
            shared = {id(tensor): tensor for tensor in [*group.parameters(), *group.buffers()]}
            applications.append(copy.deepcopy(group, memo=shared))  # new modules, the same parameters
        import torch

        encoder.__dict__["bertscope_shared"] = (groups, config)  # not a submodule: parameters are counted once
        encoder.albert_layer_groups = torch.nn.ModuleList(applications)
        encoder.config = copy.copy(config)  # the model's own config (saved with it) keeps the real group count
        encoder.config.num_hidden_groups = config.num_hidden_layers
        encoder.bertscope_unshared = True

    def restore(self, model: Model) -> None:
        encoder = model.base_model.encoder
        if getattr(encoder, "bertscope_unshared", False):
            encoder.albert_layer_groups, encoder.config = encoder.__dict__.pop("bertscope_shared")
            encoder.bertscope_unshared = False

    def layers(self, model: Model) -> list[nn.Module]:
        return [layer for group in model.base_model.encoder.albert_layer_groups for layer in group.albert_layers]

    def embedding_output(self, model: Model) -> nn.Module:
        return cast("nn.Module", model.base_model.encoder.embedding_hidden_mapping_in)  # the embeddings projected to the hidden size

    def self_attention(self, layer: Layer) -> nn.Module:
        return cast("nn.Module", layer.attention)

    def attention_output(self, layer: Layer) -> nn.Linear:
        return cast("nn.Linear", layer.attention.dense)

    def feed_forward_output(self, layer: Layer) -> nn.Linear:
        return cast("nn.Linear", layer.ffn_output)

    def set_attention_output(self, layer: Layer, projection: nn.Linear) -> None:
        layer.attention.dense = projection

    def attention_norm(self, layer: Layer) -> nn.Module | None:
        return cast("nn.Module", layer.attention.LayerNorm)

    def output_norm(self, layer: Layer) -> nn.Module | None:
        return cast("nn.Module", layer.full_layer_layer_norm)

    def after_attention(self, model: Model, index: int, summed: Tensor) -> Tensor:
        layer: Layer = self.layers(model)[index]
        attended = layer.attention.LayerNorm(summed)
        return cast("Tensor", layer.full_layer_layer_norm(layer.ff_chunk(attended) + attended))

    def classifier_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        if getattr(model, "classifier", None) is None:
            return None
        base = model.base_model
        return lambda hidden: model.classifier(base.pooler_activation(base.pooler(hidden[:, 0])))

    def mlm_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        return getattr(model, "predictions", None)

    def describe(self) -> str:
        return "index 0: the embeddings projected to the hidden size; index l: the output of the l-th application of the shared layer"


@dataclass(frozen=True)
class DebertaV2(Family):
    attention: str = "own"

    def weights_module(self, layer: Layer) -> nn.Module | None:
        return cast("nn.Module", layer.attention.self.dropout)

    def value_projection(self, layer: Layer) -> nn.Linear | None:
        return cast("nn.Linear", layer.attention.self.value_proj)

    def query_key_value(self, layer: Layer) -> tuple[str, ...]:
        return ("query_proj", "key_proj", "value_proj")

    def head_projections(self, layer: Layer) -> tuple[str, ...]:
        # share_att_key false (transformers' default): relative positions get their own per-head projections,
        # pos_key_proj for c2p and pos_query_proj for p2c, present as pos_att_type and relative_attention ask.
        attention = self.self_attention(layer)
        own = tuple(name for name in ("pos_key_proj", "pos_query_proj") if hasattr(attention, name))
        return (*self.query_key_value(layer), *own)

    def after_attention(self, model: Model, index: int, summed: Tensor) -> Tensor:
        if index == 0 and model.base_model.encoder.conv is not None:
            raise InputError(
                "this DeBERTa-v2 adds a convolution over neighbouring tokens to the output of layer 0, so that layer "
                "cannot be run token by token from its attention block; value zeroing reads models without it "
                "(conv_kernel_size 0, as DeBERTa-v3)",
                setting="method",
            )
        return super().after_attention(model, index, summed)

    def hidden_state_module(self, model: Model, index: int) -> nn.Module:
        conv = model.base_model.encoder.conv
        if index == 1 and conv is not None:  # the convolution beside layer 0 gives hidden state 1 from the layer's output
            return cast("nn.Module", conv)
        return super().hidden_state_module(model, index)

    def run_layers(self, model: Model, hidden: Tensor, start: int, stop: int) -> Iterator[Tensor]:
        import torch

        encoder = model.base_model.encoder
        ones = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
        mask = encoder.get_attention_mask(ones)
        relative = encoder.get_rel_pos(hidden)
        embeddings = encoder.get_rel_embedding()
        for index, layer in enumerate(self.layers(model)[start:stop], start=start):
            output = layer(hidden, mask, relative_pos=relative, rel_embeddings=embeddings)[0]
            if index == 0 and encoder.conv is not None:
                output = encoder.conv(hidden, output, ones)
            hidden = output
            yield hidden

    def classifier_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        if getattr(model, "classifier", None) is None:
            return None
        return lambda hidden: model.classifier(model.pooler(hidden))

    def mlm_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        if hasattr(model, "lm_predictions"):  # the head of `legacy=False` configs reads the tied word embeddings
            embeddings = model.base_model.embeddings.word_embeddings
            return lambda hidden: model.lm_predictions(hidden, embeddings)
        return super().mlm_head(model)


@dataclass(frozen=True)
class ModernBert(Family):
    """Pre-LN; fused Wqkv; local layers attend within ±local_attention/2 tokens. As transformers reports them, hidden
    states 0..L-1 are the residual stream entering each layer, and L is the final norm of the last layer's output."""

    token_types: bool = False
    physical_pruning: bool = False  # the fused Wqkv: zeroed weights only, for now

    def layers(self, model: Model) -> list[nn.Module]:
        return list(model.base_model.layers)

    def self_attention(self, layer: Layer) -> nn.Module:
        return cast("nn.Module", layer.attn)

    def attention_output(self, layer: Layer) -> nn.Linear:
        return cast("nn.Linear", layer.attn.Wo)

    def feed_forward_output(self, layer: Layer) -> nn.Linear:
        return cast("nn.Linear", layer.mlp.Wo)

    def set_attention_output(self, layer: Layer, projection: nn.Linear) -> None:
        layer.attn.Wo = projection

    def values(self, layer: Layer) -> tuple[nn.Module, slice | None]:
        width = layer.attn.Wqkv.out_features // 3  # the fused projection: [queries | keys | values]
        return layer.attn.Wqkv, slice(2 * width, 3 * width)

    def attention_norm(self, layer: Layer) -> nn.Module | None:
        return None  # pre-LN: the block adds its output to the stream, and its norm is on the way in

    def output_norm(self, layer: Layer) -> nn.Module | None:
        return None  # pre-LN, as the attention block

    def after_attention(self, model: Model, index: int, summed: Tensor) -> Tensor:
        layers: list[Layer] = self.layers(model)
        layer = layers[index]
        hidden = summed + layer.mlp(layer.mlp_norm(summed))
        return cast("Tensor", model.base_model.final_norm(hidden) if index == len(layers) - 1 else hidden)

    def window(self, model: Model, layer: int) -> int | None:
        config = model.config
        return config.local_attention // 2 if config.layer_types[layer] == "sliding_attention" else None

    def run_layers(self, model: Model, hidden: Tensor, start: int, stop: int) -> Iterator[Tensor]:
        import torch
        from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask

        base = model.base_model
        config = base.config
        unpadded = dict(config=config, inputs_embeds=hidden, attention_mask=None)
        masks = {
            "full_attention": create_bidirectional_mask(**unpadded),
            "sliding_attention": create_bidirectional_sliding_window_mask(**unpadded),
        }
        positions = torch.arange(hidden.shape[1], device=hidden.device)[None]
        rotary = {kind: base.rotary_emb(hidden, positions, kind) for kind in set(config.layer_types)}
        layers: list[Layer] = self.layers(model)
        for index, layer in enumerate(layers[start:stop], start=start):
            kind = layer.attention_type
            hidden = layer(hidden, attention_mask=masks[kind], position_embeddings=rotary[kind])
            yield base.final_norm(hidden) if index == len(layers) - 1 else hidden

    def classifier_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        if getattr(model, "classifier", None) is None:
            return None

        def logits(hidden: Tensor) -> Tensor:
            if model.config.classifier_pooling == "mean":  # one unpadded sequence per row: every token counts
                pooled = hidden.mean(1)
            else:
                pooled = hidden[:, 0]
            return cast("Tensor", model.classifier(model.drop(model.head(pooled))))

        return logits

    def token_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        if getattr(model, "classifier", None) is None or not hasattr(model, "head"):
            return None
        return lambda hidden: model.classifier(model.drop(model.head(hidden)))

    def mlm_head(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        if not hasattr(model, "decoder"):
            return None
        return lambda hidden: model.decoder(model.head(hidden))

    def lens_norm(self, model: Model) -> Callable[[Tensor], Tensor] | None:
        return cast("nn.Module", model.base_model.final_norm)

    def describe(self) -> str:
        return "index 0: the embeddings (after their norm); index l < L: the residual stream after layer l; index L: its final norm"


@dataclass(frozen=True)
class MPNet(Family):
    attention: str = "own"
    token_types: bool = False
    physical_pruning: bool = False  # the relative position bias is shared by every layer's heads

    def self_attention(self, layer: Layer) -> nn.Module:
        return cast("nn.Module", layer.attention.attn)

    def attention_output(self, layer: Layer) -> nn.Linear:
        return cast("nn.Linear", layer.attention.attn.o)

    def weights_module(self, layer: Layer) -> nn.Module | None:
        return cast("nn.Module", layer.attention.attn.dropout)

    def value_projection(self, layer: Layer) -> nn.Linear | None:
        return cast("nn.Linear", layer.attention.attn.v)

    def query_key_value(self, layer: Layer) -> tuple[str, ...]:
        return ("q", "k", "v")

    def set_attention_output(self, layer: Layer, projection: nn.Linear) -> None:
        layer.attention.attn.o = projection

    def attention_norm(self, layer: Layer) -> nn.Module | None:
        return cast("nn.Module", layer.attention.LayerNorm)

    def after_attention(self, model: Model, index: int, summed: Tensor) -> Tensor:
        layer: Layer = self.layers(model)[index]
        attended = layer.attention.LayerNorm(summed)
        return cast("Tensor", layer.output(layer.intermediate(attended), attended))

    def run_layers(self, model: Model, hidden: Tensor, start: int, stop: int) -> Iterator[Tensor]:
        bias = model.base_model.encoder.compute_position_bias(hidden)
        for layer in self.layers(model)[start:stop]:
            hidden = layer(hidden, None, bias)[0]
            yield hidden


FAMILIES: tuple[Family, ...] = (
    Family("BERT", frozenset({"bert"})),
    Family("RoBERTa", frozenset({"roberta", "xlm-roberta", "camembert"}), reserved_positions=2),
    Family("ELECTRA", frozenset({"electra"}), mlm_classes=("ForMaskedLM",)),
    DistilBert("DistilBERT", frozenset({"distilbert"}), token_types=False, projects_in_attention=True),
    Albert("ALBERT", frozenset({"albert"}), physical_pruning=False),
    DebertaV2("DeBERTa-v2", frozenset({"deberta-v2"})),
    ModernBert("ModernBERT", frozenset({"modernbert"})),
    MPNet("MPNet", frozenset({"mpnet"}), reserved_positions=2),
)

# Heads we can load on top of each family's encoder; anything else loads the bare encoder.
SUPPORTED_HEADS = (
    "Model",
    "ForMaskedLM",
    "ForPreTraining",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
)


def family_for(model_type: str, architecture: str) -> Family:
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    names = ", ".join(sorted(t for f in FAMILIES for t in f.model_types))
    raise ModelLoadError(
        f"unsupported architecture {architecture} (model_type {model_type!r}); bertscope reads bidirectional encoders: {names}"
    )
