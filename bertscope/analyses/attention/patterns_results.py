"""Corpus-level attention statistics (Kovaleva et al. 2019's pattern classes, Clark et al. 2019's attention to
[CLS], [SEP] and punctuation), as plain data (numpy, no torch). Computed by analyses.attention.patterns; kept apart
so the CLI's output and the UI can name them without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown
from bertscope.model.masks import Ablation, HeadMask

if TYPE_CHECKING:
    from matplotlib.figure import Figure


PATTERNS = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
"""Attention pattern classes after Kovaleva et al. 2019 (how they are told apart: analyses.attention.patterns)."""
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
"""Which value-weighted norm bertscope computes (model.norms), for outputs that must say so."""


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
