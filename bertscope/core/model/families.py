"""Family adapters: where each supported encoder family keeps its modules.

BERT, RoBERTa (and XLM-R, CamemBERT) and ELECTRA share one layout in transformers 5:
`base_model.encoder.layer[i].attention.self` computes attention through the
AttentionInterface and `...attention.output.dense` projects the concatenated heads.
They differ in where the masked-LM head lives and in how many positions are reserved.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only in annotations: the model files are judged before torch is imported
    from torch import Tensor, nn

from bertscope.core.errors import ModelLoadError


@dataclass(frozen=True)
class Family:
    name: str
    model_types: frozenset[str]
    # Positions the model reserves before the first token (RoBERTa offsets by padding_idx + 1).
    reserved_positions: int = 0

    def layers(self, model: nn.Module) -> list[nn.Module]:
        return list(model.base_model.encoder.layer)

    def self_attention(self, layer: nn.Module) -> nn.Module:
        return layer.attention.self

    def attention_output(self, layer: nn.Module) -> nn.Linear:
        """The projection whose input is the concatenated per-head context (where heads are gated)."""
        return layer.attention.output.dense

    def feed_forward_output(self, layer: nn.Module) -> nn.Linear:
        """The feed-forward block's output projection (its write, before the residual and LayerNorm)."""
        return layer.output.dense

    def classifier_head(self, model: nn.Module) -> Callable[[Tensor], Tensor] | None:
        """A function from the last hidden states `[B, T, D]` to class logits, for a sequence classifier."""
        classifier = getattr(model, "classifier", None)
        if classifier is None:
            return None
        if hasattr(classifier, "out_proj"):  # RoBERTa, ELECTRA: a head that reads the first token itself
            return classifier
        pooler = model.base_model.pooler  # BERT: the pooler (tanh of a projection of [CLS]), then a linear layer
        return lambda hidden: classifier(pooler(hidden))

    def mlm_head(self, model: nn.Module) -> Callable[[Tensor], Tensor] | None:
        """A function from hidden states `[..., D]` to vocabulary logits, if the model has one."""
        if hasattr(model, "cls") and hasattr(model.cls, "predictions"):
            return model.cls.predictions  # BertForMaskedLM, BertForPreTraining
        if hasattr(model, "lm_head"):
            return model.lm_head  # RoBERTa, XLM-R, CamemBERT
        if hasattr(model, "generator_lm_head"):  # ELECTRA generator
            predictions, lm_head = model.generator_predictions, model.generator_lm_head
            return lambda hidden: lm_head(predictions(hidden))
        return None


FAMILIES: tuple[Family, ...] = (
    Family("BERT", frozenset({"bert"})),
    Family("RoBERTa", frozenset({"roberta", "xlm-roberta", "camembert"}), reserved_positions=2),
    Family("ELECTRA", frozenset({"electra"})),
)

# Heads we can load on top of each family's encoder; anything else loads the bare encoder.
SUPPORTED_HEADS = ("Model", "ForMaskedLM", "ForPreTraining", "ForSequenceClassification", "ForTokenClassification")


def family_for(model_type: str, architecture: str) -> Family:
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    names = ", ".join(sorted(t for f in FAMILIES for t in f.model_types))
    raise ModelLoadError(
        f"unsupported architecture {architecture} (model_type {model_type!r}); "
        f"bertscope reads BERT-architecture encoders: {names}"
    )
