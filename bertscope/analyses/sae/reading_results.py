"""What an SAE's features are read against, as plain data (no torch): the heads that write a feature, and the features'
decoder directions against a probe's class directions and a LEACE eraser's removed directions.

Computed by analyses.sae.heads and analyses.sae.directions; kept apart so that the CLI, a notebook and the UI can
name them without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# A feature is read by a probe where its decoder row's |cosine| to one of the probe's class directions is at least
# this. A random direction's |cosine| to a fixed one is about N(0, 1/D): at D = 384 (MiniLM) 0.3 is 5.9 standard
# deviations, so against 17 UPOS directions a random row reaches it with probability about 34·e^(-D·0.09/2) ≈ 1e-6 and
# none of 1,536 features would by chance. `chance` in the JSON gives the level random directions reach on the model
# at hand (a small hidden size needs a higher bar: read it there).
READ_COSINE = 0.3
# A feature is taken away by an erasure where at least half of its unit decoder row d lies in the directions the
# eraser removes: ‖Π d‖ ≥ 0.5, Π the orthogonal projection onto them. A random direction has about sqrt(r/D) of itself
# in r of D dimensions: 0.2 for UPOS's 16 at D = 384 (`chance` gives the 99th percentile on the model at hand).
ERASED_SHARE = 0.5
CHANCE_DRAWS = 1000  # random unit directions drawn (seeded) for the chance levels

LINEARISATION_POST_LN = (
    "post-LN: each LayerNorm after a write is linearised at the token's own scale σ (as nn.LayerNorm computes it, "
    "√(biased variance + ε)) and its centring, as Kobayashi et al. 2021 do: LN(Σ parts) = Σ γ⊙(part − mean)/σ + β, "
    "exact for the pass at hand; a part's share is what reaches the hidden state through the residual stream and "
    "those norms, not through later heads or feed-forward blocks (which are parts of their own)"
)
LINEARISATION_PRE_LN = (
    "pre-LN: every block adds its output to the residual stream, so a part's direct share is exact with no "
    "linearisation; only a final norm (the last hidden state) is linearised at the token's own σ (Kobayashi et al. "
    "2021); a part's share is what reaches the hidden state through the residual stream, not through later blocks"
)


def check_feature(feature: int, d_sae: int) -> None:
    if not 0 <= feature < d_sae:
        raise InputError(f"feature {feature} is out of range: the SAE has features 0 to {d_sae - 1}", setting="feature")


def check_heads_layer(layer: int) -> None:
    if layer == 0:
        raise InputError(
            "the SAE reads hidden state 0, the embeddings: no head writes it (only the embeddings do); "
            "train one on a hidden state of 1 or more",
            setting="sae",
        )


def check_sae_for_heads(directory: str | Path, feature: int) -> None:
    """What `sae heads` can judge from the SAE's cfg.json alone (torch-free: before a model loads)."""
    from bertscope.analyses.sae.files import read_config

    config = read_config(directory)
    check_heads_layer(config.layer)
    check_feature(feature, config.d_sae)


def _rounded(value: float, digits: int = 6) -> float | None:
    return None if math.isnan(value) else round(float(value), digits)


