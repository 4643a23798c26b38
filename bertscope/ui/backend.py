"""What the explorer needs from a model, as a protocol the core `Session` satisfies.

The app receives a function that opens a backend (the CLI passes one that loads a core
`Session`); tests pass a fake that returns fixed arrays, so the UI never imports torch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from bertscope.core.model.masks import Ablation, HeadMask
from bertscope.core.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo

if TYPE_CHECKING:  # the types only: core.analyses.patterns itself imports torch
    from bertscope.core.analyses.attribution_results import AttributionProgress, Target
    from bertscope.core.analyses.geometry_results import ComparisonProgress, GeometryProgress
    from bertscope.core.analyses.patterns import PatternProgress
    from bertscope.core.analyses.probing import ProbeProgress
    from bertscope.core.data.corpus import Sentence


class Backend(Protocol):
    num_layers: int
    num_heads: int
    max_length: int

    @property
    def info(self) -> ModelInfo: ...

    def encode(self, text: str, pair: str | None = None) -> Encoding: ...

    def forward(
        self,
        text: Encoding,
        pair: str | None = None,
        *,
        attentions: bool = False,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        reuse: ForwardResult | None = None,
    ) -> ForwardResult: ...

    def mask_predictions(self, result: ForwardResult, top: int = 5) -> list[MaskPrediction]: ...

    def attention_patterns(
        self, sentences: Iterable[Sentence], *, mask: HeadMask | None = None, ablation: Ablation = "zero",
        cancel: threading.Event | None = None,
    ) -> Iterator[PatternProgress]: ...

    def probe(
        self, task: str, train: list[Sentence], dev: list[Sentence] | None = None, test: list[Sentence] | None = None, *,
        mask: HeadMask | None = None, ablation: Ablation = "zero", cancel: threading.Event | None = None, **options,
    ) -> Iterator[ProbeProgress]: ...

    def attribute(
        self, text: Encoding, pair: str | None = None, *, method: str = "integrated-gradients", target: Target | None = None,
        mask: HeadMask | None = None, ablation: Ablation = "zero", cancel: threading.Event | None = None, **options,
    ) -> Iterator[AttributionProgress]: ...

    def geometry(
        self, sentences: list[Sentence], *, mask: HeadMask | None = None, ablation: Ablation = "zero",
        cancel: threading.Event | None = None, **options,
    ) -> Iterator[GeometryProgress]: ...

    def compare(
        self, other: str, sentences: list[Sentence], *, cancel: threading.Event | None = None, **options,
    ) -> Iterator[ComparisonProgress]: ...
