"""The two values an analysis runs with, each passed whole: what its passes run under, and how its job runs.

`Conditions` (the head mask, its ablation and an erased property) changes the numbers: equal conditions, the same
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
from bertscope.model.masks import Ablation, HeadMask

CacheDir = str | Path | Literal[False] | None  # where features and probes are cached; None: the default; False: no cache


def conditions_note(mask: str, ablation: str, erasure: LiveErasure | None = None) -> str:
    """What a run's passes were changed by, as its lines end: " · mask 0:3 (zero) · upos erased @4", or ""."""
    return (f" · mask {mask} ({ablation})" if mask else "") + (f" · {erasure.short()}" if erasure is not None else "")


@dataclass(frozen=True)
class Conditions:
    """What a run's passes happen under: the heads switched off (`mask`), how (`ablation`), and a property erased
    live (`erasure`: the explorer's `E`; the backend that fitted its eraser applies it). Equal values: the same passes.
    """

    mask: HeadMask
    ablation: Ablation = "zero"
    erasure: LiveErasure | None = None

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
        return bool(len(self.mask)) or self.erasure is not None

    def note(self) -> str:
        return conditions_note(self.mask.spec(), self.ablation, self.erasure)


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
