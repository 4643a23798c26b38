"""What context mixing gives back: per-layer and rolled-out token × token matrices, and their agreement over a corpus.

Plain numpy, no torch: the CLI, the explorer and notebooks read these. The computation and
the measures' definitions are in analyses.mixing.run; `DEFINITIONS` names each as the
outputs say it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from bertscope.figures.notebook import Shown
from bertscope.model.labels import token_labels
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding

if TYPE_CHECKING:
    from matplotlib.figure import Figure

METHODS = ("attention", "norms", "value-zeroing", "alti", "flow", "rollout")
PER_LAYER = ("attention", "norms", "value-zeroing", "alti")  # a matrix per layer; flow and rollout are only cumulative
# Over a corpus, the measures each within about two bare forwards run unless methods are named; value zeroing (a
# feed-forward block on T² rows a layer, ≈ 13 bare forwards) and flow (L·T² max-flow problems a sentence, ≈ T⁴) run
# only when named, with an estimate once the first batch is timed (`CostEstimate`; benchmarks/README.md, issue 54).
CORPUS_DEFAULT = ("attention", "norms", "alti", "rollout")
COSTLY = ("value-zeroing", "flow")
METHOD_NAMES = {
    "attention": "raw attention",
    "norms": "value-weighted norms",
    "value-zeroing": "value zeroing",
    "alti": "ALTI",
    "flow": "attention flow",
    "rollout": "attention rollout",
}
DEFINITIONS = {
    "attention": "C_ij = the mean over heads of the attention weight α^h_ij, rows renormalised; rolled: the product of the layers' C",
    "norms": "C_ij = Σ_h ‖α^h_ij f_h(x_j)‖ with f_h(x) = (x W_V^h + b_V^h) W_O^h, the bias of W_O left out (Kobayashi et al. 2020), "
    "rows normalised; rolled: the product of the layers' C",
    "value-zeroing": "C_ij = 1 - cos(x̃_i, x̃_i^¬j): token i's output of the whole layer (attention, residual, LayerNorm, "
    "feed-forward), with token j's value vectors (x_j W_V + b_V) as they are and set to zero in every head "
    "(Mohebbi et al. 2023), rows normalised; rolled: the product of the layers' C",
    "alti": "ALTI (Ferrando et al. 2022): C_ij = max(0, ‖y_i‖₁ - ‖y_i - T_i(x_j)‖₁), rows normalised, where y_i is the "
    "attention block's output and T_i(x_j) = L_i(Σ_h α^h_ij f_h(x_j) + [i = j] x_i) token j's term of it, L_i the block's "
    "LayerNorm linearised at token i's own σ (post-LN; pre-LN blocks have none after them: L_i is the identity); b_V is in "
    "each token's term, b_O and the LayerNorm's β in y_i alone, as in the authors' code; rolled: the product of the layers' C",
    "rollout": "attention rollout (Abnar & Zuidema 2020): the product of Â_l = ½·(mean over heads of A_l) + ½·I, rows "
    "renormalised, from the input to layer l",
    "flow": "attention flow (Abnar & Zuidema 2020): the maximum flow from input token j to token i of layer l through the "
    "layered graph whose edges carry Â_l (rollout's) as capacities, rows normalised",
}
SHARES = ("cls", "sep", "punctuation", "self")  # where a row's mixing comes from (analyses.attention.headstats's token classes)


@dataclass(frozen=True)
class CostEstimate:
    """How long each costly measure (COSTLY) of a corpus run will take, said before the rest of the run: its time on the
    first batch, scaled by its cost in the sentences' lengths to the sentences of the first chunk read (`covered`, the
    whole corpus where `whole`). A corpus run's record after its first batch carries it as `partial`."""

    seconds: dict[str, float]  # method: expected seconds over the covered sentences
    covered: int
    whole: bool

    def line(self) -> str:
        """One line for a person: 'attention flow takes about 12 min for these 200 sentences (timed on the first batch)'."""
        each = ", ".join(f"{METHOD_NAMES[method]} about {_duration(seconds)}" for method, seconds in self.seconds.items())
        if self.whole:
            return f"{each} for these {self.covered:,} sentences (timed on the first batch)"
        more = f"about as long again for every {self.covered:,} more"
        return f"{each} for the first {self.covered:,} sentences read, {more} (timed on the first batch)"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def token_classes(tokens: Sequence[str], special: np.ndarray) -> npt.NDArray[np.bool_]:
    """`[T, 3]` bool: [CLS] (the first special token), [SEP] (every later one), punctuation, as patterns counts them."""
    from bertscope.analyses.attention.headstats import is_punctuation

    punctuation = np.array([is_punctuation(token) for token in tokens], dtype=bool)
    return cast(npt.NDArray[np.bool_], padded_token_classes([punctuation], [special], len(tokens))[0])


