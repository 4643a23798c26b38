"""Plain result types that cross from the core to the CLI and the UI.

Frozen dataclasses of numpy arrays, strings and numbers: no tensor ever leaves the core.
Conventions: layers and heads count from 0; `hidden_states` has L+1 entries, index 0
being the embedding output and index l+1 the output of layer l.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from bertscope.core.errors import InputError
from bertscope.core.model.masks import Ablation, HeadMask
from bertscope.figures.notebook import Shown

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
    pruned_heads: int = 0  # heads physically removed (core.model.pruning); masks still use the original numbers
    cpu_linear: str | None = None  # on the CPU in float32: onednn or blas, the kernels of its linear layers
    hidden_states: str = "index 0: the embeddings; index l: the output of layer l"  # the family's convention
    # per layer, how far its heads see (keys within ±w of the query; ModernBERT's local layers), None: everything
    attention_windows: tuple[int | None, ...] = ()
    model_limit: int | None = None  # the most tokens the model takes (its positions); max_length is lower with --max-length
    tokenizer_limit: int | None = None  # what the tokenizer's file states, which max_length does not follow

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
    (how much of token j each head moves into token i; core.model.norms says which definition).
    `figures`, when asked for, holds each head's per-head figures `[L, H]`
    (core.analyses.headstats), reduced layer by layer as the pass ran: a long input's
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
        from bertscope.core.model.labels import token_labels

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


PATTERNS = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
"""Attention pattern classes after Kovaleva et al. 2019 (how they are told apart: core.analyses.patterns)."""
OFF = "off"
"""The class of a head switched off in the passes: its map is the ablation's (zeros, or uniform), not a pattern it has."""
CLASSES = (*PATTERNS, OFF)
"""Every class a head is given (`PatternResult.dominant` indexes it): a pattern, or off."""
STATISTICS = ("cls", "sep", "punct", "self", "prev", "next", "block", "entropy", "distance")
"""Per-head attention statistics, each averaged over real query tokens and sentences."""
NORM_SHARES = ("cls", "sep", "punct", "self", "prev", "next")
"""The statistics that are shares of a row, taken also of value-weighted norms (`norm_<name>` in `statistics`)."""
STATISTIC_LABELS = {
    "cls": "share of attention to [CLS]",
    "sep": "share of attention to [SEP]",
    "punct": "share of attention to punctuation",
    "self": "share of attention to the token itself",
    "prev": "share of attention to the previous token",
    "next": "share of attention to the next token",
    "block": "share of attention within the token's own segment",
    "entropy": "attention entropy (nats)",
    "distance": "mean attention distance (tokens)",
}
"""What each statistic is, as a figure's colour bar names it; `norm_<name>` is the same share of ‖α f(x)‖."""
NORM_DEFINITION = "‖α_ij f_h(x_j)‖ with f_h(x) = (x W_V^h + b_V^h) W_O^h, the bias of W_O left out (Kobayashi et al. 2020)"
"""Which value-weighted norm bertscope computes (core.model.norms), for outputs that must say so."""


