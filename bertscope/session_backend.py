"""The explorer's real backend: what the UI asks of the core (`ui.backend.Backend`), answered
through the public API (`bertscope.api`) on a loaded model.

The UI never imports torch, so it talks to this object through the torch-free contract in
`bertscope.ui.backend`; the CLI hands it to the app once the model is loaded. The model's
own questions (encode, forward, mask predictions) go to the model handle; the long jobs to
the API's streams (`api.steps(api.patterns, ...)`), which run in the explorer's worker
threads. Their notes (lines skipped, text cut) come back on the last `Progress` record, for
the UI to show: warnings, the API's way for scripts, are process-wide and no place for threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Literal, TypeVar

import numpy as np

from bertscope import api
from bertscope.core.analyses.attribution_results import Target
from bertscope.core.analyses.erasure_results import LiveErasure
from bertscope.core.analyses.headstats import FIGURES, head_figures
from bertscope.core.analyses.importance_results import HeadImportance, Measurement
from bertscope.core.data.corpus import ReadReport, Sentence
from bertscope.core.model.masks import Ablation, HeadMask
from bertscope.core.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo
from bertscope.core.model.session import Session
from bertscope.core.progress import Progress, relay

if TYPE_CHECKING:
    from bertscope.core.analyses.attribution_results import Attribution
    from bertscope.core.analyses.erasure import Eraser
    from bertscope.core.analyses.geometry_results import ComparisonResult, GeometryResult
    from bertscope.core.analyses.importance_results import PruningCurve
    from bertscope.core.analyses.mixing_results import Mixing
    from bertscope.core.analyses.objectives import Objective
    from bertscope.core.analyses.patching_results import PatchingResult
    from bertscope.core.analyses.probing_results import ProbeKind, ProbeReport
    from bertscope.core.analyses.syntax_results import SyntaxResult
    from bertscope.core.model.results import PatternResult


Step = TypeVar("Step")


def chosen(sentences: Iterable[Sentence]) -> api.Corpus:
    """Sentences the explorer chose (the sample corpus, a file it read), as the API takes a corpus."""
    return api.Corpus(sentences, "explorer", ReadReport())


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
        steps = api.steps(api.mixing, self.session, text, method=method, mask=mask, ablation=ablation, cancel=cancel)
        return self._erased(erasure, steps)

    def attribute(
        self,
        text: str | Encoding,
        pair: str | None = None,
        *,
        method: str = "integrated-gradients",
        target: Target | None = None,
        steps: int | None = None,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[Attribution]]:
        target = target or Target()
        run = api.steps(
            api.attribute,
            self.session,
            text,
            pair,
            method=method,
            target=target.label,
            position=target.position,
            probe=target.probe,
            data=target.data,
            layer=target.layer,
            sentence_pooling=target.pooling,
            ig_steps=steps,
            mask=mask,
            ablation=ablation,
            cancel=cancel,
        )
        return self._erased(erasure, run)

    def fit_erasure(
        self, task: str, layer: int, sentences: list[Sentence], *, cancel: threading.Event | None = None
    ) -> Iterator[Progress[LiveErasure]]:
        from bertscope.core.analyses.conditions import JobOptions
        from bertscope.core.analyses.erasure import fit_eraser

        def steps() -> Iterator[Progress[LiveErasure]]:
            eraser = yield from relay(fit_eraser(self.session, task, sentences, layer=layer, job=JobOptions(cancel=cancel)))
            if eraser is None:
                return  # cancelled
            self._erasers[task, layer] = eraser
            yield Progress("done", 1, 1, LiveErasure(task=task, layer=layer, rank=eraser.rank, sentences=len(sentences)))

        return steps()

    def _erasing(self, erasure: LiveErasure) -> contextlib.AbstractContextManager[None]:
        """This thread's passes with the erasure's eraser applied at its layer (core.analyses.erasure.erasing)."""
        from bertscope.core.analyses.erasure import erasing

        return erasing(self.session, erasure.layer, self._erasers[erasure.task, erasure.layer])

    def _erased(self, erasure: LiveErasure | None, steps: Iterator[Progress[Step]]) -> Iterator[Progress[Step]]:
        """`steps` run with the erasure: the hook is set in the thread that drains them (the explorer's worker)."""
        if erasure is None:
            return steps

        def run() -> Iterator[Progress[Step]]:
            with self._erasing(erasure):
                yield from steps

        return run()

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
        steps = api.steps(api.patterns, self.session, chosen(sentences), mask=mask, ablation=ablation, norms=norms, cancel=cancel)
        return self._erased(erasure, steps)

    def syntax_heads(
        self,
        sentences: Iterable[Sentence],
        *,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[SyntaxResult]]:
        return self._erased(erasure, api.steps(api.syntax, self.session, chosen(sentences), mask=mask, ablation=ablation, cancel=cancel))

    def probe(
        self,
        task: str,
        train: Iterable[Sentence],
        dev: Iterable[Sentence] | None = None,
        test: Iterable[Sentence] | None = None,
        *,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        kind: ProbeKind = "linear",
        mdl: bool = False,
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[ProbeReport]]:
        cache: Literal[False] | None = False if erasure is not None else None  # the feature cache knows masks, not erasures
        steps = api.steps(
            api.probe,
            self.session,
            task,
            train,
            dev=dev,
            test=test,
            mask=mask,
            ablation=ablation,
            kind=kind,
            mdl=mdl,
            cache_dir=cache,
            cancel=cancel,
        )
        return self._erased(erasure, steps)

    def geometry(
        self,
        sentences: Iterable[Sentence],
        *,
        unit: str = "auto",
        max_rows: int | None = None,
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[GeometryResult]]:
        steps = api.steps(
            api.geometry, self.session, chosen(sentences), unit=unit, max_rows=max_rows, mask=mask, ablation=ablation, cancel=cancel
        )
        return self._erased(erasure, steps)

    def compare(
        self,
        other: str,
        sentences: Iterable[Sentence],
        *,
        unit: str = "token",
        max_rows: int | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[ComparisonResult]]:
        return api.steps(api.compare, self.session, other, chosen(sentences), unit=unit, max_rows=max_rows, cancel=cancel)

    def head_importance(
        self,
        objective: str,
        sentences: Iterable[Sentence],
        *,
        method: str = "gradient",
        ablation: Ablation = "zero",
        normalize: bool = True,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[HeadImportance]]:
        prepared = self._prepared_objective(objective, sentences)
        return api.steps(api.importance, self.session, prepared, method=method, ablation=ablation, normalize=normalize, cancel=cancel)

    def measure_objective(
        self,
        objective: str,
        sentences: Iterable[Sentence],
        mask: HeadMask | None = None,
        ablation: Ablation = "zero",
        erasure: LiveErasure | None = None,
    ) -> Measurement:
        prepared = self._prepared_objective(objective, sentences)
        if erasure is None:
            return api.measure(prepared, mask, ablation)
        from bertscope.core.analyses.erasure import measured  # its reference (the `preserve` target) left unerased

        eraser = self._erasers[erasure.task, erasure.layer]
        return measured(prepared, erasure.layer, eraser, mask if mask is not None and len(mask) else None, ablation)

    def pruning_curve(
        self,
        objective: str,
        sentences: Iterable[Sentence],
        *,
        importance: HeadImportance | None = None,
        ablation: Ablation = "zero",
        step: float = 0.1,
        reestimate: bool = False,
        max_drop: float = 0.01,
        cancel: threading.Event | None = None,
    ) -> Iterator[Progress[PruningCurve]]:
        method = importance.method if importance is not None else "gradient"  # re-estimates rank heads as the first ranking did
        return api.steps(
            api.pruning_curve,
            self.session,
            self._prepared_objective(objective, sentences),
            ranking=importance,
            method=method,
            ablation=ablation,
            step=step,
            reestimate=reestimate,
            max_drop=max_drop,
            cancel=cancel,
        )

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
        return api.steps(
            api.patch,
            self.session,
            clean,
            corrupt,
            pair=clean_pair,
            corrupt_pair=corrupt_pair,
            metric=metric,
            answers=answers,
            classes=classes,
            task=task,
            sweep=sweeps,
            direction=direction,
            cancel=cancel,
        )

    def _prepared_objective(self, objective: str, sentences: Iterable[Sentence]) -> Objective:
        """The objective prepared once for the last sentences asked about (tokenised, masked, probe trained).

        The explorer measures the same objective again after every head toggle; preparing
        it (a probe trained, say) is the costly part. Its notes go on to every result measured on it.
        """
        sentences = list(sentences)
        key = (objective, tuple((s.text, s.pair, s.label) for s in sentences))
        if self._objective_cache is None or self._objective_cache[0] != key:
            prepared = api.objective(self.session, objective, chosen(sentences))
            self._objective_cache = (key, prepared)
        return self._objective_cache[1]
