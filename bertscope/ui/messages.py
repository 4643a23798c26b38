"""Messages the explorer's workers post to the UI thread (named as past events)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from textual.message import Message

from bertscope.core.model.results import ForwardResult, MaskPrediction
from bertscope.ui.backend import Backend


class ModelLoaded(Message):
    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend


class ModelLoadFailed(Message):
    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


@dataclass(frozen=True, eq=False)
class Analysis:
    """Everything the views show for one sentence under one mask."""

    plain: ForwardResult  # no heads masked
    current: ForwardResult  # under the current mask (the same object when nothing is masked)
    cosines: np.ndarray  # [L+1] masked vs plain hidden states
    figures: dict[str, np.ndarray]  # per-head figures of `current`, each [L, H]
    predictions_plain: list[MaskPrediction]
    predictions_current: list[MaskPrediction]
