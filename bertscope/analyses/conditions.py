"""The two values an analysis runs with, each passed whole: what its passes run under, and how its job runs.

`Conditions` (the head mask, its ablation, an erased property and switched SAE features) changes the numbers: equal conditions, the same
passes. `JobOptions` (batch size, seed, cache, cancel) says how a corpus job goes about it. The public API builds
both once from its flat keywords (`mask=`, `ablation=`, `batch_size=`, `seed=`, `cache_dir=`, `cancel=`), and the
core and its helpers take them as they are, so that a new condition or option is one edit here and at that edge,
not one in every signature between. Torch-free, like the result types: the explorer holds and builds them too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bertscope.analyses.erasure_results import LiveErasure
from bertscope.analyses.sae.results import LiveFeatures
from bertscope.model.masks import Ablation, HeadMask

CacheDir = str | Path | Literal[False] | None  # where features and probes are cached; None: the default; False: no cache


def conditions_note(mask: str, ablation: str, erasure: LiveErasure | LiveEdits | None = None) -> str:
    """What a run's passes were changed by, as its lines end: " · mask 0:3 (zero) · upos erased @4 · sae@3 off 12", or ""."""
    return (f" · mask {mask} ({ablation})" if mask else "") + (f" · {erasure.short()}" if erasure is not None else "")


@dataclass(frozen=True)
class LiveEdits:
    """What a backend changes inside every pass by hooks it holds: a property erased (`E`) and SAE features switched
    (the features screen). Where both are at one hidden state, the features are switched first, on the state as the
    model makes it (the one the SAE was trained on), and the property is erased from the result. The explorer hands
    this (or a bare `LiveErasure`) to the backend's passes; None of either: the passes as the model runs them."""

    erasure: LiveErasure | None = None
    features: LiveFeatures | None = None

    @property
    def layer(self) -> int:
        """The lowest hidden state edited: the layers from there up see the change."""
        return min(edit.layer for edit in (self.erasure, self.features) if edit is not None)

    def short(self) -> str:
        return " · ".join(edit.short() for edit in (self.erasure, self.features) if edit is not None)

    def describe(self) -> str:
        return "; ".join(edit.describe() for edit in (self.erasure, self.features) if edit is not None)


def live_edits(erasure: LiveErasure | None, features: LiveFeatures | None) -> LiveEdits | None:
    """Both as one value for a backend's passes, or None where neither changes anything."""
    return LiveEdits(erasure, features) if erasure is not None or features is not None else None


@dataclass(frozen=True)
class Conditions:
    """What a run's passes happen under: the heads switched off (`mask`), how (`ablation`), a property erased live
    (`erasure`: the explorer's `E`; the backend that fitted its eraser applies it) and SAE features switched off or
    clamped (`features`: the explorer's features screen; the backend that opened the SAE applies it). Equal values:
    the same passes.
    """

    mask: HeadMask
    ablation: Ablation = "zero"
    erasure: LiveErasure | None = None
    features: LiveFeatures | None = None

    @classmethod
    def none(cls, num_layers: int, num_heads: int) -> Conditions:
        """The model as it is."""
        return cls(HeadMask.none(num_layers, num_heads))

    @property
    def masked(self) -> HeadMask | None:
        """The mask where it switches a head off, else None."""
        return self.mask if len(self.mask) else None

    @property
    def changed(self) -> bool:
        """Whether the passes differ from the model as it is."""
        return bool(len(self.mask)) or self.live is not None

    @property
    def live(self) -> LiveEdits | None:
        """The erasure and the switched features, what a backend applies by hooks in every pass (None: neither)."""
        return live_edits(self.erasure, self.features)

    def note(self) -> str:
        return conditions_note(self.mask.spec(), self.ablation, self.live)


@dataclass(frozen=True)
class JobOptions:
    """How a job runs, apart from what it computes: sentences per forward pass (`batch_size`, None: as many as fit the
    batch caps), the `seed` of its samples, splits and fits, where features and probes are cached (`cache_dir`) and the
    event that stops it (`cancel`: set, the job ends soon, at a batch or a fit step)."""

    batch_size: int | None = None
    seed: int = 0
    cache_dir: CacheDir = None
    cancel: threading.Event | None = None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()
