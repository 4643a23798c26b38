"""Geometry and model-comparison results as plain data (numpy, no torch), for the CLI and the UI.

Computed by analyses.geometry.run and analyses.geometry.compare; kept apart so the explorer and its fake test
backend use them without importing torch. Layers follow hidden-state indexing: entry 0 is
the embedding output, entry l+1 the output of layer l.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

UNITS = ("token", "word", "sentence")
"""What a row of a geometry sample is: every token, a CoNLL-U word (its first sub-word), or a sentence (mean of its tokens)."""


def _number(value: float, digits: int = 6) -> float | None:
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


def _matrix(values: np.ndarray, digits: int = 6) -> list[list[float | None]]:
    return [[_number(v, digits) for v in row] for row in values]


@dataclass(frozen=True, eq=False, repr=False)
class GeometryResult(Shown):
    """Per layer over a corpus sample: PCA projection, CKA, TwoNN dimension, neighbourhood overlap."""

    unit: str  # token, word or sentence
    sentences: int
    seen: int  # rows of the corpus before sampling
    truncated: int
    projection: np.ndarray  # [L+1, n, 2] float32: the sample on each layer's first two principal components
    explained: np.ndarray  # [L+1, 2]: share of variance of PC1 and PC2
    labels: dict[str, tuple[str, ...]]  # label scheme -> one per sampled row
    texts: tuple[str, ...]  # what each sampled row stands for
    cka: np.ndarray  # [L+1, L+1] linear CKA
    cka_debiased: np.ndarray  # [L+1, L+1]
    intrinsic_dimension: np.ndarray  # [L+1] TwoNN
    duplicates: np.ndarray  # [L+1] duplicate rows left out of TwoNN
    neighbourhood_overlap: np.ndarray  # [L]: layer l with layer l+1
    neighbours: int  # k of the overlap
    seed: int
    mask: str = ""
    ablation: str = "zero"
    notes: tuple[str, ...] = ()

    @property
    def num_layers(self) -> int:
        """Hidden-state layers, the embeddings included (L+1)."""
        return len(self.intrinsic_dimension)

    @property
    def size(self) -> int:
        return len(self.texts)

    def summary(self) -> str:
        dimension = self.intrinsic_dimension
        highest = int(np.nanargmax(dimension))
        return (
            f"{self.size:,} {self.unit}s from {self.sentences:,} sentences · {self.num_layers} layers (0 = embeddings) · "
            f"intrinsic dimension {np.nanmin(dimension):.1f} to {np.nanmax(dimension):.1f}, highest at layer {highest} · "
            f"CKA of the embeddings with the last layer {self.cka[0, -1]:.2f}"
        )

    def table(self) -> list[dict[str, Any]]:
        """One row per hidden-state layer: intrinsic dimension, PCA variance, CKA and neighbours kept with the next layer."""
        last = self.num_layers - 1
        return [
            {
                "layer": layer,
                "intrinsic_dimension": float(self.intrinsic_dimension[layer]),
                "pc1_variance": float(self.explained[layer, 0]),
                "pc2_variance": float(self.explained[layer, 1]),
                "cka_next": float(self.cka[layer, layer + 1]) if layer < last else None,
                "neighbourhood_overlap_next": float(self.neighbourhood_overlap[layer]) if layer < last else None,
            }
            for layer in range(self.num_layers)
        ]

    def figure(self, kind: str = "scatter", layer: int | None = None, label: str | None = None, under: str | None = None) -> Figure:
        """`kind` "scatter": the sample on `layer`'s first two principal components (default: the last layer), coloured by
        `label` (default: the first scheme it has); "cka": linear CKA layer × layer; "dimension": the TwoNN intrinsic
        dimension per layer. `under` ends the figure's note: what the passes ran under (" · mask 0:3 (zero) · upos erased
        @4"); by default the result's mask."""
        ran = (f" · mask {self.mask} ({self.ablation})" if self.mask else "") if under is None else under
        if kind == "cka":
            from bertscope.figures.heatmaps import cka_matrix

            return cka_matrix(self.cka, note=f"on {self.size:,} {self.unit}s from {self.sentences:,} sentences{ran}")
        if kind == "dimension":
            from bertscope.figures.curves import layer_curve

            note = f"TwoNN (Facco et al. 2017) on {self.size:,} {self.unit}s{ran}"
            return layer_curve(self.intrinsic_dimension, "intrinsic dimension (TwoNN)", title="intrinsic dimension per layer", note=note)
        if kind != "scatter":
            raise InputError(f"no figure {kind!r} of a geometry: choose scatter, cka or dimension", setting="kind")
        from bertscope.figures.scatter import pca_scatter

        layer = self.num_layers - 1 if layer is None else layer
        if not 0 <= layer < self.num_layers:
            last = self.num_layers - 1
            raise InputError(f"layer {layer} is out of range: hidden-state layers are 0 (embeddings) to {last}", setting="layer")
        label = label if label is not None else next(iter(self.labels), None)
        if label is not None and label not in self.labels:
            have = ", ".join(self.labels) or "none"
            raise InputError(f"these {self.unit}s have no label {label!r}; labels here: {have}", setting="label")
        title = f"layer {layer}: PCA of {self.size:,} {self.unit}s" + (f", by {label}" if label else "")
        labels = self.labels[label] if label is not None else None
        ran_under = ran.removeprefix(" · ") or None
        return pca_scatter(self.projection[layer], labels, explained=self.explained[layer], title=title, legend_title=label, note=ran_under)

    def as_json(self, model: str, *, points: bool = False) -> dict[str, Any]:
        layers = []
        for layer in range(self.num_layers):
            entry: dict[str, Any] = {
                "layer": layer,
                "intrinsic_dimension": _number(self.intrinsic_dimension[layer], 4),
                "duplicates": int(self.duplicates[layer]),
                "pca_explained": [_number(v) for v in self.explained[layer]],
                "neighbourhood_overlap_next": _number(self.neighbourhood_overlap[layer]) if layer < self.num_layers - 1 else None,
            }
            if points:
                entry["points"] = [[round(float(x), 5), round(float(y), 5)] for x, y in self.projection[layer]]
            layers.append(entry)
        payload = {
            "model": model,
            "unit": self.unit,
            "sentences": self.sentences,
            "rows_seen": self.seen,
            "rows_sampled": self.size,
            "seed": self.seed,
            "neighbours": self.neighbours,
            "layers": layers,
            "cka": _matrix(self.cka),
            "cka_debiased": _matrix(self.cka_debiased),
            "intrinsic_dimension": [_number(v, 4) for v in self.intrinsic_dimension],
            "neighbourhood_overlap": [_number(v) for v in self.neighbourhood_overlap],
            "notes": list(self.notes),
        }
        if self.mask:
            payload |= {"mask": self.mask, "ablation": self.ablation}
        if points:
            payload["rows"] = [
                {"text": text, **{name: values[i] for name, values in self.labels.items()}} for i, text in enumerate(self.texts)
            ]
        return payload


