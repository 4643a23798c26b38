"""What the explorer asks of a model: the one torch-free contract between the UI and the core.

The app receives a function that opens a backend: the CLI passes one that loads a model
(`bertscope.session_backend.SessionBackend`); tests pass a fake that returns fixed arrays
(`tests/fake_backend.py`), so the UI never imports torch. The model's own questions (encode,
a forward pass, one layer's maps) are methods here; an analysis is asked for by the API's
own function and keywords (`backend.steps(api.patterns, erasure, corpus, mask=..., cancel=...)`),
so the explorer speaks the API rather than a second one, and mypy checks its arguments
against the API's. `tests/test_backend_contract.py` checks that both backends match this
contract, and that the fake answers each analysis the UI names with the API's keywords.
Long work returns a generator of `Progress` (base.progress) that stops early once `cancel` is set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar

import numpy as np

from bertscope.analyses.conditions import LiveEdits
from bertscope.analyses.erasure_results import LiveErasure
from bertscope.analyses.importance.results import Measurement
from bertscope.analyses.sae.results import LiveFeatures
from bertscope.base.progress import Progress
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo
from bertscope.model.task_results import TaskPrediction

if TYPE_CHECKING:
    from bertscope.analyses.importance.objectives import Objective
    from bertscope.api import Corpus
    from bertscope.data.corpus import Sentence
    from bertscope.model.session import Session

Live = LiveEdits | LiveErasure | None  # what a pass runs with by the backend's hooks: an erasure, switched SAE features
P = ParamSpec("P")
R = TypeVar("R")


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
        erasure: Live = None,
    ) -> ForwardResult:
        """`reuse`: the unmasked result of the same encoding, whose layers below the first masked one are kept.
        `erasure`: a property fitted by `fit_erasure` erased inside the pass, and (`LiveEdits`) SAE features opened by
        `open_sae` switched off or clamped there (then `reuse` is not used).
        `norms`: also the value-weighted norms ‖α f(x)‖ `[L, H, T, T]` (Kobayashi et al. 2020), from the same pass.
        `figures`: the result's `figures` holds each head's figures `[L, H]` (analyses.attention.headstats), reduced
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

    def task_prediction(
        self, encoding: Encoding, mask: HeadMask | None = None, ablation: Ablation = "zero", erasure: Live = None
    ) -> TaskPrediction | None:
        """What the fine-tuned model predicts for `encoding` under `mask` and `erasure` (model.task_heads): a token
        classifier's label per word, a QA model's answer span (the pair is the context), a sentence-embedding model's
        cosine between the two segments; None for any other model, or a QA or embedding model given no pair."""
        ...

    # the API's analyses

    def steps(
        self, analysis: Callable[Concatenate[Session, P], R], erasure: Live, /, *args: P.args, **kwargs: P.kwargs
    ) -> Iterator[Progress[R]]:
        """`api.steps(analysis, model, *args, **kwargs)`: the stream of one of the API's analyses (`api.patterns`,
        `api.probe`, ...) on this model, with the API's own arguments, a `Corpus` whole; the last step's `notes` are the
        result's (what reading the corpus skipped among them). `erasure`: a property fitted by `fit_erasure` erased, and
        switched SAE features, in every pass of the run (set in the thread that drains the steps; an analysis that
        caches features keeps none)."""
        ...

    def fit_erasure(
        self, task: str, layer: int, sentences: list[Sentence], *, cancel: threading.Event | None = None
    ) -> Iterator[Progress[LiveErasure]]:
        """LEACE for `task` at hidden state `layer` (Belrose et al. 2023; analyses.erasure), fitted on `sentences` on the
        model as it is; the backend keeps the eraser, and the passes given the result's description run with it."""
        ...

    # head importance's objective, measured again after every toggle

    def objective(self, name: str, texts: Corpus) -> Objective:
        """`api.objective(model, name, texts)`, prepared once for the same name and sentences (a probe trained, say: the
        costly part), to hand to `api.importance` and `api.pruning_curve` and to `measure`."""
        ...

    def measure(self, objective: Objective, mask: HeadMask | None = None, ablation: Ablation = "zero", erasure: Live = None) -> Measurement:
        """`api.measure`: the objective under `mask` and `erasure` (what it compares with, the model as it is); quick to
        repeat (the explorer's toggles)."""
        ...

    # a sparse autoencoder's features, read on the sentence and switched live (ui.features)

    def open_sae(self, directory: str) -> tuple[LiveFeatures, tuple[str, ...]]:
        """Open the SAE in `directory` for this model (an `InputError` where it is none, or of another width): what it
        is (its directory made absolute), nothing switched yet (hand it back with features switched in `LiveEdits`),
        and its notes (trained on another model of the same width)."""
        ...

    def sae_tokens(self, text: Encoding, features: LiveFeatures, top: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """Each token's `top` most active features of the SAE `features` names, on the model as it is (no mask,
        nothing switched): `[T, top]` feature numbers and activations, strongest first."""
        ...
