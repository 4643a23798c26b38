"""Sparse autoencoders' results as plain data (no torch): what training reports, and what reading the features finds.

Computed by analyses.sae.train and analyses.sae.features; kept apart so that the CLI, a notebook and the UI can
name them without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TARGET_TOKENS = 200_000  # with no epochs given: read a small corpus again until training has seen this many tokens
MAX_EPOCHS = 40  # ... but no more epochs than this
# Gao et al.'s learning rate falls as 1/sqrt(width), 2e-4 at 16,384 latents with batches of 131,072 tokens; with
# the small corpora and batches here (256 tokens) six times that does better: on 1,350 sentences of UD EWT at
# hidden state 3 of all-MiniLM-L6-v2 (1,536 latents), 8 epochs reach a held-out FVU of 0.217 at 3.9e-3 and 0.231
# at 2e-3, where Gao et al.'s 6.5e-4 with batches of 1,024 reaches 0.302 at 16 epochs (benchmarks/README.md).
LR_AT_16K = 1.2e-3
PURE_PRECISION = 0.9  # a feature is label-pure when its best label takes this share of its firings
PURE_MIN_FIRINGS = 10  # ... and it fired at least this often (one firing is trivially pure)
PURE_MAX_SHARE = 0.5  # ... on a label of at most this share of the tokens (a word's first piece, most tokens, is no name)
LABEL_SCHEMES = ("upos", "deprel", "piece")  # piece: a word's first or an inner word piece
MAX_SWITCHED = 64  # features switched at once in the explorer: its status line and session file stay short


@dataclass(frozen=True)
class SAESettings:
    """How an SAE is trained: its shape, sparsity and optimisation, and which tokens and sentences it sees."""

    width: int | None = None  # d_sae; None: 4 × the hidden size
    k: int = 32
    epochs: int | None = None  # None: enough to see TARGET_TOKENS tokens, at most MAX_EPOCHS
    lr: float | None = None  # None: LR_AT_16K / sqrt(d_sae / 2**14), Gao et al.'s scaling law
    batch_tokens: int = 256  # tokens per optimiser step
    aux_coefficient: float = 1 / 32
    dead_after: int = 20_000  # tokens without firing after which a latent counts as dead for the AuxK loss
    held_out: float = 0.1  # the share of sentences held out for the figures
    include_special: bool = False

    def width_for(self, d_in: int) -> int:
        return self.width if self.width is not None else 4 * d_in

    def lr_for(self, d_sae: int) -> float:
        return self.lr if self.lr is not None else LR_AT_16K / math.sqrt(d_sae / 2**14)

    def check(self) -> None:
        """Refuse settings no SAE can be trained with (before any model loads: the CLI calls it first)."""
        if self.width is not None and self.width < 1:
            raise InputError(f"the width must be 1 or more, not {self.width}", setting="width")
        if self.k < 1 or (self.width is not None and self.k > self.width):
            raise InputError(f"k must be between 1 and the width ({self.width or '4 × the hidden size'}), not {self.k}", setting="k")
        if self.epochs is not None and self.epochs < 1:
            raise InputError(f"epochs must be 1 or more, not {self.epochs}", setting="epochs")
        if self.lr is not None and not self.lr > 0:
            raise InputError(f"the learning rate must be above 0, not {self.lr}", setting="lr")
        if not 0 < self.held_out < 1:
            raise InputError(f"the held-out share must be between 0 and 1, not {self.held_out}", setting="held_out")
        if self.batch_tokens < 1:
            raise InputError(f"the tokens per step must be 1 or more, not {self.batch_tokens}", setting="batch_tokens")


def _rounded(value: float | None, digits: int = 6) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), digits)


@dataclass(frozen=True, repr=False)
class SAETraining(Shown):
    """A TopK SAE trained on one hidden state (Gao et al. 2024), and how well it reconstructs held-out sentences.

    `fvu`: the fraction of variance unexplained, Σ‖x − x̂‖² / Σ‖x − x̄‖² over the held-out tokens; `l0` the mean
    number of features firing on a token; `dead_share` the share of features that never fired on the held-out
    tokens. Spliced into the model (hidden state `layer` replaced by x̂ at the SAE's tokens, the layers above run on
    it): `preserve` the mean cosine of the last hidden state to the unspliced pass over the real tokens, and with an
    MLM head `mlm_loss_recovered`, (L_zero − L_spliced) / (L_zero − L_clean), where L is the MLM head's
    cross-entropy of each token itself (the unmasked input) at the SAE's tokens and L_zero the loss with the hidden
    state zeroed there. `history`: per epoch, the running figures on the training tokens.
    """

    directory: str
    model: str
    layer: int
    d_in: int
    d_sae: int
    k: int
    epochs: int
    steps: int
    tokens_trained: int  # training tokens seen, every epoch counted
    sentences: int  # training sentences
    tokens: int  # training tokens in one epoch
    held_out_sentences: int
    held_out_tokens: int
    fvu: float
    l0: float
    dead_share: float
    preserve: float
    mlm_loss_recovered: float | None = None
    mlm_losses: dict[str, float] | None = None  # clean, spliced, zero-ablated
    history: tuple[dict[str, float], ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    truncated: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        parts = [
            f"{self.d_sae:,} features (k {self.k}) on hidden state {self.layer}",
            f"held-out FVU {self.fvu:.3f}",
            f"L0 {self.l0:.1f}",
            f"dead {self.dead_share:.1%}",
            f"preserve {self.preserve:.3f}",
        ]
        if self.mlm_loss_recovered is not None:
            parts.append(f"MLM loss recovered {self.mlm_loss_recovered:.1%}")
        return " · ".join(parts) + f" · {self.epochs} epochs, {self.tokens_trained:,} tokens"

    def table(self) -> list[dict[str, Any]]:
        """One row per epoch: the running FVU, L0 and dead share on the training tokens."""
        return [dict(row) for row in self.history]

    def figure(self) -> Figure:
        """How training went: the running FVU, L0 and dead share on the training tokens per epoch, the held-out
        figures starred at the last."""
        from bertscope.figures.dictionary import training_curves

        rows = self.history
        return training_curves(
            [row["epoch"] for row in rows],
            [row.get("fvu", math.nan) for row in rows],
            [row.get("l0", math.nan) for row in rows],
            [row.get("dead", math.nan) for row in rows],
            k=self.k,
            held_out=(self.fvu, self.l0, self.dead_share),
            dead_after=self.settings.get("dead_after"),
            title=f"SAE on hidden state {self.layer} · {self.d_sae:,} features, k {self.k}",
            note=f"{self.model} · {self.sentences:,} training sentences, {self.held_out_sentences:,} held out",
        )

    def figures(self) -> dict[str, Any]:
        """The held-out figures, as cfg.json and the JSON keep them."""
        return {
            "fvu": _rounded(self.fvu),
            "l0": _rounded(self.l0, 4),
            "dead_share": _rounded(self.dead_share),
            "preserve": _rounded(self.preserve),
            "mlm_loss_recovered": _rounded(self.mlm_loss_recovered),
            "mlm_losses": None if self.mlm_losses is None else {name: _rounded(value) for name, value in self.mlm_losses.items()},
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "model": self.model,
            "layer": self.layer,
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "k": self.k,
            "epochs": self.epochs,
            "steps": self.steps,
            "tokens_trained": self.tokens_trained,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "held_out_sentences": self.held_out_sentences,
            "held_out_tokens": self.held_out_tokens,
            "held_out": self.figures(),
            "history": list(self.history),
            "settings": self.settings,
            "truncated": self.truncated,
            "seconds": round(self.seconds, 3),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class FeatureContext:
    """A token a feature fired on, in its sentence: the sentence's tokens, which one, and how strongly."""

    activation: float
    sentence: int  # its number in the corpus
    position: int  # the token's place among the sentence's tokens
    tokens: tuple[str, ...]

    @property
    def token(self) -> str:
        return self.tokens[self.position]

    def window(self, width: int = 6) -> str:
        """The token in brackets with up to `width` tokens either side."""
        left = self.tokens[max(0, self.position - width) : self.position]
        right = self.tokens[self.position + 1 : self.position + 1 + width]
        return " ".join([*left, f"[[{self.token}]]", *right])

    def as_json(self) -> dict[str, Any]:
        return {
            "activation": round(self.activation, 6),
            "sentence": self.sentence,
            "position": self.position,
            "token": self.token,
            "context": " ".join(self.tokens),
        }