def padded_token_classes(punctuation: Sequence[np.ndarray], special: Sequence[np.ndarray], size: int) -> np.ndarray:
    """`[B, size, 3]`: `token_classes` of each input of a batch, from its tokens' punctuation and special flags; padding
    in no class."""
    specials = np.zeros((len(special), size), dtype=bool)
    punctuations = np.zeros((len(special), size), dtype=bool)
    for row, (marks, flags) in enumerate(zip(punctuation, special, strict=True)):
        specials[row, : len(flags)] = flags
        punctuations[row, : len(flags)] = marks
    first = specials & (np.cumsum(specials, axis=1) == 1)
    return np.stack([first, specials & ~first, punctuations & ~specials], axis=-1)


def shares(matrices: np.ndarray, classes: np.ndarray) -> npt.NDArray[np.float64]:
    """`[..., 4]`: for matrices `[..., T, T]` of rows summing to 1, the mean over rows of the share taken from [CLS], [SEP],
    punctuation and the token itself (SHARES)."""
    to_classes = matrices @ classes.astype(np.float64)  # [..., T, 3]
    own = np.diagonal(matrices, axis1=-2, axis2=-1)[..., None]
    return cast(npt.NDArray[np.float64], np.concatenate([to_classes, own], axis=-1).mean(-2))


