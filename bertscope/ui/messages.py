"""Messages the explorer's workers post to the UI thread (named as past events)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from textual.message import Message

from bertscope.analyses.conditions import LiveEdits
from bertscope.analyses.mixing.results import Mixing
from bertscope.model.labels import token_labels
from bertscope.model.results import ForwardResult, MaskPrediction
from bertscope.model.task_results import TaskPrediction
from bertscope.ui.backend import Backend


class ModelLoaded(Message):
    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend


class ModelLoadFailed(Message):
    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


@dataclass(frozen=True)
class LayerMaps:
    """One layer's maps `[H, T, T]` of a long input, whose every layer's would not fit in memory."""

    weights: np.ndarray  # under the mask
    norms: np.ndarray
    plain_weights: np.ndarray | None  # before masking: only where a head of this layer is masked
    plain_norms: np.ndarray | None


@dataclass(frozen=True, eq=False)
class Analysis:
    """Everything the views show for one sentence under one mask."""

    plain: ForwardResult  # no heads masked
    current: ForwardResult  # under the current mask (the same object when nothing is masked)
    cosines: np.ndarray  # [L+1] masked vs plain hidden states
    figures: dict[str, np.ndarray]  # per-head figures of `current`, each [L, H]
    predictions_plain: list[MaskPrediction]
    predictions_current: list[MaskPrediction]
    # A long input's maps: the shown layer's only (the results then hold no `attentions`); empty otherwise.
    layers: dict[int, LayerMaps] = field(default_factory=dict)
    erasure: LiveEdits | None = None  # the property erased (`E`) and SAE features switched (`F`) in `current`'s pass, if any
    # The context-mixing measures computed for this sentence and mask (`n` in the layer view), by method.
    mixing: dict[str, Mixing] = field(default_factory=dict)
    # A fine-tuned model's prediction (labels, answer, cosine; ui.task_pane) as it is and under the mask and erasure.
    task_plain: TaskPrediction | None = None
    task_current: TaskPrediction | None = None

    @functools.cached_property
    def labels(self) -> tuple[str, ...]:
        """The tokens as the views label them: their text, word pieces marked `##` for every family (model.labels)."""
        return token_labels(self.current.tokens, self.current.encoding.special)

    @property
    def every_layer(self) -> bool:
        """Whether the results hold every layer's maps (a short input), or only `layers` has maps."""
        return self.current.attentions is not None

    def maps(self, layer: int, *, plain: bool = False, norms: bool = False) -> np.ndarray | None:
        """One layer's weights (or norms) `[H, T, T]`, under the mask or before it; None while a long input's
        layer is not computed yet."""
        if self.every_layer:
            result = self.plain if plain else self.current
            stack = result.norms if norms else result.attentions
            return None if stack is None else stack[layer]
        found = self.layers.get(layer)
        if found is None:
            return None
        if plain and found.plain_weights is not None:
            return found.plain_norms if norms else found.plain_weights
        return found.norms if norms else found.weights