@dataclass(frozen=True)
class LabelMatch:
    """A feature's best-matching label: precision (the share of its firings on tokens with the label) and recall (the
    share of the label's tokens it fires on); the best is the label of the highest F1. `share`: the label's share of
    all tokens, the precision a feature firing at random would have."""

    scheme: str
    label: str
    precision: float
    recall: float
    share: float = 0.0

    def pure(self, firings: int) -> bool:
        """Whether the label names the feature: precision ≥ 0.9 over at least 10 firings, on a label of at most half
        of the tokens."""
        return self.precision >= PURE_PRECISION and firings >= PURE_MIN_FIRINGS and self.share <= PURE_MAX_SHARE

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "label": self.label,
            "precision": round(self.precision, 6),
            "recall": round(self.recall, 6),
            "share": round(self.share, 6),
        }


@dataclass(frozen=True, repr=False)
class SAEFeatures(Shown):
    """An SAE read on a corpus: how well it reconstructs it, and what each feature fires on.

    `fvu`, `l0`, `dead_share` as in `SAETraining`, on every chosen token of this corpus. Per feature: `density` the
    share of tokens it fires on, `top[f]` its most active tokens in context (highest first), `histogram[f]` the
    count of its activations in each bin of `bin_edges` (log-spaced, shared by all features; below the first edge
    in bin 0, above the last in the last). With a CoNLL-U corpus, `labels[f]` the best-matching label per scheme
    (UPOS, dependency relation, first or inner word piece) and `best[f]` the best of those, and `pure` the number
    of label-pure features: the best label of one of the schemes has precision ≥ 0.9 over at least 10 firings, and is
    a label of at most half of the tokens (`LabelMatch.pure`).
    """

    directory: str
    model: str
    layer: int
    d_sae: int
    k: int
    sentences: int
    tokens: int
    fvu: float
    l0: float
    dead_share: float
    density: np.ndarray  # [d_sae]
    top: tuple[tuple[FeatureContext, ...], ...]
    bin_edges: np.ndarray  # [bins + 1]
    histogram: np.ndarray  # [d_sae, bins]
    labels: tuple[dict[str, LabelMatch], ...] | None = None  # per feature: scheme -> its best label there
    best: tuple[LabelMatch | None, ...] | None = None
    pure: int | None = None
    truncated: int = 0
    notes: tuple[str, ...] = ()

    @property
    def alive(self) -> np.ndarray:
        """The features that fired on this corpus, most frequent first."""
        fired = np.flatnonzero(self.density > 0)
        return fired[np.argsort(-self.density[fired], kind="stable")]

    def ranked(self) -> list[int]:
        """The features that fired, the best-named first where there are labels (highest F1), else the most frequent."""
        alive: list[int] = self.alive.tolist()
        if self.best is not None:
            best = self.best
            alive.sort(key=lambda feature: -(best[feature].f1 if best[feature] is not None else 0.0))  # type: ignore[union-attr]
        return alive

    def summary(self) -> str:
        parts = [
            f"{self.d_sae:,} features on hidden state {self.layer}",
            f"{self.tokens:,} tokens of {self.sentences:,} sentences",
            f"FVU {self.fvu:.3f}",
            f"L0 {self.l0:.1f}",
            f"dead {self.dead_share:.1%}",
        ]
        if self.pure is not None:
            parts.append(f"{self.pure:,} label-pure (precision ≥ {PURE_PRECISION:g})")
        return " · ".join(parts)

    def row(self, feature: int) -> dict[str, Any]:
        """One feature as a table row: its density, its top token and activation, its best label."""
        top = self.top[feature]
        row: dict[str, Any] = {
            "feature": feature,
            "density": float(self.density[feature]),
            "top_token": top[0].token if top else "",
            "top_activation": top[0].activation if top else 0.0,
        }
        if self.best is not None:
            best = self.best[feature]
            row |= {
                "label": f"{best.scheme}:{best.label}" if best else "",
                "precision": best.precision if best else None,
                "recall": best.recall if best else None,
            }
        return row

    def figure(self, feature: int | None = None) -> Figure:
        """The spread of the features' densities, and `feature`'s activations (default: the first the report shows,
        the best-named where there are labels, else the most frequent)."""
        from bertscope.figures.dictionary import feature_activations

        if feature is None:
            ranked = self.ranked()
            feature = ranked[0] if ranked else 0
        if not 0 <= feature < self.d_sae:
            raise InputError(f"feature {feature} is out of range: the SAE has features 0 to {self.d_sae - 1}", setting="feature")
        best = self.best[feature] if self.best is not None else None
        label = f"{best.scheme}:{best.label} (precision {best.precision:.2f})" if best is not None else None
        return feature_activations(
            self.density,
            self.bin_edges,
            self.histogram[feature],
            feature=feature,
            label=label,
            title=f"SAE features on hidden state {self.layer} · {self.d_sae:,} features, k {self.k}",
            note=f"{self.model} · {self.tokens:,} tokens of {self.sentences:,} sentences",
        )

    def table(self) -> list[dict[str, Any]]:
        """One row per feature, in feature order."""
        return [self.row(feature) for feature in range(self.d_sae)]

    def as_json(self) -> dict[str, Any]:
        features = []
        for feature in range(self.d_sae):
            entry: dict[str, Any] = {
                "feature": feature,
                "density": round(float(self.density[feature]), 8),
                "top": [context.as_json() for context in self.top[feature]],
                "histogram": self.histogram[feature].tolist(),
            }
            if self.labels is not None and self.best is not None:
                best = self.best[feature]
                entry["best_label"] = best.as_json() if best else None
                entry["labels"] = {scheme: match.as_json() for scheme, match in self.labels[feature].items()}
            features.append(entry)
        return {
            "directory": self.directory,
            "model": self.model,
            "layer": self.layer,
            "d_sae": self.d_sae,
            "k": self.k,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "fvu": _rounded(self.fvu),
            "l0": _rounded(self.l0, 4),
            "dead_share": _rounded(self.dead_share),
            "pure": self.pure,
            "pure_rule": {"precision": PURE_PRECISION, "min_firings": PURE_MIN_FIRINGS, "max_label_share": PURE_MAX_SHARE}
            if self.pure is not None
            else None,
            "bin_edges": [float(edge) for edge in self.bin_edges],
            "features": features,
            "truncated": self.truncated,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class LiveFeatures:
    """SAE features switched off or clamped in every pass of the explorer (its features screen): which SAE, at which
    hidden state, and per feature None (off) or the value it is clamped to.

    The SAE itself (torch) stays with the backend that opened it (analyses.sae.switch applies it); the explorer holds
    this description and hands it back with each pass that should run switched. Equal values: the same passes.
    """

    directory: str
    layer: int  # hidden-state index: 0 the embeddings, l + 1 the output of layer l
    d_sae: int
    switched: tuple[tuple[int, float | None], ...] = ()  # (feature, None: off | clamp value), by feature

    def __post_init__(self) -> None:
        object.__setattr__(self, "switched", tuple(sorted(dict(self.switched).items())))
        for feature, value in self.switched:
            if not 0 <= feature < self.d_sae:
                raise InputError(f"feature {feature} is out of range: the SAE has features 0 to {self.d_sae - 1}", setting="features")
            if value is not None and not math.isfinite(value):
                raise InputError(f"a feature is clamped to a finite value, not {value}", setting="features")
        if len(self.switched) > MAX_SWITCHED:
            raise InputError(f"at most {MAX_SWITCHED} features can be switched at once, not {len(self.switched)}", setting="features")

    @property
    def values(self) -> dict[int, float | None]:
        return dict(self.switched)

    def with_(self, feature: int, value: float | None) -> LiveFeatures:
        """The same with `feature` switched off (None) or clamped to `value`."""
        return LiveFeatures(self.directory, self.layer, self.d_sae, tuple((self.values | {feature: value}).items()))

    def without(self, feature: int) -> LiveFeatures:
        """The same with `feature` as the model has it again."""
        return LiveFeatures(self.directory, self.layer, self.d_sae, tuple((f, v) for f, v in self.switched if f != feature))

    def short(self) -> str:
        """What a status line or a title says of it: "sae@3 off 12,40 · 7=2.5"."""
        off = [str(feature) for feature, value in self.switched if value is None]
        clamped = [f"{feature}={value:g}" for feature, value in self.switched if value is not None]
        parts = ([f"off {','.join(off)}"] if off else []) + ([f"clamp {','.join(clamped)}"] if clamped else [])
        return f"sae@{self.layer} " + (" ".join(parts) if parts else "nothing switched")

    def describe(self) -> str:
        count = len(self.switched)
        return f"{count} SAE feature{'s' if count != 1 else ''} switched at hidden state {self.layer} ({self.short()})"

    def spec(self) -> str:
        """How a session file keeps the switches: "12,40,7=2.5" (a bare number: off)."""
        return ",".join(str(feature) if value is None else f"{feature}={value!r}" for feature, value in self.switched)

    @staticmethod
    def parse_spec(spec: str) -> tuple[tuple[int, float | None], ...]:
        """`spec()` read back; one line where it is not one."""
        switched: list[tuple[int, float | None]] = []
        for part in filter(None, (part.strip() for part in spec.split(","))):
            feature, _, value = part.partition("=")
            try:
                switched.append((int(feature), float(value) if value else None))
            except ValueError:
                raise InputError(f"{part!r} is not a feature (12) or a clamped one (12=2.5)", setting="features") from None
        return tuple(switched)
