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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from bertscope import api
from bertscope.analyses.attention.headstats import FIGURES, head_figures
from bertscope.analyses.conditions import LiveEdits
from bertscope.analyses.erasure_results import LiveErasure
from bertscope.analyses.importance.results import Measurement
from bertscope.analyses.sae.results import LiveFeatures
from bertscope.base.progress import Progress, relay
from bertscope.data.corpus import Sentence
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo
from bertscope.model.session import Session
from bertscope.model.task_results import TaskPrediction

if TYPE_CHECKING:
    from bertscope.analyses.erasure import Eraser
    from bertscope.analyses.importance.objectives import Objective
    from bertscope.analyses.sae.autoencoder import TopKSAE


Live = LiveEdits | LiveErasure | None  # what the explorer hands a pass to run with: an erasure, switched SAE features
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
        self._saes: dict[str, TopKSAE] = {}  # opened by `open_sae`, by directory

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
        erasure: Live = None,
    ) -> ForwardResult:
        if erasure is not None:  # the reused layers would skip the edits' hooks
            with self._live(erasure):
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
        self, encoding: Encoding, mask: HeadMask | None = None, ablation: Ablation = "zero", erasure: Live = None
    ) -> TaskPrediction | None:
        from bertscope.model.task_heads import task_prediction

        with self._live(erasure):
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

    def _live(self, live: Live) -> contextlib.ExitStack[bool | None]:
        """This thread's passes with the erasure's eraser applied at its layer (analyses.erasure.erasing) and the SAE
        features switched at theirs (analyses.sae.switch.switching). Each hook goes in front of the module's others,
        so at one hidden state the switch, set last, runs first: on the state the SAE was trained on."""
        edits = live if isinstance(live, LiveEdits) else LiveEdits(erasure=live)
        stack = contextlib.ExitStack()
        if edits.erasure is not None:
            from bertscope.analyses.erasure import erasing

            erasure = edits.erasure
            stack.enter_context(erasing(self.session, erasure.layer, self._erasers[erasure.task, erasure.layer]))
        if edits.features is not None:
            from bertscope.analyses.sae.switch import switching

            features = edits.features
            stack.enter_context(switching(self.session, self._sae(features.directory), features.layer, features.values))
        return stack

    def _erased(self, live: Live, steps: Iterator[Progress[Step]]) -> Iterator[Progress[Step]]:
        """`steps` run with the erasure and the switched features: the hooks are set in the thread that drains them
        (the explorer's worker)."""
        if live is None:
            return steps

        def run() -> Iterator[Progress[Step]]:
            with self._live(live):
                yield from steps

        return run()

    def steps(
        self, analysis: Callable[Concatenate[Session, P], R], erasure: Live, /, *args: P.args, **kwargs: P.kwargs
    ) -> Iterator[Progress[R]]:
        options: dict[str, Any] = dict(kwargs)
        if erasure is not None and "cache_dir" in inspect.signature(analysis).parameters:
            options["cache_dir"] = False  # the feature cache knows masks, not erasures or switched features
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

    def measure(self, objective: Objective, mask: HeadMask | None = None, ablation: Ablation = "zero", erasure: Live = None) -> Measurement:
        if erasure is None:
            return api.measure(objective, mask, ablation)
        from bertscope.analyses.erasure import measured_under  # its reference (the `preserve` target) left as it is

        return measured_under(objective, lambda: self._live(erasure), mask if mask is not None and len(mask) else None, ablation)

    # sparse autoencoders' features, switched live

    def open_sae(self, directory: str) -> tuple[LiveFeatures, tuple[str, ...]]:
        from bertscope.analyses.sae.features import open_sae

        directory = str(Path(directory).expanduser().resolve())  # one name for one SAE, whatever the working directory
        sae, config, notes = open_sae(self.session, directory)
        self._saes[directory] = sae
        return LiveFeatures(directory, config.layer, config.d_sae), notes

    def _sae(self, directory: str) -> TopKSAE:
        if directory not in self._saes:
            self.open_sae(directory)
        return self._saes[directory]

    def sae_tokens(self, text: Encoding, features: LiveFeatures, top: int = 5) -> tuple[np.ndarray, np.ndarray]:
        from bertscope.analyses.sae.switch import token_features

        states = self.session.forward(text, attentions=False, mlm_logits=False).hidden_states[features.layer]
        return token_features(self._sae(features.directory), states, top)
