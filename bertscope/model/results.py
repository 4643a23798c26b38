"""Plain result types that cross from the core to the CLI and the UI.

Frozen dataclasses of numpy arrays, strings and numbers: no tensor ever leaves the core.
Conventions: layers and heads count from 0; `hidden_states` has L+1 entries, index 0
being the embedding output and index l+1 the output of layer l.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown
from bertscope.model.masks import Ablation, HeadMask

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is, for `bertscope info` and the status line."""

    source: str
    family: str
    architecture: str
    num_layers: int
    num_heads: int
    hidden_size: int
    vocab_size: int
    max_length: int
    has_mlm_head: bool
    num_labels: int | None
    device: str
    dtype: str
    parameters: int
    fingerprint: str
    pruned_heads: int = 0  # heads physically removed (model.pruning); masks still use the original numbers
    cpu_linear: str | None = None  # on the CPU in float32: onednn or blas, the kernels of its linear layers
    hidden_states: str = "index 0: the embeddings; index l: the output of layer l"  # the family's convention
    # per layer, how far its heads see (keys within ±w of the query; ModernBERT's local layers), None: everything
    attention_windows: tuple[int | None, ...] = ()
    model_limit: int | None = None  # the most tokens the model takes (its positions); max_length is lower with --max-length
    tokenizer_limit: int | None = None  # what the tokenizer's file states, which max_length does not follow
    sentence_embedding: bool = False  # a sentence-transformers model (modules.json) with no task head: pairs have a cosine

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True, eq=False)
class Encoding:
    """A tokenised sentence (or sentence pair) with its alignment back to words.

    `word_ids[i]` is the index of the word token i came from within its segment, or
    None for special tokens; `segment_ids[i]` is 0 for the first text, 1 for the pair
    text, and None for special tokens. `truncated` counts the tokens cut to fit the
    model's maximum length.
    """

    text: str
    pair: str | None
    tokens: tuple[str, ...]
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    special: np.ndarray
    word_ids: tuple[int | None, ...]
    segment_ids: tuple[int | None, ...]
    truncated: int = 0

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True, eq=False, repr=False)
class ForwardResult(Shown):
    """Everything one forward pass over one input gives back.

    `attentions` is `[L, H, T, T]` (rows are query tokens and sum to 1) and present only
    when asked for; a head switched off with `zero` ablation has all-zero weights (as the
    old `head_mask` reported), one with `uniform` ablation has the uniform distribution.
    `hidden_states` is `[L+1, T, D]`; `mlm_logits` is `[T, V]` for models with an MLM
    head; `class_logits` is `[C]` for sequence-classification models. `norms`, when asked
    for, is `[L, H, T, T]`: the value-weighted norms ‖α_ij f_h(x_j)‖ of Kobayashi et al. 2020
    (how much of token j each head moves into token i; model.norms says which definition).
    `figures`, when asked for, holds each head's per-head figures `[L, H]`
    (analyses.attention.headstats), reduced layer by layer as the pass ran: a long input's
    figures without its `[L, H, T, T]` maps.
    """

    encoding: Encoding
    hidden_states: np.ndarray
    attentions: np.ndarray | None
    mlm_logits: np.ndarray | None
    class_logits: np.ndarray | None
    mask: HeadMask
    ablation: Ablation
    norms: np.ndarray | None = None
    figures: dict[str, np.ndarray] | None = None

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.encoding.tokens

    def summary(self) -> str:
        length, hidden = self.hidden_states.shape[1:]
        parts = [f"{length} tokens", f"{self.mask.num_layers} layers × {self.mask.num_heads} heads", f"hidden {hidden}"]
        held = {"attentions": self.attentions, "norms": self.norms, "MLM logits": self.mlm_logits, "class logits": self.class_logits}
        parts.append(", ".join(name for name, value in held.items() if value is not None) or "no attentions")
        if len(self.mask):
            parts.append(f"mask {self.mask.spec()} ({self.ablation})")
        if self.encoding.truncated:
            parts.append(f"cut by {self.encoding.truncated} tokens")
        return " · ".join(parts)

    def table(self) -> list[dict[str, Any]]:
        """One row per token: its position, text, segment and word (None for special tokens)."""
        encoding = self.encoding
        columns = zip(encoding.tokens, encoding.segment_ids, encoding.word_ids, encoding.special)
        return [
            {"position": i, "token": token, "segment": segment, "word": word, "special": bool(special)}
            for i, (token, segment, word, special) in enumerate(columns)
        ]

    def figure(self, layer: int = 0, head: int | None = None, norms: bool = False) -> Figure:
        """The attention map of `head` in `layer` (None: the mean of the layer's heads), tokens on both axes.

        `norms`: the value-weighted norms ‖α f(x)‖ (a pass run with `norms=True`) instead of the weights.
        """
        from bertscope.figures.heatmaps import attention_heatmap

        maps = self.norms if norms else self.attentions
        if maps is None:
            what = "norms" if norms else "attentions"
            raise InputError(f"this forward pass kept no {what} to draw: run it with {what}=True", setting=what)
        num_layers, num_heads = maps.shape[:2]
        if not 0 <= layer < num_layers or not (head is None or 0 <= head < num_heads):
            raise InputError(f"no head {layer}:{head} in {num_layers} layers × {num_heads} heads (both count from 0)")
        matrix = maps[layer].mean(0) if head is None else maps[layer, head]
        quantity, note = "norm" if norms else "weight", self._mask_note(layer, head)
        from bertscope.model.labels import token_labels

        labels = token_labels(self.tokens, self.encoding.special)  # RoBERTa's `Ġte` as `te`, as the explorer labels it
        rest = f"result.{'norms' if norms else 'attentions'} has every token"
        return attention_heatmap(matrix, labels, layer=layer, head=head, heads=num_heads, quantity=quantity, note=note, rest=rest)

    def _mask_note(self, layer: int, head: int | None) -> str | None:
        """What the figure of (layer, head) should say of the heads switched off in this pass."""
        if not len(self.mask):
            return None
        if head is not None and self.mask.is_masked(layer, head):
            does = "its weights read 0" if self.ablation == "zero" else "it attends evenly to every token"
            return f"head {layer}:{head} switched off ({self.ablation} ablation: {does})"
        if head is None and any(self.mask.is_masked(layer, other) for other in range(self.mask.num_heads)):
            return f"the mean includes heads switched off ({self.ablation} ablation): heads off {self.mask.spec()}"
        return f"heads off in this pass: {self.mask.spec()} ({self.ablation} ablation)"


@dataclass(frozen=True)
class MaskPrediction:
    """The masked-LM's top guesses for one [MASK] position."""

    position: int
    tokens: tuple[str, ...]
    probabilities: tuple[float, ...]
