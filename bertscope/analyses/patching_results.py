"""What activation patching found, as plain data (numpy, no torch) for the CLI and the UI."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

METRICS = ("mlm", "class", "probe", "preserve", "embedding", "label", "answer")
"""What is measured: an MLM answer's logit difference, a classifier's, a probe's, how well the clean output is preserved
(its hidden states, or its pooled sentence embedding), a token classifier's label difference at a word, or a QA model's
span score difference."""
SWEEPS = ("heads", "layers", "positions")
"""What is patched: each head's output; each layer's attention and feed-forward writes; the residual stream per position."""
DIRECTIONS = ("denoise", "noise")
"""denoise: clean activations into the corrupted run (what restores the behaviour); noise: corrupted into clean (what breaks it)."""
COMPONENTS = ("attention", "feed_forward")
INPUT_CHARACTERS = 120  # a figure names each input in at most this many characters

EFFECTS = {
    "denoise": "(m(patched) - m(corrupt)) / (m(clean) - m(corrupt)): the share of the behaviour the clean activation restores",
    "noise": "(m(clean) - m(patched)) / (m(clean) - m(corrupt)): the share of the behaviour the corrupted activation destroys",
}


@dataclass(frozen=True)
class PatchMetric:
    """What patching measures, m: `name` mlm (`answers` A,B at the [MASK]: logit A - logit B; default the clean and
    the corrupted input's top guesses), class (a sequence classifier's `classes` A,B), probe (a linear probe for
    `task`, trained on `data` as `attribute`'s probe is, at `probe_layer` or its best layer; `classes` A,B of the
    task), preserve (minus the squared distance of the final hidden states to the clean run's; any model), embedding
    (the cosine of the sentence embedding, pooled as the model's sentence-transformers files say, to the clean run's;
    any model), label (a token classifier's `classes` A,B at `word`, by index or text; default the labels of the clean
    and the corrupted run there, and the first word the inputs differ at), answer (a QA model's start + end logit of the
    clean run's answer span minus that of the corrupted run's, or of the clean runner-up where they agree)."""

    name: str = "preserve"
    answers: tuple[str, ...] | None = None
    classes: tuple[str, ...] | None = None
    task: str | None = None
    data: str | Path | None = None
    probe_layer: int | None = None
    word: int | str | None = None


@dataclass(frozen=True, repr=False)
class PatchingResult(Shown):
    """Normalised effects of patching each component (1: it carries all of the difference, 0: none of it)."""

    metric: str
    metric_description: str  # what m is, e.g. "logit(is) - logit(are) at the [MASK] (position 6)"
    direction: str
    tokens: tuple[str, ...]  # the clean input's tokens
    corrupt_tokens: tuple[str, ...]
    differing: tuple[int, ...]  # token positions where the inputs differ
    clean_metric: float
    corrupt_metric: float
    heads: np.ndarray | None = None  # [L, H]: the head's output patched at every position
    head_positions: np.ndarray | None = None  # [L, H, T]: at one position (when asked for)
    layers: np.ndarray | None = None  # [L, 2]: the layer's attention write, its feed-forward write
    positions: np.ndarray | None = None  # [L+1, T]: the hidden state (0 = embedding output) at one position
    notes: tuple[str, ...] = ()
    clean_text: str = ""  # the inputs as given (a pair's second text after " / "), for the figure to name them
    corrupt_text: str = ""

    def summary(self) -> str:
        parts = [f"{self.metric_description} · {self.direction}", f"clean {self.clean_metric:.4g}, corrupted {self.corrupt_metric:.4g}"]
        strongest = max(self.table(), key=lambda row: abs(row["effect"]) if row["effect"] is not None else -1.0, default=None)
        if strongest is not None:
            where = ", ".join(f"{key} {strongest[key]}" for key in strongest if key != "effect")
            parts.append(f"largest effect {strongest['effect']:.3f} ({where})")
        return " · ".join(parts)

    def table(self) -> list[dict[str, Any]]:
        """One row per patched component: each head, each layer's attention and feed-forward, or each position."""
        if self.heads is not None:
            return [{"layer": layer, "head": head, "effect": _rounded(effect)} for (layer, head), effect in np.ndenumerate(self.heads)]
        if self.layers is not None:
            return [
                {"layer": layer, "component": COMPONENTS[component], "effect": _rounded(effect)}
                for (layer, component), effect in np.ndenumerate(self.layers)
            ]
        if self.positions is not None:
            return [
                {"layer": layer, "position": position, "token": self.tokens[position], "effect": _rounded(effect)}
                for (layer, position), effect in np.ndenumerate(self.positions)
            ]
        return []

    def figure(self, sweep: str | None = None) -> Figure:
        """The effects of one sweep on a diverging scale centred on 0: "heads" (layer × head), "layers" (attention and
        feed-forward writes per layer) or "positions" (the residual stream, Meng et al.'s map). Default: the first run."""
        swept = {"heads": self.heads, "layers": self.layers, "positions": self.positions}
        sweep = sweep or next((name for name in SWEEPS if swept[name] is not None), None)
        values = swept.get(sweep or "")
        if values is None:
            ran = ", ".join(name for name in SWEEPS if swept[name] is not None) or "none"
            raise InputError(f"this run did not patch {sweep or 'anything'} (it swept {ran}): nothing to draw", setting="sweep")
        label = "effect (share of m(clean) − m(corrupt))"
        how = "clean into corrupted: the share restored" if self.direction == "denoise" else "corrupted into clean: the share destroyed"
        note = f"{self.inputs()}\n{self.direction} ({how}); m = {self.metric_description}"
        if sweep == "positions":
            from bertscope.figures.heatmaps import residual_map

            return residual_map(values, self.tokens, label=label, differing=self.differing, note=note)
        from bertscope.figures.grids import GridAxes, head_grid

        if sweep == "layers":
            columns = GridAxes(tuple(component.replace("_", "-") for component in COMPONENTS), xlabel="")
            return head_grid(values, label, title="patching each layer's writes", note=note, signed=True, axes=columns)
        return head_grid(values, label, title="patching each head's output", note=note, signed=True)

    def inputs(self) -> str:
        """Which inputs were patched, as a figure names them: 'clean "…" · corrupted "…"' (the tokens where the texts
        were not kept)."""
        texts = (self.clean_text or " ".join(self.tokens), self.corrupt_text or " ".join(self.corrupt_tokens))
        clean, corrupt = (text if len(text) <= INPUT_CHARACTERS else text[: INPUT_CHARACTERS - 1] + "…" for text in texts)
        return f'clean "{clean}" · corrupted "{corrupt}"'

    def as_json(self) -> dict[str, Any]:
        payload = {
            "metric": self.metric,
            "metric_description": self.metric_description,
            "direction": self.direction,
            "effect": EFFECTS[self.direction],
            "tokens": list(self.tokens),
            "corrupt_tokens": list(self.corrupt_tokens),
            "differing_positions": list(self.differing),
            "clean_metric": round(self.clean_metric, 6),
            "corrupt_metric": round(self.corrupt_metric, 6),
            "notes": list(self.notes),
        }
        if self.heads is not None:
            heads = []
            for (layer, head), effect in np.ndenumerate(self.heads):
                entry = {"layer": layer, "head": head, "effect": _rounded(effect)}
                if self.head_positions is not None:
                    entry["positions"] = [_rounded(value) for value in self.head_positions[layer, head]]
                heads.append(entry)
            payload["heads"] = heads
        if self.layers is not None:
            payload["layers"] = [
                {"layer": layer, "component": COMPONENTS[component], "effect": _rounded(effect)}
                for (layer, component), effect in np.ndenumerate(self.layers)
            ]
        if self.positions is not None:
            payload["positions"] = [
                {"layer": layer, "position": position, "token": self.tokens[position], "effect": _rounded(effect)}
                for (layer, position), effect in np.ndenumerate(self.positions)
            ]
        return payload


def _rounded(value: float) -> float | None:
    return None if not np.isfinite(value) else round(float(value), 6)
