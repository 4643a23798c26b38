"""How far a head mask moves the model's representations (numpy only, so the UI can use it)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt


def layer_cosines(masked: np.ndarray, plain: np.ndarray) -> npt.NDArray[np.float32]:
    """Per hidden-state layer, the mean cosine similarity of each token's masked and plain vectors.

    Both are `[L+1, T, D]`; the result is `[L+1]`, 1.0 where the mask changed nothing.
    """
    dot = (masked * plain).sum(-1)
    norms = np.linalg.norm(masked, axis=-1) * np.linalg.norm(plain, axis=-1)
    cosine = np.where(norms > 0, dot / np.maximum(norms, 1e-12), 1.0)
    return cast(npt.NDArray[np.float32], cosine.mean(-1).astype(np.float32))


def softmax(logits: np.ndarray) -> npt.NDArray[np.floating[Any]]:
    shifted = logits - logits.max(-1, keepdims=True)
    exp = np.exp(shifted)
    return cast(npt.NDArray[np.floating[Any]], exp / exp.sum(-1, keepdims=True))
