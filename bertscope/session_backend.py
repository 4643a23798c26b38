"""The explorer's real backend: what the UI asks of the core (`ui.backend.Backend`), answered
by a loaded model.

The UI never imports torch, so it talks to this object through the torch-free contract in
`bertscope.ui.backend`; the CLI hands it to the app once the model is loaded. The model's
own questions (encode, forward, mask predictions) go to the session; the corpus analyses
to their modules in `bertscope.core.analyses`, each a generator of progress.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from bertscope.core.analyses import attribution, compare, geometry, objectives, patching, patterns, probing, syntax
from bertscope.core.analyses.importance import head_importance, measure, pruning_curve
from bertscope.core.analyses.importance_results import HeadImportance, Measurement
from bertscope.core.data.corpus import Sentence
from bertscope.core.model.masks import Ablation, HeadMask
from bertscope.core.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo
from bertscope.core.model.session import Session


class SessionBackend:
    """A `Session` seen through the explorer's contract."""

    def __init__(self, session: Session):
        self.session = session
        self.num_layers = session.num_layers
        self.num_heads = session.num_heads
        self._objective_cache: tuple[tuple, objectives.Objective] | None = None

    @property
    def info(self) -> ModelInfo:
        return self.session.info

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        return self.session.encode(text, pair)

    def forward(self, text, pair=None, *, attentions=False, mask=None, ablation: Ablation = "zero", reuse=None) -> ForwardResult:
        return self.session.forward(text, pair, attentions=attentions, mask=mask, ablation=ablation, reuse=reuse)

    def mask_predictions(self, result: ForwardResult, top: int = 5) -> list[MaskPrediction]:
        return self.session.mask_predictions(result, top)

    def attribute(self, text, pair=None, *, method: str = "integrated-gradients", target=None, steps: int | None = None,
                  mask: HeadMask | None = None, ablation: Ablation = "zero", cancel: threading.Event | None = None) -> Iterator:
        return attribution.attribute(self.session, text, pair, method=method, target=target, steps=steps, mask=mask,
                                     ablation=ablation, cancel=cancel)

    def attention_patterns(self, sentences: Iterable[Sentence], *, mask: HeadMask | None = None, ablation: Ablation = "zero",
                           cancel: threading.Event | None = None) -> Iterator:
        return patterns.pattern_statistics(self.session, sentences, mask=mask, ablation=ablation, cancel=cancel)

    def syntax_heads(self, sentences: Iterable[Sentence], *, mask: HeadMask | None = None, ablation: Ablation = "zero",
                     cancel: threading.Event | None = None) -> Iterator:
        return syntax.syntax_heads(self.session, sentences, mask=mask, ablation=ablation, cancel=cancel)

    def probe(self, task: str, train, dev=None, test=None, *, mask: HeadMask | None = None, ablation: Ablation = "zero",
              kind: str = "linear", cancel: threading.Event | None = None) -> Iterator:
        splits = probing.make_splits(train, dev, test)
        spec = mask.spec() if mask is not None else ""
        return probing.run_probe(self.session, task, splits, mask=spec, ablation=ablation, kind=kind, cancel=cancel)

    def geometry(self, sentences, *, unit: str = "auto", max_rows: int | None = None, mask: HeadMask | None = None,
                 ablation: Ablation = "zero", cancel: threading.Event | None = None) -> Iterator:
        return geometry.representation_geometry(self.session, sentences, unit=unit, max_rows=max_rows, mask=mask, ablation=ablation,
                                                cancel=cancel)

    def compare(self, other: str, sentences, *, unit: str = "token", max_rows: int | None = None,
                cancel: threading.Event | None = None) -> Iterator:
        from bertscope.api import load

        dtype = str(self.session.loaded.dtype).removeprefix("torch.")
        other_session = load(other, device=str(self.session.device), dtype=dtype)  # the same kernel choice as model A
        return compare.compare_models(self.session, other_session, sentences, unit=unit, max_rows=max_rows, cancel=cancel)

    def head_importance(self, objective: str, sentences, *, method: str = "gradient", ablation: Ablation = "zero",
                        normalize: bool = True, cancel: threading.Event | None = None) -> Iterator:
        return head_importance(self._prepared_objective(objective, sentences), method, ablation=ablation, normalize=normalize,
                               cancel=cancel)

    def measure_objective(self, objective: str, sentences, mask: HeadMask | None = None, ablation: Ablation = "zero") -> Measurement:
        return measure(self._prepared_objective(objective, sentences), mask if mask is not None and len(mask) else None, ablation)

    def pruning_curve(self, objective: str, sentences, *, importance: HeadImportance | None = None, ablation: Ablation = "zero",
                      step: float = 0.1, reestimate: bool = False, max_drop: float = 0.01,
                      cancel: threading.Event | None = None) -> Iterator:
        method = importance.method if importance is not None else "gradient"  # re-estimates rank heads as the first ranking did
        return pruning_curve(self._prepared_objective(objective, sentences), importance=importance, method=method, ablation=ablation,
                             step=step, reestimate=reestimate, max_drop=max_drop, cancel=cancel)

    def patch(self, clean: str, corrupt: str, *, clean_pair: str | None = None, corrupt_pair: str | None = None,
              metric: str = "preserve", answers: tuple[str, str] | None = None, classes: tuple[str, str] | None = None,
              task: str | None = None, sweeps: tuple[str, ...] = ("heads", "layers", "positions"), direction: str = "denoise",
              cancel: threading.Event | None = None) -> Iterator:
        return patching.patch(self.session, clean, corrupt, clean_pair=clean_pair, corrupt_pair=corrupt_pair, metric=metric,
                              answers=answers, classes=classes, task=task, sweeps=sweeps, direction=direction, cancel=cancel)

    def _prepared_objective(self, objective: str, sentences) -> objectives.Objective:
        """The objective prepared once for the last sentences asked about (tokenised, masked, probe trained).

        The explorer measures the same objective again after every head toggle; preparing
        it (a probe trained, say) is the costly part.
        """
        sentences = list(sentences)
        key = (objective, tuple((s.text, s.pair, s.label) for s in sentences))
        if self._objective_cache is None or self._objective_cache[0] != key:
            self._objective_cache = (key, objectives.make_objective(self.session, objective, sentences))
        return self._objective_cache[1]
