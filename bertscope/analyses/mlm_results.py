"""The masked-LM probes' result types (`fill`'s guesses per layer, LAMA-style cloze scores), as plain data (numpy,
no torch). Computed by analyses.mlm; kept apart so the CLI's output and the UI can name them without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.figures.notebook import Shown
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding, MaskPrediction

if TYPE_CHECKING:
    pass

PRECISION_AT = (1, 10)


@dataclass(frozen=True)
class Blank:
    """One [MASK]: the guesses at the output, at every hidden-state layer, and without the head mask."""

    position: int
    predictions: MaskPrediction
    layers: tuple[MaskPrediction, ...]  # [L+1], index 0 = embeddings; empty when not asked for
    unmasked: MaskPrediction | None = None  # the output's guesses with no head masked (when a mask is given)


@dataclass(frozen=True, repr=False)
class FillResult(Shown):
    encoding: Encoding
    blanks: tuple[Blank, ...]
    mask: HeadMask
    ablation: Ablation
    notes: tuple[str, ...] = ()  # what a person should be told (the text cut to fit)

    def summary(self) -> str:
        blanks = "; ".join(
            f"[MASK] at {blank.position}: "
            + ", ".join(f"{token} {p:.2f}" for token, p in zip(blank.predictions.tokens[:3], blank.predictions.probabilities[:3]))
            for blank in self.blanks
        )
        masked = f" · mask {self.mask.spec()} ({self.ablation})" if len(self.mask) else ""
        return f"{len(self.encoding)} tokens · {blanks}{masked}"

    def table(self) -> list[dict[str, Any]]:
        """One row per [MASK] and guess, best first: the position, rank, token and probability at the output."""
        return [
            {"position": blank.position, "rank": rank, "token": token, "probability": p}
            for blank in self.blanks
            for rank, (token, p) in enumerate(zip(blank.predictions.tokens, blank.predictions.probabilities), start=1)
        ]

    def as_json(self) -> dict[str, Any]:
        def guesses(prediction: MaskPrediction) -> list[dict[str, Any]]:
            return [{"token": token, "probability": round(p, 6)} for token, p in zip(prediction.tokens, prediction.probabilities)]

        masks = []
        for blank in self.blanks:
            entry = {"position": blank.position, "predictions": guesses(blank.predictions)}
            entry["layers"] = [{"layer": layer, "predictions": guesses(p)} for layer, p in enumerate(blank.layers)]
            if blank.unmasked is not None:
                entry["unmasked_predictions"] = guesses(blank.unmasked)
            masks.append(entry)
        return {"tokens": list(self.encoding.tokens), "mask": self.mask.spec(), "ablation": self.ablation, "masks": masks}


@dataclass(frozen=True)
class ClozeQuery:
    text: str  # with exactly one [MASK]
    answer: str
    location: str  # path:line


@dataclass(frozen=True, repr=False)
class ClozeResult(Shown):
    """Per hidden-state layer (0 = embeddings; the last is the model's output) precision at 1 and 10."""

    queries: int
    precision: dict[int, np.ndarray]  # k -> [L+1]
    answers: list[dict[str, Any]] = field(default_factory=list)  # per query: text, answer, the output's top guess, the answer's rank
    skipped: int = 0  # queries of the file not scored (malformed, or no one-token answer)
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        at_output = ", ".join(f"P@{k} {float(self.precision[k][-1]):.3f}" for k in PRECISION_AT)
        skipped = f" ({self.skipped:,} skipped)" if self.skipped else ""
        return f"{self.queries:,} queries{skipped} · at the output {at_output}"

    def table(self) -> list[dict[str, Any]]:
        """One row per hidden-state layer (0 = the embeddings, the last = the output): precision at 1 and 10."""
        num_layers = len(self.precision[PRECISION_AT[0]])
        return [{"layer": layer, **{f"p_at_{k}": float(self.precision[k][layer]) for k in PRECISION_AT}} for layer in range(num_layers)]

    def as_json(self) -> dict[str, Any]:
        num_layers = len(self.precision[PRECISION_AT[0]])
        layers = [
            {"layer": layer, **{f"p_at_{k}": round(float(self.precision[k][layer]), 6) for k in PRECISION_AT}}
            for layer in range(num_layers)
        ]
        final = {f"p_at_{k}": layers[-1][f"p_at_{k}"] for k in PRECISION_AT}
        return {"queries": self.queries, **final, "layers": layers, "answers": self.answers}
