"""A stand-in for the model session: fixed, seeded arrays and no torch, for UI tests.

Heads follow four known patterns (to [CLS], to itself, to the previous token, uniform),
so tests can tell what a view shows. Masking behaves like the real thing: a zero-ablated
head reports zero weights, a uniform one 1/T, and hidden states move with the mask.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from pathlib import Path

import numpy as np

from bertscope import api
from bertscope.analyses.attention.headstats import head_figures
from bertscope.analyses.attention.patterns_results import NORM_SHARES, PATTERNS, STATISTICS, PatternResult
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.model.masks import HeadMask
from bertscope.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo

LAYERS, HEADS, WIDTH = 3, 4, 8


class FakeBackend:
    """Satisfies `bertscope.ui.backend.Backend` (tests/test_backend_contract.py checks it)."""

    num_layers = LAYERS
    num_heads = HEADS
    max_length = 32

    def __init__(self, delay: float = 0.0, fail_with: Exception | None = None, task: str | None = None) -> None:
        """`task`: the fine-tuned model it plays (token-classification, qa, similarity); None: an MLM model."""
        self.delay = delay
        self.task = task
        self.task_calls: list[tuple[str, str]] = []  # (text, mask spec) of each task prediction
        self.fail_with = fail_with
        self.release = threading.Event()
        self.release.set()  # tests clear it to hold a forward pass until they say so
        self.calls: list[tuple[str, str]] = []  # (text, mask spec) of each forward
        self.attributions: list[tuple] = []  # (text, method, target kind, probe task, mask spec) of each attribution
        self.importance_calls: list[tuple[str, int]] = []  # (objective, sentences) of each importance estimate
        self.ablation_runs: list[tuple[str, int]] = []  # (objective, sentences) of each head-by-head sweep (Kovaleva et al. §6)
        self.measured: list[str] = []  # the mask spec of each objective measured
        self.probe_calls: list[tuple[str, list]] = []  # (task, training sentences) of each probe run
        self.patch_calls: list[dict] = []  # the arguments of each patching run
        self.syntax_calls: list[str] = []  # the mask spec of each syntax run
        self.layer_calls: list[tuple[int, str, bool]] = []  # (layer, mask spec, from a result) of each layer_maps
        self.mixing_calls: list[tuple[str, str]] = []  # (method, mask spec) of each context-mixing run
        self.erasure_calls: list[tuple[str, int, int]] = []  # (task, layer, training sentences) of each eraser fitted
        self.erased: list[
            tuple[str, object]
        ] = []  # (what ran: forward, mixing, attribute, probe, patterns, syntax, geometry; its erasure) of each erased run
        self.switched: list[tuple[str, object]] = []  # (what ran; its LiveFeatures) of each run with SAE features switched
        self.sae_calls: list[str] = []  # the directory of each SAE opened

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(
            source="fake-bert",
            family="BERT",
            architecture=FAKE_ARCHITECTURES.get(self.task or "", "BertModel"),
            num_layers=LAYERS,
            num_heads=HEADS,
            hidden_size=WIDTH,
            vocab_size=100,
            max_length=self.max_length,
            has_mlm_head=self.task is None,
            num_labels=len(FAKE_LABELS) if self.task == "token-classification" else None,
            device="cpu",
            dtype="float32",
            parameters=1234,
            fingerprint="fake",
            sentence_embedding=self.task == "similarity",
        )

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        if not text.strip():
            raise InputError("the text is empty; give a sentence to analyse")
        tokens = ["[CLS]", *text.lower().split(), "[SEP]"]
        types = [0] * len(tokens)
        if pair:
            tokens += [*pair.lower().split(), "[SEP]"]
            types += [1] * (len(tokens) - len(types))
        cut = max(0, len(tokens) - self.max_length)
        tokens = tokens[: self.max_length]
        special = np.array([t in ("[CLS]", "[SEP]") for t in tokens])
        return Encoding(
            text=text,
            pair=pair,
            tokens=tuple(tokens),
            input_ids=np.arange(len(tokens)),
            token_type_ids=np.array(types[: len(tokens)]),
            special=special,
            word_ids=tuple(None if s else i for i, s in enumerate(special)),
            segment_ids=tuple(None if s else t for s, t in zip(special, types)),
            truncated=cut,
        )

    def forward(
        self, text, pair=None, *, attentions=False, mask=None, ablation="zero", reuse=None, norms=False, figures=False, erasure=None
    ) -> ForwardResult:
        encoding = text if isinstance(text, Encoding) else self.encode(text, pair)
        mask = mask or HeadMask.none(LAYERS, HEADS)
        self.calls.append((encoding.text, mask.spec()))
        if self.delay:
            time.sleep(self.delay)
        self.release.wait(timeout=10)
        if self.fail_with is not None:
            raise self.fail_with
        length = len(encoding.tokens)
        weights, weighted_norms = self._maps(encoding, mask, ablation, erasure)
        rng = np.random.default_rng(length)
        hidden = np.repeat(rng.normal(size=(1, length, WIDTH)), LAYERS + 1, axis=0)
        for layer, _ in mask.off:
            hidden[layer + 1 :] += 0.3 * rng.normal(size=(length, WIDTH))
        if erasure is not None:
            self._record("forward", erasure)
            hidden[erasure.layer :] += 0.2 * rng.normal(size=(length, WIDTH))
        return ForwardResult(
            encoding=encoding,
            hidden_states=hidden.astype(np.float32),
            attentions=weights if attentions else None,
            mlm_logits=None,
            class_logits=None,
            mask=mask,
            ablation=ablation,
            norms=weighted_norms if norms else None,
            figures=head_figures(weights, encoding.tokens, encoding.special) if figures else None,
        )

    def layer_maps(self, text, layer, *, mask=None, ablation="zero", start_from=None):
        mask = mask or HeadMask.none(LAYERS, HEADS)
        self.layer_calls.append((layer, mask.spec(), start_from is not None))
        self.release.wait(timeout=10)
        weights, weighted_norms = self._maps(text, mask, ablation)
        return weights[layer], weighted_norms[layer]

    @staticmethod
    def _maps(encoding, mask, ablation, erasure=None):
        """Every layer's weights and value-weighted norms `[L, H, T, T]` under `mask`; an erasure at hidden state l halves
        the pattern of every layer from l up, the other half spread evenly."""
        length = len(encoding.tokens)
        weights = np.stack([np.stack([pattern(layer + head, length) for head in range(HEADS)]) for layer in range(LAYERS)])
        if erasure is not None:
            weights[erasure.layer :] = 0.5 * weights[erasure.layer :] + 0.5 / length
        for layer, head in mask.off:
            weights[layer, head] = 0.0 if ablation == "zero" else 1.0 / length
        value_norms = 0.5 + np.arange(length) % 4  # norms: each key's value has a known size, [CLS] the smallest
        return weights.astype(np.float32), (weights * value_norms).astype(np.float32)

    # the API's analyses, by the API's names and keywords (`steps` runs them as the UI asks)

    def _record(self, what, live):
        """Keep what a run ran with: its erasure (`erased`) and its switched SAE features (`switched`)."""
        from bertscope.analyses.conditions import LiveEdits

        edits = live if isinstance(live, LiveEdits) else LiveEdits(erasure=live)
        if edits.erasure is not None:
            self.erased.append((what, edits.erasure))
        if edits.features is not None:
            self.switched.append((what, edits.features))

    def steps(self, analysis, erasure, /, *args, **kwargs):
        """The fake's answer to `analysis` (`api.patterns`, ...), with the API's arguments; as `api.steps` does, the last
        step carries the result's notes (what reading its corpus skipped)."""
        answer = getattr(self, analysis.__name__)
        run = answer(*args, **kwargs) if erasure is None else answer(*args, erasure=erasure, **kwargs)
        for step in run:
            yield dataclasses.replace(step, notes=tuple(step.result.notes)) if step.finished else step

    def mixing(self, text, *, pair=None, method="value-zeroing", mask=None, ablation="zero", erasure=None, cancel=None):
        """Known measures: layer l's matrix is the mean of its heads' weights (`attention`) or their norms (anything else)
        plus (l + 1) / 4 on the diagonal, rows normalised, in `delay`-long steps per layer; flow and rollout are rolled out only."""
        from bertscope.analyses.mixing.results import Mixing

        mask = mask or HeadMask.none(LAYERS, HEADS)
        self.mixing_calls.append((method, mask.spec()))
        if erasure is not None:
            self._record("mixing", erasure)
        weights, weighted_norms = self._maps(text, mask, ablation, erasure)
        for layer in range(LAYERS):
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            yield Progress(method, layer + 1, LAYERS)
        own = 0.25 * np.arange(1, LAYERS + 1)[:, None, None] * np.eye(len(text.tokens))  # layers keep ever more of themselves
        per_layer = (weights if method == "attention" else weighted_norms).mean(1) + own
        per_layer /= per_layer.sum(-1, keepdims=True)
        rolled = np.stack(list(itertools.accumulate(per_layer, lambda joint, matrix: matrix @ joint)))
        cumulative = method in ("flow", "rollout")
        yield Progress(
            "done",
            1,
            1,
            Mixing(
                encoding=text,
                method=method,
                rolled=rolled,
                per_layer=None if cumulative else per_layer,
                mask=mask,
                ablation=ablation,
            ),
        )

    def patterns(self, texts=None, *, data=None, mask=None, ablation="zero", norms=False, erasure=None, cancel=None):
        """Known statistics: head (l, h) is always of class (l + h) % 5, or off where masked (its shares 0, as the real
        analysis gives); a batch of 2 per step; norm shares 0.05 × (i + 1). The corpus is chosen as the API chooses it."""
        chosen = api.corpus(texts, data=data)
        if erasure is not None:
            self._record("patterns", erasure)
        done = 0
        shares = np.zeros((LAYERS, HEADS, len(PATTERNS)))
        for layer in range(LAYERS):
            for head in range(HEADS):
                shares[layer, head, (layer + head) % len(PATTERNS)] = 0.0 if mask is not None and mask.is_masked(layer, head) else 1.0
        statistics = {name: np.full((LAYERS, HEADS), 0.1 * (i + 1), dtype=np.float32) for i, name in enumerate(STATISTICS)}
        if norms:
            statistics |= {f"norm_{name}": np.full((LAYERS, HEADS), 0.05 * (i + 1), dtype=np.float32) for i, name in enumerate(NORM_SHARES)}
        batch_sentences = []

        def progress(final=False):
            result = PatternResult(
                sentences=done,
                tokens=5 * done,
                truncated=0,
                statistics=statistics,
                pattern_shares=shares,
                mask=mask if mask is not None and len(mask) else None,
                ablation=ablation,
                notes=chosen.read_notes() if final else (),
            )
            return Progress("sentences", done, result=result if final else None, partial=result)

        for sentence in chosen.sentences:
            batch_sentences.append(sentence)
            if len(batch_sentences) == 2:
                if cancel is not None and cancel.is_set():
                    return
                self.release.wait(timeout=10)
                time.sleep(self.delay)
                done += len(batch_sentences)
                batch_sentences = []
                yield progress()
        done += len(batch_sentences)
        if done == 0:
            raise InputError("no sentences to analyse; the corpus is empty")
        yield progress(final=True)

    def syntax(self, texts=None, *, data=None, mask=None, ablation="zero", erasure=None, cancel=None):
        """Known counts: per sentence one arc of each of det, nsubj, obj; head (1, 2) always finds det's head,
        (2, 0) nsubj's, (0, 3) obj's (dependent to head) and half the others; the +1 offset finds det's head
        in half the sentences. Under a mask the masked heads find nothing. One sentence a step."""
        from bertscope.analyses.attention.syntax_results import OFFSETS, SyntaxResult

        relations, best = ("det", "nsubj", "obj"), ((1, 2), (2, 0), (0, 3))
        chosen = api.treebank(texts, data=data)
        done = 0
        self.syntax_calls.append(mask.spec() if mask is not None else "")
        if erasure is not None:
            self._record("syntax", erasure)

        def result_after(count: int, notes=()) -> SyntaxResult:
            correct = np.zeros((3, 2, LAYERS, HEADS), dtype=np.int64)
            correct[:] = count // 2
            for r, (layer, head) in enumerate(best):
                correct[r, 0, layer, head] = count
            if mask is not None:
                for layer, head in mask.off:
                    correct[:, :, layer, head] = 0
            baseline = np.zeros((3, 2, len(OFFSETS)), dtype=np.int64)
            baseline[0, 0, OFFSETS.index(1)] = count // 2
            return SyntaxResult(
                relations,
                np.full((3, 2), count, dtype=np.int64),
                correct,
                baseline,
                sentences=count,
                words=4 * count,
                truncated=0,
                notes=tuple(notes),
            )

        for sentence in chosen.sentences:
            if sentence.heads is None:
                raise InputError(f"{sentence.location or 'a sentence'} has no dependency heads; give a CoNLL-U treebank")
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            done += 1
            yield Progress("sentences", done, partial=result_after(done))
        if done == 0:
            raise InputError("no sentences to analyse; the treebank is empty")
        yield Progress("sentences", done, result=result_after(done, chosen.read_notes()), partial=result_after(done))

    def probe(self, task, texts=None, *, data=None, mask=None, ablation="zero", kind="linear", mdl=False, erasure=None, cancel=None):
        """Two feature stages, then a report whose layer l scores 0.5 + 0.1 l (less under a mask); with `mdl`, layer l
        compresses 1 + l times (a word task's control task 1 + l / 4 times: as in the real one, a sentence task has no
        control) over a uniform code of 100 bits."""
        from bertscope.analyses.probing.results import ProbeReport
        from bertscope.data.probing_tasks import WORD_TASKS
        from bertscope.data.splits import make_splits

        chosen = api.probe_sentences(task, texts, data=data)  # as the API chooses them
        self.probe_calls.append((task, list(chosen.train)))
        penalty = 0.05 * len(mask) if mask is not None else 0.0
        if erasure is not None:
            self._record("probe", erasure)
            penalty += 0.1  # the property erased: every layer's probe loses 0.1
        for done in (1, 2):
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            yield Progress(f"features {done}", done, 2)
        layers = [{"layer": layer, "accuracy": 0.5 + 0.1 * layer - penalty, "f1": 0.5} for layer in range(LAYERS + 1)]
        if mdl:
            for layer in layers:
                code, control = 1.0 + layer["layer"], 1.0 + layer["layer"] / 4
                layer["mdl"] = {"online_bits": 100 / code, "uniform_bits": 100.0, "compression": code, "blocks": []}
                if task in WORD_TASKS:
                    layer["mdl"]["control"] = {"online_bits": 100 / control, "uniform_bits": 100.0, "compression": control, "blocks": []}
        splits = make_splits(chosen.train, chosen.dev, chosen.test)  # as the real probe splits them
        counts = {"train": len(splits.train), "dev": len(splits.dev), "test": len(splits.test), "classes": 2, "unit": "sentences"}
        report = ProbeReport(
            task=task,
            metric="accuracy",
            layers=layers,
            best_layer=LAYERS,
            center_of_gravity=2.0,
            baselines={"majority": 0.5},
            counts=counts,
            notes=tuple(chosen.notes),
            mdl={"blocks": "fake", "seed": 0} if mdl else {},
        )
        yield Progress("done", 2, 2, report)

    def attribute(
        self,
        text,
        pair=None,
        *,
        method="integrated-gradients",
        target=None,
        probe=None,
        layer=None,
        ig_steps=None,
        mask=None,
        ablation="zero",
        erasure=None,
        cancel=None,
    ):
        """Known scores: token i scores ((3 i) % 5 - 2) / 2, 0 on [CLS]/[SEP], shifted by 0.1 per masked head.

        A probe target first "trains" (two progress steps); the MLM target needs a [mask].
        """
        from bertscope.analyses.attribution_results import Attribution

        encoding = text if isinstance(text, Encoding) else self.encode(text, pair)
        mask = mask or HeadMask.none(LAYERS, HEADS)
        self.attributions.append((encoding.text, method, "probe" if probe else "mlm", probe, mask.spec()))
        if erasure is not None:
            self._record("attribute", erasure)
        if probe:
            described = {
                "kind": "probe",
                "label": target or "NNS",
                "index": 1,
                "task": probe,
                "data": "built-in task",
                "layer": 2 if layer is None else layer,
                "pooling": "cls",
                "classes": ["NN", "NNS"],
                "test_accuracy": 0.9,
                "majority_baseline": 0.5,
            }
            for done in (1, 2):
                if cancel is not None and cancel.is_set():
                    return
                self.release.wait(timeout=10)
                time.sleep(self.delay)
                yield Progress("probe features (train)", done, 2)
        else:
            positions = [i for i, t in enumerate(encoding.tokens) if t == "[mask]"]
            if not positions:
                raise InputError(
                    "the text has no [MASK] for the MLM head to fill; write one, or explain a probe's decision with --probe TASK"
                )
            described = {"kind": "mlm", "label": "paris", "index": 7, "position": positions[0]}
        for done in (16, 32):
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            yield Progress("integrated gradients (32 steps)", done, 32)
        index = np.arange(len(encoding.tokens))
        scores = (((3 * index) % 5 - 2) / 2 + 0.1 * len(mask)) * ~encoding.special
        ig = method == "integrated-gradients"
        yield Progress(
            "done",
            1,
            1,
            Attribution(
                encoding=encoding,
                method=method,
                scores=scores.astype(np.float32),
                target=described,
                score="log-probability",
                output=-0.25,
                baseline_output=-3.0 if ig else None,
                completeness_error=0.012 if ig else None,
                steps=32 if ig else None,
                mask=mask,
                ablation=ablation,
            ),
        )

    def fit_erasure(self, task, layer, sentences, *, cancel=None):
        """Two feature steps of `delay` each, then an erasure of rank 2; a structural task is refused as the real one is."""
        from bertscope.analyses.erasure_results import LiveErasure

        if task in ("depth", "distance"):
            raise InputError(f"task {task!r} is a structural probe; erasure takes classification tasks")
        self.erasure_calls.append((task, layer, len(sentences)))
        for done in (1, 2):
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            yield Progress("features", done, 2)
        yield Progress("done", 2, 2, LiveErasure(task=task, layer=layer, rank=2, sentences=len(sentences)))

    def objective(self, name, texts):
        """The objective "prepared": its name and sentences, as the real one keeps them with what it measured; data it
        cannot take refused as the real one refuses it (a label the model does not know, a question without its context)."""
        sentences = list(texts.sentences)
        for sentence in sentences:
            if name == "qa" and (sentence.answers is None or sentence.pair is None):
                raise InputError(f"{sentence.location or 'a sentence'}: not a question with a context; the qa objective needs SQuAD JSON")
            unknown = next((tag for tag in sentence.tags or () if tag not in FAKE_LABELS), None)
            if name == "token-classification" and unknown is not None:
                raise InputError(f"{sentence.location}: label {unknown!r} is not one of the model's labels ({', '.join(FAKE_LABELS)})")
        return FakeObjective(name, sentences, notes=texts.read_notes())

    def importance(self, objective, texts=None, *, data=None, method="gradient", ablation="zero", normalize=True, cancel=None):
        """Known importance: head (l, h) scores l·H + h + 1, so 0:0 matters least and the last head most."""
        from bertscope.analyses.importance.results import HeadImportance, MetricChanges

        objective = self._objective(objective, texts, data)
        estimates = self.ablation_runs if method == "ablation" else self.importance_calls  # the §6 sweep apart
        estimates.append((objective.name, len(objective.sentences)))
        for done in (1, 2):
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            yield Progress("gradients", done, 2)
        raw = np.arange(1, LAYERS * HEADS + 1, dtype=np.float64).reshape(LAYERS, HEADS)
        changes = None
        if method == "ablation":  # each head alone lowers the metric by 0.05, but 2:2 and 2:3 raise it (Kovaleva et al. §6)
            heads = np.full((LAYERS, HEADS), -0.05)
            heads[2, 2], heads[2, 3] = 0.01, 0.02
            changes = MetricChanges(heads)
        result = HeadImportance(
            objective=objective.name,
            method=method,
            ablation=ablation,
            normalized=False,
            importance=raw,
            raw=raw,
            layers=None,
            baseline_loss=0.0,
            baseline_metric=1.0,
            metric="cosine to the unmasked output",
            sentences=len(objective.sentences),
            notes=objective.notes,
            metric_changes=changes,
        )
        yield Progress("done", 2, 2, result)

    def _objective(self, objective, texts, data=None):
        """An objective named with its data (`texts`, or a file read as the API reads it), or prepared already, as the API
        takes both."""
        return self.objective(objective, api.objective_corpus(objective, texts, data=data)) if isinstance(objective, str) else objective

    def measure(self, objective, mask=None, ablation="zero", erasure=None):
        """The metric falls by 0.05 per masked head, and by 0.2 more under an erasure."""
        from bertscope.analyses.importance.results import Measurement

        masked = len(mask) if mask is not None else 0
        self.measured.append(mask.spec() if mask is not None else "")
        self.release.wait(timeout=10)
        if erasure is not None:
            self._record("objective", erasure)
        erased = 0.2 if erasure is not None else 0.0
        return Measurement(loss=0.1 * masked + erased, metric=1.0 - 0.05 * masked - erased)

    def pruning_curve(
        self,
        objective,
        texts=None,
        *,
        data=None,
        ranking=None,
        method="gradient",
        ablation="zero",
        step=0.1,
        reestimate=False,
        max_drop=0.01,
        cancel=None,
    ):
        """Every third head removed per step; the metric falls by 0.05 per head (measure)."""
        from bertscope.analyses.importance.results import CurvePoint, PruningCurve

        objective = self._objective(objective, texts, data)
        if ranking is None:
            ranking = list(self.importance(objective, method=method))[-1].result
        points = []
        for count in range(0, LAYERS * HEADS + 1, 3):
            mask = HeadMask(LAYERS, HEADS, frozenset(ranking.least_important(count)))
            measured = self.measure(objective, mask)
            points.append(CurvePoint(count / (LAYERS * HEADS), count, measured.loss, measured.metric, mask.spec()))
            yield Progress(f"{count} heads removed", len(points), 5)
        yield Progress("done", 5, 5, PruningCurve(objective.name, "cosine", "gradient", ablation, reestimate, tuple(points), 0.2))

    def geometry(self, texts=None, *, data=None, unit="auto", max_rows=4000, mask=None, ablation="zero", erasure=None, cancel=None):
        """Known geometry: 3 sentences per step; ID of layer l is 2 + l; 12 points whose label is "A" or "B" by their x sign."""
        from bertscope.analyses.geometry.results import GeometryResult

        if erasure is not None:
            self._record("geometry", erasure)
        chosen = api.corpus(texts, data=data)
        sentences = list(chosen.sentences)

        if not sentences:
            raise InputError("no sentences to analyse; the corpus is empty")
        for done in range(3, len(sentences) + 3, 3):
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            yield Progress("representations", min(done, len(sentences)), len(sentences))
        layers = LAYERS + 1
        angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
        projection = np.stack([np.stack([np.cos(angles) * (layer + 1), np.sin(angles)], axis=1) for layer in range(layers)]).astype(
            np.float32
        )
        labels = tuple("A" if x > 0 else "B" for x in projection[0, :, 0])
        cka = np.fromfunction(lambda i, j: 1.0 - 0.1 * np.abs(i - j), (layers, layers))
        yield Progress(
            "done",
            1,
            1,
            GeometryResult(
                unit="token",
                sentences=len(sentences),
                seen=5 * len(sentences),
                truncated=0,
                projection=projection,
                explained=np.tile([0.3, 0.1], (layers, 1)),
                labels={"token": labels, "parity": labels[::-1]},
                texts=tuple(f"t{i}" for i in range(12)),
                cka=cka,
                cka_debiased=cka,
                intrinsic_dimension=np.arange(2.0, 2.0 + layers),
                duplicates=np.zeros(layers, dtype=int),
                neighbourhood_overlap=np.full(layers - 1, 0.5),
                neighbours=10,
                seed=0,
                mask=mask.spec() if mask is not None else "",
                ablation=ablation,
                notes=chosen.read_notes(),
            ),
        )

    def compare(self, model_b, texts=None, *, data=None, unit="auto", max_rows=4000, cancel=None):
        """Known comparison: head (l, h) has cosine 1 - 0.05 (l + h); model B "other-vocab" has another tokenizer."""
        from bertscope.analyses.geometry.results import ComparisonResult

        other, chosen = model_b, api.corpus(texts, data=data)
        sentences = list(chosen.sentences)
        if other == "other-vocab":
            raise InputError("model B's tokenizer differs from model A's; compare needs two models with the same tokenizer")
        for done in (1, 2):
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            yield Progress("attention and representations", done, 2)
        cosine = np.fromfunction(lambda layer, head: 1.0 - 0.05 * (layer + head), (LAYERS, HEADS))
        cka = np.fromfunction(lambda i, j: 1.0 - 0.1 * np.abs(i - j) - 0.05 * np.minimum(i, j), (LAYERS + 1, LAYERS + 1))
        yield Progress(
            "done",
            1,
            1,
            ComparisonResult(
                model_a="fake-bert",
                model_b=other,
                sentences=len(sentences),
                tokens=5 * len(sentences),
                unit="token",
                rows_sampled=5 * len(sentences),
                head_cosine=cosine,
                head_cosine_std=np.full_like(cosine, 0.01),
                cka=cka,
                cka_debiased=cka,
                notes=chosen.read_notes(),
            ),
        )

    def patch(
        self,
        clean,
        corrupt,
        *,
        pair=None,
        corrupt_pair=None,
        metric="preserve",
        answers=None,
        classes=None,
        task=None,
        sweep=("heads", "layers", "positions"),
        direction="denoise",
        cancel=None,
    ):
        """Known effects: head (l, h) has ((l·H + h) % 5 - 1) / 4 (so -0.25 to 0.75); layer l's attention write
        0.1 (l + 1), its feed-forward write -0.05 (l + 1); the hidden state k at a differing token 1 - k / L
        (shared among them), at the last token k / L. A probe metric first trains (two steps); then one step per layer.
        """
        from bertscope.analyses.patching_results import PatchingResult

        clean_pair, sweeps = pair, tuple(sweep)
        self.patch_calls.append(
            dict(
                clean=clean,
                corrupt=corrupt,
                clean_pair=clean_pair,
                corrupt_pair=corrupt_pair,
                metric=metric,
                answers=tuple(answers) if answers else None,
                classes=tuple(classes) if classes else None,
                task=task,
                sweeps=sweeps,
                direction=direction,
            )
        )
        clean_encoding, corrupt_encoding = self.encode(clean, clean_pair), self.encode(corrupt, corrupt_pair)
        if len(clean_encoding) != len(corrupt_encoding):
            raise InputError(
                f"the clean and corrupted inputs have {len(clean_encoding)} and {len(corrupt_encoding)} tokens; "
                "patching needs the same number"
            )
        differing = tuple(i for i, (a, b) in enumerate(zip(clean_encoding.tokens, corrupt_encoding.tokens)) if a != b)
        if not differing:
            raise InputError("the clean and corrupted inputs are the same tokens; change the corrupted one")
        steps = [("probe features (train)", done, 2) for done in (1, 2)] if metric == "probe" else []
        steps += [("patching", done, LAYERS) for done in range(1, LAYERS + 1)]
        for stage, done, total in steps:
            if cancel is not None and cancel.is_set():
                return
            self.release.wait(timeout=10)
            time.sleep(self.delay)
            yield Progress(stage, done, total)
        length = len(clean_encoding)
        heads = np.fromfunction(lambda layer, head: ((layer * HEADS + head) % 5 - 1) / 4, (LAYERS, HEADS))
        layers = np.stack([0.1 * np.arange(1, LAYERS + 1), -0.05 * np.arange(1, LAYERS + 1)], axis=1)
        positions = np.zeros((LAYERS + 1, length))
        share = (1 - np.arange(LAYERS + 1) / LAYERS) / len(differing)
        for position in differing:
            positions[:, position] = share
        positions[:, length - 1] += np.arange(LAYERS + 1) / LAYERS
        described = {
            "preserve": "minus the squared distance of the final hidden states to the clean run's",
            "probe": f"logit(NNS) - logit(NN) of the {task} probe at hidden state 2",
            "mlm": f"logit({(answers or ('paris', 'lyon'))[0]}) - logit({(answers or ('paris', 'lyon'))[1]}) at the [MASK]",
            "class": "logit(A) - logit(B) of the classifier",
        }
        yield Progress(
            "patching",
            LAYERS,
            LAYERS,
            PatchingResult(
                metric=metric,
                metric_description=described[metric],
                direction=direction,
                tokens=clean_encoding.tokens,
                corrupt_tokens=corrupt_encoding.tokens,
                differing=differing,
                clean_metric=0.0 if metric == "preserve" else 2.5,
                corrupt_metric=-4.0 if metric == "preserve" else -1.5,
                heads=heads if "heads" in sweeps else None,
                layers=layers if "layers" in sweeps else None,
                positions=positions if "positions" in sweeps else None,
                clean_text=clean if clean_pair is None else f"{clean} / {clean_pair}",
                corrupt_text=corrupt if corrupt_pair is None else f"{corrupt} / {corrupt_pair}",
            ),
        )

    def mask_predictions(self, result: ForwardResult, top: int = 5) -> list[MaskPrediction]:
        positions = [i for i, t in enumerate(result.tokens) if t == "[mask]"]
        shift = 0.1 * len(result.mask)
        return [
            MaskPrediction(position=p, tokens=("paris", "lyon", "rome"), probabilities=(0.6 - shift, 0.2, 0.1 + shift)) for p in positions
        ]

    # a sparse autoencoder's features: the real cfg.json read torch-free, fixed features per token

    def open_sae(self, directory):
        """The SAE in `directory` as `read_config` and `check_fits` judge it (a test writes a cfg.json and an empty
        weights file), on this fake's width and layers."""
        from bertscope.analyses.sae.files import check_fits, read_config
        from bertscope.analyses.sae.results import LiveFeatures

        config = read_config(directory)
        check_fits(config, WIDTH, LAYERS, directory=directory)
        directory = str(Path(directory).expanduser().resolve())
        self.sae_calls.append(directory)
        return LiveFeatures(directory, config.layer, config.d_sae), ()

    def sae_tokens(self, text, features, top=5):
        """Token t's features are (3t + 5j) mod d_sae, j = 0..top-1, with activations top − j."""
        tokens = np.arange(len(text.tokens))[:, None]
        ranks = np.arange(top)[None, :]
        return (3 * tokens + 5 * ranks) % features.d_sae, np.broadcast_to(float(top) - ranks, (len(text.tokens), top)).astype(np.float32)

    def sae_features(self, texts=None, *, sae, data=None, format="auto", limit=None, top=10, cancel=None):
        """Every feature fires on one context of the sample treebank; even features are labelled NOUN (precision 0.95)."""
        from bertscope.analyses.sae.files import read_config
        from bertscope.analyses.sae.results import FeatureContext, LabelMatch, SAEFeatures

        d_sae = read_config(sae).d_sae
        tokens = ("[CLS]", "the", "keys", "open", "doors", "[SEP]")
        best = tuple(LabelMatch("upos", "NOUN", 0.95, 0.4, 0.2) if f % 2 == 0 else None for f in range(d_sae))
        result = SAEFeatures(
            directory=str(sae),
            model="fake-bert",
            layer=read_config(sae).layer,
            d_sae=d_sae,
            k=2,
            sentences=1,
            tokens=len(tokens),
            fvu=0.2,
            l0=2.0,
            dead_share=0.0,
            density=np.full(d_sae, 0.1),
            top=tuple((FeatureContext(1.5, 0, 1 + f % 4, tokens),) for f in range(d_sae)),
            bin_edges=np.geomspace(1e-3, 1e3, 31),
            histogram=np.zeros((d_sae, 30), dtype=np.int64),
            labels=tuple({"upos": match} if match is not None else {} for match in best),
            best=best,
            pure=d_sae // 2,
        )
        yield Progress("reading features", 1, 1, result=result)

    def task_prediction(self, encoding, mask=None, ablation="zero", erasure=None):
        """Known predictions, moved by the mask: word i is labelled FAKE_LABELS[i % 5], the first word's label one further
        per masked head (and the second's under an erasure); the answer is the context's first word, one word further
        per masked head; the cosine is 0.8, 0.05 lower per masked head and 0.1 under an erasure."""
        from bertscope.model.task_results import AnswerSpan, SegmentSimilarity, WordLabels

        masked = len(mask) if mask is not None else 0
        self.task_calls.append((encoding.text, mask.spec() if mask is not None else ""))
        if self.task == "token-classification":
            positions = tuple(i for i, word in enumerate(encoding.word_ids) if word is not None)
            shift = [masked if number == 0 else int(erasure is not None) if number == 1 else 0 for number in range(len(positions))]
            return WordLabels(
                words=tuple(encoding.tokens[i] for i in positions),
                labels=tuple(FAKE_LABELS[(number + shift[number]) % len(FAKE_LABELS)] for number in range(len(positions))),
                probabilities=tuple(0.9 - 0.1 * s for s in shift),
                positions=positions,
            )
        if self.task == "qa" and encoding.pair is not None:
            context = [i for i, segment in enumerate(encoding.segment_ids) if segment == 1]
            place = context[min(masked, len(context) - 1)]
            return AnswerSpan(place, place, encoding.tokens[place], score=5.0 - masked, null_score=1.0, probability=0.7 - 0.1 * masked)
        if self.task == "similarity" and encoding.pair is not None:
            return SegmentSimilarity(0.8 - 0.05 * masked - 0.1 * (erasure is not None), "mean pooling (fake)")
        return None


FAKE_ARCHITECTURES = {"token-classification": "BertForTokenClassification", "qa": "BertForQuestionAnswering", "similarity": "BertModel"}
FAKE_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def pattern(kind: int, length: int) -> np.ndarray:
    """Four recognisable heads: everyone to [CLS], to itself, to the previous token, uniform."""
    kind %= 4
    if kind == 0:
        weights = np.zeros((length, length))
        weights[:, 0] = 1.0
    elif kind == 1:
        weights = np.eye(length)
    elif kind == 2:
        weights = np.eye(length, k=-1)
        weights[0, 0] = 1.0
    else:
        weights = np.full((length, length), 1.0 / length)
    return weights


@dataclasses.dataclass
class FakeObjective:
    """What the fake's `objective` prepares: the objective's name and the sentences it is measured on."""

    name: str
    sentences: list
    notes: tuple[str, ...] = ()