@dataclass(frozen=True, repr=False)
class PatternResult(Shown):
    """Corpus-level attention statistics: `[L, H]` arrays, `pattern_shares` `[L, H, 5]`.

    When norms were asked for, `statistics` also holds `norm_cls`, `norm_sep`, ... (NORM_SHARES):
    the same shares taken of the value-weighted norms instead of the weights. A head that
    `mask` switched off is of class OFF: its pattern shares are all 0 (its map is the
    ablation's, no pattern of the model's) and the per-layer shares leave it out.
    """

    sentences: int
    tokens: int
    truncated: int
    statistics: dict[str, np.ndarray]
    pattern_shares: np.ndarray
    notes: tuple[str, ...] = ()  # what a person should be told about the outcome (lines skipped, text cut)
    mask: HeadMask | None = None  # the heads switched off in the passes
    ablation: Ablation = "zero"

    @property
    def off(self) -> np.ndarray:
        """`[L, H]` bool: the heads switched off in the passes."""
        off = np.zeros(self.pattern_shares.shape[:2], dtype=bool)
        for layer, head in self.mask.off if self.mask is not None else ():
            off[layer, head] = True
        return off

    @property
    def dominant(self) -> np.ndarray:
        """`[L, H]` index into CLASSES of each head's most frequent pattern, or of OFF for a head switched off."""
        return np.where(self.off, CLASSES.index(OFF), self.pattern_shares.argmax(-1))

    @property
    def has_norms(self) -> bool:
        return all(f"norm_{name}" in self.statistics for name in NORM_SHARES)

    @property
    def statistic_names(self) -> list[str]:
        """Every statistic it holds, in the order tables list them: STATISTICS, then the shares of norm if taken."""
        return [*STATISTICS, *(f"norm_{name}" for name in NORM_SHARES)] if self.has_norms else list(STATISTICS)

    def layer_statistics(self, name: str) -> npt.NDArray[np.floating[Any]]:
        return cast(npt.NDArray[np.floating[Any]], self.statistics[name].mean(-1))

    def head_table(self) -> tuple[list[str], list[list[str | float]]]:
        """One row per head (the `patterns --csv` table and the overview's export): layer, head, dominant pattern,
        the share of each pattern, every statistic."""
        names = self.statistic_names
        header = ["layer", "head", "pattern", *(f"share_{name}" for name in PATTERNS), *names]
        rows = [
            [
                layer,
                head,
                CLASSES[self.dominant[layer, head]],
                *(float(share) for share in self.pattern_shares[layer, head]),
                *(float(self.statistics[name][layer, head]) for name in names),
            ]
            for layer, head in np.ndindex(*self.dominant.shape)
        ]
        return header, rows

    def layer_pattern_shares(self) -> npt.NDArray[np.floating[Any]]:
        """`[L, 5]`: per layer, the share of (head, sentence) maps in each pattern, over the heads not switched off."""
        on = ~self.off
        return cast(npt.NDArray[np.floating[Any]], (self.pattern_shares * on[..., None]).sum(1) / np.maximum(on.sum(1), 1)[:, None])

    def summary(self) -> str:
        num_layers, num_heads = self.dominant.shape
        counts = np.bincount(self.dominant.ravel(), minlength=len(CLASSES))
        classes = ", ".join(f"{name} {count}" for name, count in zip(CLASSES, counts) if count)
        return f"{self.sentences:,} sentences · {self.tokens:,} tokens · {num_layers}×{num_heads} heads · heads by pattern: {classes}"

    def table(self) -> list[dict[str, Any]]:
        """One row per head: its dominant pattern, the share of each pattern, every statistic (`head_table`)."""
        header, rows = self.head_table()
        return [dict(zip(header, row)) for row in rows]

    def figure(self, statistic: str | None = None, under: str | None = None) -> Figure:
        """Each head's dominant pattern class (Kovaleva et al. 2019), or with `statistic` (cls, entropy, norm_sep, ...)
        that statistic per head on a colour bar (shares on 0–1), heads switched off marked ×. `under` ends the figure's
        note: what the passes ran under (" · mask 0:3 (zero) · upos erased @4"); by default the result's mask."""
        note = self._counted() + (self._mask_note() if under is None else under)
        off = self.off
        if statistic is None:
            from bertscope.figures.grids import pattern_classes

            return pattern_classes(self.dominant, CLASSES if off.any() else PATTERNS, shares=self.pattern_shares, note=note)
        if statistic not in self.statistics:
            raise InputError(f"no statistic {statistic!r}: choose one of {', '.join(self.statistic_names)}", setting="statistic")
        from bertscope.figures.grids import head_grid

        name = statistic.removeprefix("norm_")
        label = STATISTIC_LABELS[name].replace("attention", "value-weighted norm ‖α f(x)‖") if statistic != name else STATISTIC_LABELS[name]
        share = name not in ("entropy", "distance")
        title = f"{label} per head"
        masked = {(int(layer), int(head)) for layer, head in zip(*np.nonzero(off))}
        return head_grid(self.statistics[statistic], label, title=title, vmin=0.0, vmax=1.0 if share else None, note=note, masked=masked)

    def _counted(self) -> str:
        return f"over {self.sentences:,} sentences, {self.tokens:,} tokens"

    def _mask_note(self) -> str:
        return f" · mask {self.mask.spec()} ({self.ablation})" if self.mask is not None and len(self.mask) else ""

    def as_json(self, model: str) -> dict[str, Any]:
        heads = []
        num_layers, num_heads = self.pattern_shares.shape[:2]
        names = self.statistic_names
        per_layer: tuple[str, ...] = ("cls", "sep", "punct")
        if self.has_norms:
            per_layer = (*NORM_SHARES, *(f"norm_{name}" for name in NORM_SHARES))
        for layer in range(num_layers):
            for head in range(num_heads):
                entry = {"layer": layer, "head": head, "pattern": CLASSES[self.dominant[layer, head]]}
                entry["pattern_shares"] = _shares(self.pattern_shares[layer, head])
                entry.update({name: round(float(self.statistics[name][layer, head]), 6) for name in names})
                heads.append(entry)
        layers = [
            {
                "layer": layer,
                "pattern_shares": _shares(self.layer_pattern_shares()[layer]),
                **{name: round(float(self.layer_statistics(name)[layer]), 6) for name in per_layer},
            }
            for layer in range(num_layers)
        ]
        payload = {"model": model, "sentences": self.sentences, "tokens": self.tokens, "truncated": self.truncated}
        if self.has_norms:
            payload["norms"] = NORM_DEFINITION
        return {**payload, "heads": heads, "layers": layers}


def _shares(values: np.ndarray) -> dict[str, float]:
    return {name: round(float(value), 6) for name, value in zip(PATTERNS, values)}
