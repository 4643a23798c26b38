"""What the explorer asks of a model: the one torch-free contract between the UI and the core.

The app receives a function that opens a backend: the CLI passes one that loads a model
(`bertscope.session_backend.SessionBackend`); tests pass a fake that returns fixed arrays
(`tests/fake_backend.py`), so the UI never imports torch. Every method the UI calls is
declared here with the options it may pass; `tests/test_backend_contract.py` checks that
both backends match it, name for name and default for default. Long work returns a
generator of `Progress` (core.progress) that stops early once `cancel` is set.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bertscope.core.analyses.attribution_results import Attribution, Target
from bertscope.core.analyses.erasure_results import LiveErasure
from bertscope.core.analyses.geometry_results import ComparisonResult, GeometryResult
from bertscope.core.analyses.importance_results import HeadImportance, Measurement, PruningCurve
from bertscope.core.analyses.mixing_results import Mixing
from bertscope.core.analyses.patching_results import PatchingResult
from bertscope.core.analyses.probing_results import ProbeKind, ProbeReport
from bertscope.core.analyses.syntax_results import SyntaxResult
from bertscope.core.model.masks import Ablation, HeadMask
from bertscope.core.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo, PatternResult
from bertscope.core.progress import Progress

if TYPE_CHECKING:
    from bertscope.core.data.corpus import Sentence


class Backend(Protocol):
    """A loaded model, as the explorer uses it."""

    num_layers: int
    num_heads: int

    @property
    def info(self) -> ModelInfo: ...

    # one sentence

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
        norms: bool = False,
        figures: bool = False,
        erasure: LiveErasure | None = None,
    ) -> ForwardResult:
        """`reuse`: the unmasked result of the same encoding, whose layers below the first masked one are kept.
        `erasure`: a property fitted by `fit_erasure`, erased inside the pass (then `reuse` is not used).
        `norms`: also the value-weighted norms ‖α f(x)‖ `[L, H, T, T]` (Kobayashi et al. 2020), from the same pass.
        `figures`: the result's `figures` holds each head's figures `[L, H]` (core.analyses.headstats), reduced
        layer by layer, so they come without `attentions` too (with `reuse`, which must then carry its own)."""
        ...

    def layer_maps(
        self,
        text: Encoding,
        layer: int,
        *,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        start_from: ForwardResult | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One layer's attention weights and value-weighted norms `[H, T, T]`, where holding every layer's would not
        fit (a long input). `start_from`: a `forward` result of the same input, mask and ablation, whose hidden
        state entering `layer` lets the layer run alone."""
        ...

    def mask_predictions(self, result: ForwardResult, top: int = 5) -> list[MaskPrediction]: ...

    def mixing(
        self,
        text: Encoding,
        *,
        method: str = "value-zeroing",
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[Mixing]]:
        """One context-mixing measure of the input (core.analyses.mixing: value zeroing, ALTI, flow, ...), every layer's
        and rolled out, under `mask`; flow's first step says how long a long input will take."""
        ...

    def attribute(
        self,
        text: Encoding,
        pair: str | None = None,
        *,
        method: str = "integrated-gradients",
        target: Target | None = None,
        steps: int | None = None,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[Attribution]]: ...

    def fit_erasure(
        self, task: str, layer: int, sentences: list[Sentence], *, cancel: threading.Event | None = None
    ) -> Iterator[Progress[LiveErasure]]:
        """LEACE for `task` at hidden state `layer` (Belrose et al. 2023; core.analyses.erasure), fitted on `sentences` on the
        model as it is; the backend keeps the eraser, and the passes given the result's description run with it."""
        ...

    # a corpus

    def attention_patterns(
        self,
        sentences: Iterable[Sentence],
        *,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        norms: bool = False,
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[PatternResult]]:
        """Each item's `partial` holds the statistics so far; `norms` adds the shares of value-weighted norms. `erasure`
        (as in `forward`, here and in the other corpus analyses that take a mask) runs every pass with it."""
        ...

    def syntax_heads(
        self,
        sentences: Iterable[Sentence],
        *,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[SyntaxResult]]:
        """Heads that track dependency relations over a treebank (Clark et al. §4); each item's `partial` holds the counts so far."""
        ...

    def probe(
        self,
        task: str,
        train: list[Sentence],
        dev: list[Sentence] | None = None,
        test: list[Sentence] | None = None,
        *,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        kind: ProbeKind = "linear",
        mdl: bool = False,
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[ProbeReport]]:
        """Without `dev` and `test`, they are split off `train` (or taken from its sentences' own split). `mdl`: each layer's
        description length too (Voita & Titov 2020's online code, and the control task's: core.analyses.mdl)."""
        ...

    def geometry(
        self,
        sentences: list[Sentence],
        *,
        unit: str = "auto",
        max_rows: int | None = None,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[GeometryResult]]: ...

    def compare(
        self,
        other: str,
        sentences: list[Sentence],
        *,
        unit: str = "token",
        max_rows: int | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[ComparisonResult]]:
        """`other`: model B, a directory or a cached Hugging Face name, loaded beside this one."""
        ...

    # head importance for an objective ("mlm", "preserve", ...) over a corpus

    def head_importance(
        self,
        objective: str,
        sentences: list[Sentence],
        *,
        method: str = "gradient",
        ablation: Ablation = "zero",
        normalize: bool = True,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[HeadImportance]]: ...

    def measure_objective(
        self,
        objective: str,
        sentences: list[Sentence],
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
    ) -> Measurement:
        """The objective under `mask` and `erasure` (what it compares with, the model as it is); quick to repeat for the
        same objective and sentences (the explorer's toggles)."""
        ...

    def pruning_curve(
        self,
        objective: str,
        sentences: list[Sentence],
        *,
        importance: HeadImportance | None = None,
        ablation: Ablation = "zero",
        step: float = 0.1,
        reestimate: bool = False,
        max_drop: float = 0.01,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[PruningCurve]]:
        """`importance`: the ranking to prune by (estimated first when None, or again at each step with `reestimate`)."""
        ...

    # activation patching between a clean and a corrupted sentence

    def patch(
        self,
        clean: str,
        corrupt: str,
        *,
        clean_pair: str | None = None,
        corrupt_pair: str | None = None,
        metric: str = "preserve",
        answers: tuple[str, str] | None = None,
        classes: tuple[str, str] | None = None,
        task: str | None = None,
        sweeps: tuple[str, ...] = ("heads", "layers", "positions"),
        direction: str = "denoise",
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[PatchingResult]]:
        """Every component of `sweeps` patched between the two inputs (same token count); `metric` as in core.analyses.patching.

        `answers` (mlm) and `classes` (class, probe): the two compared, None for the top guesses;
        `task`: the probe's built-in task, trained once and cached.
        """
        ...