@dataclass(frozen=True, repr=False)
class Mixing(Shown):
    """One context-mixing measure over one input: `rolled[l][i, j]`, how much of input token j is in token i of layer l's
    output; `per_layer[l][i, j]`, how much of token j of layer l's input is in token i of its output (None for flow and
    rollout, which are only cumulative). Every row sums to 1."""

    encoding: Encoding
    method: str
    rolled: np.ndarray  # [L, T, T]
    per_layer: np.ndarray | None = None  # [L, T, T]
    mask: HeadMask | None = None
    ablation: Ablation = "zero"
    notes: tuple[str, ...] = ()

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.encoding.tokens

    @property
    def definition(self) -> str:
        return DEFINITIONS[self.method]

    @property
    def num_layers(self) -> int:
        return int(self.rolled.shape[0])

    def shares(self, rolled: bool = True) -> np.ndarray:
        """`[L, 4]`: per layer, the mean share of a token's mixing from [CLS], [SEP], punctuation and itself (SHARES)."""
        matrices = self.rolled if rolled or self.per_layer is None else self.per_layer
        return shares(matrices, token_classes(self.tokens, self.encoding.special))

    def summary(self) -> str:
        last = dict(zip(SHARES, self.shares()[-1], strict=True))
        told = ", ".join(f"{name} {last[name]:.0%}" for name in SHARES)
        masked = f" · heads off {self.mask.spec()} ({self.ablation})" if self.mask is not None and len(self.mask) else ""
        return f"{METHOD_NAMES[self.method]} · {len(self.tokens)} tokens · {self.num_layers} layers · rolled to the last: {told}{masked}"

    def table(self) -> list[dict[str, Any]]:
        """One row per layer: the shares from [CLS], [SEP], punctuation and self, of the layer's own matrix and rolled out."""
        rolled = self.shares(rolled=True)
        own = self.shares(rolled=False) if self.per_layer is not None else None
        rows = []
        for layer in range(self.num_layers):
            row: dict[str, Any] = {"layer": layer}
            if own is not None:
                row |= {f"layer_{name}": float(value) for name, value in zip(SHARES, own[layer], strict=True)}
            row |= {f"rolled_{name}": float(value) for name, value in zip(SHARES, rolled[layer], strict=True)}
            rows.append(row)
        return rows

    def matrix(self, layer: int | None = None, rolled: bool = True) -> npt.NDArray[np.floating[Any]]:
        """`[T, T]` of `layer` (None: the last), rolled out from the input or the layer's own (where the method has one)."""
        layer = self.num_layers - 1 if layer is None else layer
        if not -self.num_layers <= layer < self.num_layers:
            raise IndexError(f"layer {layer} is out of range: {self.num_layers} layers (0-{self.num_layers - 1})")
        if rolled or self.per_layer is None:
            return cast(npt.NDArray[np.floating[Any]], self.rolled[layer])
        return cast(npt.NDArray[np.floating[Any]], self.per_layer[layer])

    def figure(self, layer: int | None = None, rolled: bool = True) -> Figure:
        """The matrix of `layer` (None: the last), rolled out from the input unless `rolled=False` (the layer's own), as
        a token × token heatmap: rows the tokens receiving, columns the tokens they take from."""
        from bertscope.figures.heatmaps import attention_heatmap

        layer = self.num_layers - 1 if layer is None else layer
        cumulative = rolled or self.per_layer is None
        where = f"input → layer {layer}" if cumulative else f"layer {layer}"
        note = f"heads off {self.mask.spec()} ({self.ablation})" if self.mask is not None and len(self.mask) else None
        labels = token_labels(self.tokens, self.encoding.special)  # RoBERTa's `Ġte` as `te`, as the explorer labels it
        title = f"{METHOD_NAMES[self.method]} · {where}"
        figure = attention_heatmap(self.matrix(layer, rolled), labels, title=title, scale="fixed", note=note)
        for axes in figure.axes[1:]:  # the colour bar: name what the cells hold, not attention weights
            axes.set_ylabel(f"share of token i's mixing from token j ({METHOD_NAMES[self.method]})")
        return figure

    def as_json(self) -> dict[str, Any]:
        """`{"method", "definition", "tokens", "per_layer" (not for flow and rollout), "rolled", "mask", "ablation", "notes"}`."""
        payload: dict[str, Any] = {"method": self.method, "definition": self.definition, "tokens": list(self.tokens)}
        if self.per_layer is not None:
            payload["per_layer"] = np.round(self.per_layer, 6).tolist()
        payload["rolled"] = np.round(self.rolled, 6).tolist()
        payload |= {"mask": self.mask.spec() if self.mask is not None else "", "ablation": self.ablation, "notes": list(self.notes)}
        return payload