@dataclass(frozen=True, repr=False)
class SAEHeads(Shown):
    """Which parts of the model write feature `feature` of an SAE at hidden state `layer` (≥ 1): each part's direct
    contribution to the feature's pre-activation, W_enc[:, f] · (the part's write as it reaches the hidden state),
    averaged over the tokens where the feature fires (`firing` of `tokens`).

    Parts: the embeddings (hidden state 0), every head of every layer below (its output through its slice of the
    attention output projection, bias left out), each layer's attention-output bias, feed-forward block (its output
    projection's output, bias included), the LayerNorms' shifts β (all of them together), and the SAE's own bias
    (b_enc − b_dec · W_enc[:, f]). They add up to the mean pre-activation (`preactivation`); `residual` is what they
    miss (float noise). `linearisation` says how LayerNorms were taken."""

    directory: str
    model: str
    layer: int
    feature: int
    d_sae: int
    sentences: int
    tokens: int  # the SAE's tokens read
    firing: int  # those on which the feature fired
    activation: float  # its mean activation there
    preactivation: float  # its mean pre-activation there
    heads: np.ndarray  # [layer, H]: mean direct contribution of each head of layers 0..layer-1
    embeddings: float
    attention_bias: np.ndarray  # [layer]
    feed_forward: np.ndarray  # [layer]
    norm_shift: float
    sae_bias: float
    linearisation: str
    mask: str = ""
    truncated: int = 0
    notes: tuple[str, ...] = ()

    def parts(self) -> dict[str, float]:
        """The totals of each kind of part, which add up to the pre-activation."""
        return {
            "embeddings": self.embeddings,
            "heads": float(self.heads.sum()),
            "attention bias": float(self.attention_bias.sum()),
            "feed-forward": float(self.feed_forward.sum()),
            "LayerNorm shifts": self.norm_shift,
            "SAE bias": self.sae_bias,
        }

    @property
    def residual(self) -> float:
        """The pre-activation less the sum of the parts: float noise."""
        return self.preactivation - sum(self.parts().values())

    def ranked(self) -> list[tuple[int, int, float]]:
        """Every head as (layer, head, contribution), the largest magnitude first."""
        layers, heads = self.heads.shape
        order = np.argsort(-np.abs(self.heads), axis=None, kind="stable")
        return [(int(i // heads), int(i % heads), float(self.heads.flat[i])) for i in order]

    def summary(self) -> str:
        if not self.firing:
            return f"feature {self.feature} at hidden state {self.layer}: never fired on {self.tokens:,} tokens"
        layer, head, value = self.ranked()[0]
        return (
            f"feature {self.feature} at hidden state {self.layer}: fired on {self.firing:,} of {self.tokens:,} tokens, "
            f"mean pre-activation {self.preactivation:.3f}; heads {self.heads.sum():+.3f}, feed-forward "
            f"{self.feed_forward.sum():+.3f}, embeddings {self.embeddings:+.3f}; top head {layer}:{head} ({value:+.3f})"
        )

    def table(self) -> list[dict[str, Any]]:
        """One row per part: every head, the largest magnitude first, then the layers' other parts and the rest."""
        share = self.preactivation if self.preactivation else math.nan
        rows: list[dict[str, Any]] = [
            {"part": "head", "layer": layer, "head": head, "contribution": value, "share": value / share}
            for layer, head, value in self.ranked()
        ]
        for layer in range(self.layer):
            rows.append({"part": "feed-forward", "layer": layer, "head": None, "contribution": float(self.feed_forward[layer])})
            rows.append({"part": "attention bias", "layer": layer, "head": None, "contribution": float(self.attention_bias[layer])})
        for name, value in (("embeddings", self.embeddings), ("LayerNorm shifts", self.norm_shift), ("SAE bias", self.sae_bias)):
            rows.append({"part": name, "layer": None, "head": None, "contribution": value})
        for row in rows[len(self.heads.flat) :]:
            row["share"] = row["contribution"] / share
        return rows

    def figure(self) -> Figure:
        """Each head's mean direct contribution (layers down, heads across), diverging around 0."""
        from bertscope.figures.grids import head_grid

        title = f"heads writing SAE feature {self.feature} at hidden state {self.layer}"
        note = f"mean over the {self.firing:,} tokens it fires on; pre-activation {self.preactivation:.3f}"
        return head_grid(self.heads, "direct contribution to the pre-activation", title=title, note=note, signed=True)

    def as_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "model": self.model,
            "layer": self.layer,
            "feature": self.feature,
            "d_sae": self.d_sae,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "firing": self.firing,
            "over": "the tokens where the feature fires (mean per token)",
            "activation": _rounded(self.activation),
            "preactivation": _rounded(self.preactivation),
            "parts": {name: _rounded(value) for name, value in self.parts().items()},
            "residual": _rounded(self.residual, 9),
            "heads": [[_rounded(value) for value in row] for row in self.heads.tolist()],
            "attention_bias": [_rounded(value) for value in self.attention_bias.tolist()],
            "feed_forward": [_rounded(value) for value in self.feed_forward.tolist()],
            "linearisation": self.linearisation,
            "mask": self.mask,
            "truncated": self.truncated,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, repr=False)
class SAEDirections(Shown):
    """Each feature's unit decoder row d against a linear probe for `task` at the SAE's hidden state and the LEACE
    eraser for it there, both fitted as `bertscope probe` and `bertscope erase` fit them.

    `cosine[f]`: the largest |cos(d_f, w_c)| over the probe's classes c, with w_c the class's weights in the hidden
    state's own coordinates (the probe standardises each dimension: w_c = W[:, c] / std), and `best_class[f]` that
    class (`signs[f]` +1 where d_f points towards it). `erased[f]`: ‖Π d_f‖, Π the orthogonal projection onto the
    directions the eraser removes: the share of the feature's direction that lies in them (0 to 1). `edit[f]`: ‖P d_f‖,
    P the eraser's own oblique edit: what it takes from the feature's write per unit of activation.
    `read` counts the features with cosine ≥ READ_COSINE, `removed` those with erased ≥ ERASED_SHARE, both among the
    features that fired on the data (`alive`; every feature where None)."""

    directory: str
    model: str
    layer: int
    task: str
    d_sae: int
    classes: tuple[str, ...]
    cosine: np.ndarray  # [d_sae]
    best_class: np.ndarray  # [d_sae] class index
    signs: np.ndarray  # [d_sae] ±1
    erased: np.ndarray  # [d_sae]
    edit: np.ndarray  # [d_sae]
    rank: int  # directions the eraser removes
    probe_accuracy: float  # the probe's dev accuracy at this layer
    chance_cosine: float  # the 99th percentile of the max |cos| of random unit directions to the class directions
    chance_erased: float  # ... and of their ‖P d‖
    train_words: int
    dev_words: int
    alive: np.ndarray | None = None  # [d_sae] bool: fired on the data
    notes: tuple[str, ...] = ()

    def _counted(self, chosen: np.ndarray) -> int:
        return int((chosen & self.alive).sum()) if self.alive is not None else int(chosen.sum())

    @property
    def read(self) -> int:
        return self._counted(self.cosine >= READ_COSINE)

    @property
    def removed(self) -> int:
        return self._counted(self.erased >= ERASED_SHARE)

    @property
    def counted(self) -> int:
        return int(self.alive.sum()) if self.alive is not None else self.d_sae

    def summary(self) -> str:
        return (
            f"{self.d_sae:,} features at hidden state {self.layer} against {self.task}: {self.read:,} of {self.counted:,} read by the "
            f"probe (|cos| ≥ {READ_COSINE}), {self.removed:,} taken away by LEACE (≥ {ERASED_SHARE:.0%} of the direction in its "
            f"{self.rank} removed directions)"
        )

    def row(self, feature: int) -> dict[str, Any]:
        return {
            "feature": feature,
            "cosine": round(float(self.cosine[feature]), 6),
            "class": self.classes[int(self.best_class[feature])],
            "sign": int(self.signs[feature]),
            "erased": round(float(self.erased[feature]), 6),
            "edit": round(float(self.edit[feature]), 6),
            "fired": None if self.alive is None else bool(self.alive[feature]),
        }

    def table(self) -> list[dict[str, Any]]:
        """One row per feature, in feature order."""
        return [self.row(feature) for feature in range(self.d_sae)]

    def ranked(self, by: str = "cosine") -> list[int]:
        """The features that fired, the largest `by` ("cosine" or "erased") first."""
        values = self.cosine if by == "cosine" else self.erased
        order = np.argsort(-values, kind="stable")
        return [int(f) for f in order if self.alive is None or self.alive[f]]

    def as_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "model": self.model,
            "layer": self.layer,
            "task": self.task,
            "d_sae": self.d_sae,
            "classes": list(self.classes),
            "probe": {"dev_accuracy": _rounded(self.probe_accuracy), "train_words": self.train_words, "dev_words": self.dev_words},
            "eraser": {"kind": "leace", "rank": self.rank, "train_words": self.train_words},
            "read": self.read,
            "removed": self.removed,
            "counted": self.counted,
            "rule": {
                "read": f"max |cos(decoder row, class direction)| ≥ {READ_COSINE}",
                "removed": f"‖Π d‖ ≥ {ERASED_SHARE} (Π: the orthogonal projection onto the removed directions, d: the unit decoder row)",
                "counted": "the features that fired on the data" if self.alive is not None else "every feature",
            },
            "chance": {"cosine_p99": _rounded(self.chance_cosine), "erased_p99": _rounded(self.chance_erased), "draws": CHANCE_DRAWS},
            "features": self.table(),
            "notes": list(self.notes),
        }