@dataclass(frozen=True)
class ProbeDifference:
    """One probing task scored on every layer of both models."""

    task: str
    metric: str
    a: tuple[float, ...]
    b: tuple[float, ...]

    def as_json(self) -> dict[str, Any]:
        layers = []
        for layer in range(max(len(self.a), len(self.b))):
            a = self.a[layer] if layer < len(self.a) else float("nan")
            b = self.b[layer] if layer < len(self.b) else float("nan")
            layers.append({"layer": layer, "a": _number(a), "b": _number(b), "difference": _number(b - a)})
        return {"task": self.task, "metric": self.metric, "layers": layers}


@dataclass(frozen=True, eq=False, repr=False)
class ComparisonResult(Shown):
    """Model A against model B (same tokenizer) over a corpus.

    `head_cosine` `[L, H]` is the cosine similarity of each head's attention map in A and in
    B, per sentence over its real tokens, averaged over sentences (Kovaleva et al. 2019,
    Fig. 4); None when the two models' layer × head shapes differ. `cka` is
    `[L_A+1, L_B+1]` between the hidden-state layers, on the same sampled rows.
    """

    model_a: str
    model_b: str
    sentences: int
    tokens: int
    unit: str
    rows_sampled: int
    head_cosine: np.ndarray | None
    head_cosine_std: np.ndarray | None
    cka: np.ndarray
    cka_debiased: np.ndarray
    probes: tuple[ProbeDifference, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def layer_cosine(self) -> np.ndarray | None:
        return None if self.head_cosine is None else self.head_cosine.mean(axis=1)

    def matched_cka(self) -> np.ndarray | None:
        """CKA of layer l of A with layer l of B (None when the depths differ)."""
        rows, cols = self.cka.shape
        return np.diagonal(self.cka).copy() if rows == cols else None

    def summary(self) -> str:
        parts = [f"{self.model_a} against {self.model_b}", f"{self.sentences:,} sentences"]
        if self.head_cosine is not None:
            parts.append(f"attention cosine {float(self.head_cosine.mean()):.3f} on average, lowest {float(self.head_cosine.min()):.3f}")
        matched = self.matched_cka()
        if matched is not None:
            parts.append(f"CKA of matching layers {float(matched.min()):.2f} to {float(matched.max()):.2f}")
        return " · ".join(parts)

    def table(self) -> list[dict[str, Any]]:
        """One row per head (attention cosine and its spread), or per layer (CKA) when the shapes differ."""
        if self.head_cosine is None or self.head_cosine_std is None:
            return [{"layer_a": a, "layer_b": b, "cka": float(value)} for (a, b), value in np.ndenumerate(self.cka)]
        return [
            {"layer": layer, "head": head, "attention_cosine": float(value), "std": float(self.head_cosine_std[layer, head])}
            for (layer, head), value in np.ndenumerate(self.head_cosine)
        ]

    def figure(self, kind: str | None = None) -> Figure:
        """`kind` "cosine": each head's attention cosine between A and B (Kovaleva et al. 2019, Fig. 4); "cka": linear
        CKA between A's layers and B's. Default: the cosine where the two have the same heads, else CKA."""
        kind = kind or ("cosine" if self.head_cosine is not None else "cka")
        a, b = Path(self.model_a).name or self.model_a, Path(self.model_b).name or self.model_b
        if kind == "cka":
            from bertscope.figures.heatmaps import cka_matrix

            return cka_matrix(self.cka, rows=f"A: {a} · layer", columns=f"B: {b} · layer", title="linear CKA, A × B")
        if kind != "cosine":
            raise InputError(f"no figure {kind!r} of a comparison: choose cosine or cka", setting="kind")
        if self.head_cosine is None:
            raise InputError("the two models have different heads: no cosine per head to draw; draw kind='cka'", setting="kind")
        from bertscope.figures.grids import head_grid

        return head_grid(
            self.head_cosine,
            "cosine of the head's attention in A and B",
            title=f"A: {a} against B: {b}",
            note=f"mean over {self.sentences:,} sentences",
            vmax=1.0,
        )

    def as_json(self) -> dict[str, Any]:
        heads = []
        if self.head_cosine is not None:
            assert self.head_cosine_std is not None  # the spreads come with the cosines
            for layer, row in enumerate(self.head_cosine):
                for head, value in enumerate(row):
                    heads.append(
                        {
                            "layer": layer,
                            "head": head,
                            "attention_cosine": _number(value),
                            "std": _number(self.head_cosine_std[layer, head]),
                        }
                    )
        matched = self.matched_cka()
        layer_cosine = self.layer_cosine()
        layers = [
            {"layer": layer, "cka": _number(matched[layer]) if matched is not None else None} for layer in range(self.cka.shape[0])
        ]  # hidden-state indexing: 0 = embeddings
        attention_layers = (
            []
            if layer_cosine is None
            else [{"layer": layer, "mean_attention_cosine": _number(value)} for layer, value in enumerate(layer_cosine)]
        )
        return {
            "model_a": self.model_a,
            "model_b": self.model_b,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "unit": self.unit,
            "rows_sampled": self.rows_sampled,
            "heads": heads,
            "attention_layers": attention_layers,
            "layers": layers,
            "cka": _matrix(self.cka),
            "cka_debiased": _matrix(self.cka_debiased),
            "probes": [probe.as_json() for probe in self.probes],
            "notes": list(self.notes),
        }
