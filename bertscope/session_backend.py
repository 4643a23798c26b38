"""The explorer's real backend: what the UI asks of the core (`ui.backend.Backend`), answered
through the public API (`bertscope.api`) on a loaded model.

The UI never imports torch, so it talks to this object through the torch-free contract in
`bertscope.ui.backend`; the CLI hands it to the app once the model is loaded. The model's
own questions (encode, forward, mask predictions) go to the model handle; an analysis the UI
names by the API's function goes to its stream (`steps(api.patterns, ...)` is
`api.steps(api.patterns, session, ...)`), which runs in the explorer's worker threads. Its
notes (lines skipped, text cut) come back on the last `Progress` record, for the UI to show:
warnings, the API's way for scripts, are process-wide and no place for threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from bertscope import api
from bertscope.analyses.attention.headstats import FIGURES, head_figures
from bertscope.analyses.erasure_results import LiveErasure
from bertscope.analyses.importance.results import Measurement
from bertscope.base.progress import Progress, relay
from bertscope.data.corpus import Sentence
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo
from bertscope.model.session import Session
from bertscope.model.task_results import TaskPrediction

if TYPE_CHECKING:
    from bertscope.analyses.erasure import Eraser
    from bertscope.analyses.importance.objectives import Objective


Step = TypeVar("Step")
P = ParamSpec("P")
R = TypeVar("R")


class SessionBackend:
    """A loaded model seen through the explorer's contract."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.num_layers = session.num_layers
        self.num_heads = session.num_heads
        self._objective_cache: tuple[tuple, Objective] | None = None
        self._erasers: dict[tuple[str, int], Eraser] = {}  # fitted by `fit_erasure`, by (task, hidden-state layer)

    @property
    def info(self) -> ModelInfo:
        return self.session.info

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        return self.session.encode(text, pair)

    def forward(
        self,
        text: str | Encoding,
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
        if erasure is not None:  # the reused layers would skip the erasure's hook
            with self._erasing(erasure):
                return self.forward(text, pair, attentions=attentions, mask=mask, ablation=ablation, norms=norms, figures=figures)
        if not figures:
            return self.session.forward(text, pair, attentions=attentions, mask=mask, ablation=ablation, reuse=reuse, norms=norms)
        encoding = text if isinstance(text, Encoding) else self.session.encode(text, pair)
        rows: dict[int, dict[str, np.ndarray]] = {}

        def reduce(layer: int, weights: np.ndarray, _norms: np.ndarray | None) -> None:  # one layer's maps, dropped once reduced
            rows[layer] = head_figures(weights[None], encoding.tokens, encoding.special)

        result = self.session.forward(
            encoding, attentions=attentions, mask=mask, ablation=ablation, reuse=reuse, norms=norms, on_layer=reduce
        )
        reused = min(rows) if rows else self.num_layers  # the layers below were taken from `reuse`, figures too
        below: dict[str, list[np.ndarray]] = {name: [] for name in FIGURES}
        if reused:
            assert reuse is not None and reuse.figures is not None  # only `reuse` skips layers, and it carries its figures
            below = {name: [reuse.figures[name][:reused]] for name in FIGURES}
        reduced = {name: np.concatenate([*below[name], *(rows[layer][name] for layer in sorted(rows))]) for name in FIGURES}
        return dataclasses.replace(result, figures=reduced)

    def layer_maps(
        self,
        text: Encoding,
        layer: int,
        *,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        start_from: ForwardResult | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        weights, norms = self.session.layer_maps(text, layer, mask=mask, ablation=ablation, norms=True, start_from=start_from)
        assert norms is not None  # asked for
        return weights, norms

    def mask_predictions(self, result: ForwardResult, top: int = 5) -> list[MaskPrediction]:
        return self.session.mask_predictions(result, top)

    def task_prediction(
        self, encoding: Encoding, mask: HeadMask | None = None, ablation: Ablation = "zero", erasure: LiveErasure | None = None
    ) -> TaskPrediction | None:
        from bertscope.model.task_heads import task_prediction

        if erasure is not None:
            with self._erasing(erasure):
                return task_prediction(self.session, encoding, mask, ablation)
        return task_prediction(self.session, encoding, mask, ablation)

    def fit_erasure(
        self, task: str, layer: int, sentences: list[Sentence], *, cancel: threading.Event | None = None
    ) -> Iterator[Progress[LiveErasure]]:
        from bertscope.analyses.conditions import JobOptions
        from bertscope.analyses.erasure import fit_eraser

        def steps() -> Iterator[Progress[LiveErasure]]:
            eraser = yield from relay(fit_eraser(self.session, task, sentences, layer=layer, job=JobOptions(cancel=cancel)))
            if eraser is None:
                return  # cancelled
            self._erasers[task, layer] = eraser
            yield Progress("done", 1, 1, LiveErasure(task=task, layer=layer, rank=eraser.rank, sentences=len(sentences)))

        return steps()

    def _erasing(self, erasure: LiveErasure) -> contextlib.AbstractContextManager[None]:
        """This thread's passes with the erasure's eraser applied at its layer (analyses.erasure.erasing)."""
        from bertscope.analyses.erasure import erasing

        return erasing(self.session, erasure.layer, self._erasers[erasure.task, erasure.layer])

    def _erased(self, erasure: LiveErasure | None, steps: Iterator[Progress[Step]]) -> Iterator[Progress[Step]]:
        """`steps` run with the erasure: the hook is set in the thread that drains them (the explorer's worker)."""
        if erasure is None:
            return steps

        def run() -> Iterator[Progress[Step]]:
            with self._erasing(erasure):
                yield from steps

        return run()

    def steps(
        self, analysis: Callable[Concatenate[Session, P], R], erasure: LiveErasure | None, /, *args: P.args, **kwargs: P.kwargs
    ) -> Iterator[Progress[R]]:
        options: dict[str, Any] = dict(kwargs)
        if erasure is not None and "cache_dir" in inspect.signature(analysis).parameters:
            options["cache_dir"] = False  # the feature cache knows masks, not erasures
        run: Callable[..., R] = analysis
        return self._erased(erasure, api.steps(run, self.session, *args, **options))

    def objective(self, name: str, texts: api.Corpus) -> Objective:
        """The objective prepared once for the last sentences asked about (tokenised, masked, probe trained).

        The explorer measures the same objective again after every head toggle; preparing
        it (a probe trained, say) is the costly part. Its notes go on to every result measured on it.
        """
        sentences = list(texts.sentences)
        key = (name, texts.source, tuple((s.text, s.pair, s.label) for s in sentences))
        if self._objective_cache is None or self._objective_cache[0] != key:
            reference = None
            if name == "token-classification" and any(s.tags is None for s in sentences):
                sentences, reference = self._word_reference(sentences)
            prepared = api.objective(self.session, name, api.Corpus(sentences, texts.source, texts.report))
            if reference is not None:
                prepared.notes.insert(0, reference)
                if reference.startswith("agreement"):
                    prepared.metric = f"agreement {prepared.metric}"
            self._objective_cache = (key, prepared)
        return self._objective_cache[1]

    def _word_reference(self, sentences: list[Sentence]) -> tuple[list[Sentence], str]:
        """Untagged sentences (the sample treebank) labelled for the token-classification objective: by their UPOS where
        every tag is one of the model's labels (a POS tagger), else by the model's own unmasked labels (agreement)."""
        from bertscope.model.task_heads import own_word_labels

        names = set(self.session.label_names)
        if all(s.upos is not None and set(s.upos) <= names for s in sentences):
            return [dataclasses.replace(s, tags=s.upos) for s in sentences], "gold labels: the sample treebank's UPOS tags"
        own = own_word_labels(self.session, [list(s.words or s.text.split()) for s in sentences])
        labelled = [dataclasses.replace(s, words=tuple(s.words or s.text.split()), tags=tags) for s, tags in zip(sentences, own)]
        return labelled, (
            "agreement: no gold data in this model's labels, so the reference is its own unmasked label for each word "
            "(the metric measures agreement with the model as it is, not accuracy)"
        )

    def measure(
        self, objective: Objective, mask: HeadMask | None = None, ablation: Ablation = "zero", erasure: LiveErasure | None = None
    ) -> Measurement:
        if erasure is None:
            return api.measure(objective, mask, ablation)
        from bertscope.analyses.erasure import measured  # its reference (the `preserve` target) left unerased

        eraser = self._erasers[erasure.task, erasure.layer]
        return measured(objective, erasure.layer, eraser, mask if mask is not None and len(mask) else None, ablation)