@dataclass(frozen=True, repr=False)
class MixingAgreement(Shown):
    """Context-mixing measures compared over a corpus (Mohebbi et al. 2023 §5).

    `agreement[a, b]`: the Spearman rank correlation of methods a and b's rolled-out rows at the
    last layer, averaged over each sentence's rows and then over sentences. `layer_shares[m, l]`
    and `rolled_shares[m, l]` (`[M, L, 4]`): method m's mean share from [CLS], [SEP], punctuation
    and self at layer l, of the layer's own matrix (NaN for flow and rollout) and rolled out.
    """

    methods: tuple[str, ...]
    sentences: int
    tokens: int
    agreement: np.ndarray  # [M, M]
    layer_shares: np.ndarray  # [M, L, 4]
    rolled_shares: np.ndarray  # [M, L, 4]
    truncated: int = 0
    mask: HeadMask | None = None
    ablation: Ablation = "zero"
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        pairs = [
            (self.agreement[a, b], f"{self.methods[a]}~{self.methods[b]}")
            for a in range(len(self.methods))
            for b in range(a + 1, len(self.methods))
        ]
        told = ", ".join(f"{name} {value:.2f}" for value, name in sorted(pairs, key=lambda pair: -np.nan_to_num(pair[0], nan=-2))[:3])
        return f"{len(self.methods)} methods · {self.sentences:,} sentences · {self.tokens:,} tokens · most in agreement: {told}"

    def table(self) -> list[dict[str, Any]]:
        """One row per method and layer: its shares of its own matrix and rolled out."""
        rows = []
        for index, method in enumerate(self.methods):
            for layer in range(self.layer_shares.shape[1]):
                row: dict[str, Any] = {"method": method, "layer": layer}
                row |= {f"layer_{name}": _number(value) for name, value in zip(SHARES, self.layer_shares[index, layer], strict=True)}
                row |= {f"rolled_{name}": _number(value) for name, value in zip(SHARES, self.rolled_shares[index, layer], strict=True)}
                rows.append(row)
        return rows

    def agreement_rows(self) -> list[dict[str, Any]]:
        """The agreement table, one row per method: its Spearman ρ with each method."""
        return [
            {"method": method, **{other: _number(self.agreement[a, b]) for b, other in enumerate(self.methods)}}
            for a, method in enumerate(self.methods)
        ]

    def figure(self) -> Figure:
        """The agreement table as a method × method grid of Spearman ρ on a diverging scale from −1 to 1, each cell written."""
        from bertscope.figures.layout import annotate_cells, colormap, colour_bar, new_figure, number_ticks, titled

        count = len(self.methods)
        figure = new_figure(3.2 + 0.7 * count, 2.2 + 0.6 * count)
        ax = figure.add_subplot()
        image = ax.imshow(self.agreement, cmap=colormap("RdBu_r"), vmin=-1.0, vmax=1.0)
        names = [METHOD_NAMES[method] for method in self.methods]
        number_ticks(ax, "x", count, names)
        number_ticks(ax, "y", count, names)
        ax.tick_params(axis="x", labelrotation=45)
        annotate_cells(ax, self.agreement, image)
        colour_bar(figure, image, ax, "Spearman ρ of rolled-out rows, last layer", shrink=0.85)
        note = f"heads off {self.mask.spec()} ({self.ablation})" if self.mask is not None and len(self.mask) else None
        titled(figure, f"context-mixing measures compared · {self.sentences:,} sentences", note, ax)
        return figure

    def as_json(self) -> dict[str, Any]:
        return {
            "methods": list(self.methods),
            "definitions": {method: DEFINITIONS[method] for method in self.methods},
            "sentences": self.sentences,
            "tokens": self.tokens,
            "agreement": [[_number(value, 4) for value in row] for row in self.agreement],
            "agreement_definition": "Spearman ρ of the methods' rolled-out rows at the last layer, the mean over a sentence's "
            "rows, then over sentences",
            "shares": {
                method: {
                    "layer": None if method not in PER_LAYER else _rows(self.layer_shares[index]),
                    "rolled": _rows(self.rolled_shares[index]),
                }
                for index, method in enumerate(self.methods)
            },
            "shares_of": list(SHARES),
            "truncated": self.truncated,
            "mask": self.mask.spec() if self.mask is not None else "",
            "ablation": self.ablation,
            "notes": list(self.notes),
        }


def _number(value: float, digits: int = 6) -> float | None:
    return None if not np.isfinite(value) else round(float(value), digits)


def _rows(table: np.ndarray) -> list[dict[str, float | None]]:
    return [{name: _number(value) for name, value in zip(SHARES, row, strict=True)} for row in table]
