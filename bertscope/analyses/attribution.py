"""Which input tokens a decision rests on: gradients, integrated gradients, attention rollout.

The decision (a `Target`) is one of: the masked-LM's score for a token at a [MASK], a
sequence classifier's score for a class, a probe's score for a class of the sentence
(Mohebbi et al. 2021; see analyses.probing.decision), a token classifier's score for a label
at one word (read at the word's first word piece, as transformers' token-classification
examples label words), a QA model's predicted answer span, or a sentence-embedding model's
cosine between two sentences. Its scalar output f is the log-probability of that token or class
(`score` can choose the probability or the raw logit); the token or class is the model's own
top choice unless one is named.

- A QA decision is the span the model predicts for the question (TEXT) and its context (the
  pair): the best start ≤ end in the context, at most 30 tokens long, by start + end logit as
  transformers' run_qa ranks spans. f is log p(start) + log p(end), each a softmax over the
  input's positions (the log-probability of the span, start and end drawn independently, as
  the (CE(start) + CE(end)) training loss has it); `logit` gives start logit + end logit, the
  span's score; `probability` p(start)·p(end). A target of `start` or `end` explains one alone.
- A similarity decision encodes the two sentences apart, as a bi-encoder does, pools each as
  the model's sentence-transformers files say (model.pooling) and explains their cosine; the
  attribution covers the tokens of both inputs, [CLS] a [SEP] then [CLS] b [SEP]. The rolled-out
  methods read each side's pooled rows in its own pass, so their scores sum to 1 per side.

Gradient methods differentiate f with respect to the input word embeddings e_i (position
and segment embeddings stay as they are); each token gets one number:

- `gradient`: ‖∂f/∂e_i‖₂, unsigned saliency (Simonyan et al. 2014);
- `gradient-x-input`: Σ_d e_id ∂f/∂e_id, signed (Shrikumar et al. 2017);
- `integrated-gradients`: Σ_d (e_id − b_id) ∫₀¹ ∂f/∂e_id(b + α(e − b)) dα, signed
  (Sundararajan et al. 2017), with a Gauss-Legendre rule batched through the model. The
  baseline b is the [PAD] embedding at every word token, while [CLS], [SEP] and [MASK]
  keep theirs: the path asks what the words contribute to the question. By completeness
  the scores sum to f(x) − f(b); `completeness_error` is |Σ − (f(x) − f(b))| / |f(x) − f(b)|.
  By default the steps double from 32 until that error is under 5% (at most 256), unless
  f(x) − f(b) is too small for the error to mean anything (a saturated softmax: a note says so).
- `attention-rollout` (Abnar & Zuidema 2020): per layer Ã = ½·mean over heads of A + ½·I,
  rows renormalised, multiplied from the first layer up to the layer the decision reads;
  a token's score is the rollout row of the position the decision is read at (the [MASK],
  [CLS], or the mean of the real tokens' rows for a mean-pooled probe). It ignores the
  target class, and sums to 1.
- `attention-flow`, `norms`, `value-zeroing`, `alti`: the same row of another context-mixing
  measure rolled out from the input to the layer the decision reads (analyses.mixing.run
  defines each); they too ignore the target class and sum to 1.

A head mask applies to every forward and backward pass through the existing gates.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from bertscope.analyses.attribution_results import METHODS, MIXING, SCORES, SPAN_PARTS, Attribution, Target, TargetKind
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.mlm import MASK_TEXT, answer_id, mask_positions, with_mask_token
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.model.masks import Ablation
from bertscope.model.results import Encoding
from bertscope.model.task_heads import span_scores

if TYPE_CHECKING:
    from bertscope.analyses.probing.decision import DecisionProbe
    from bertscope.model.session import Session

__all__ = ["METHODS", "SCORES", "Attribution", "Target", "attribute", "gauss_legendre", "rollout"]

DEFAULT_STEPS = 32  # first try of the adaptive rule; see benchmarks/attribution.py for measured errors
MAX_STEPS = 256
COMPLETENESS_GOAL = 0.05
IG_BATCH = 16  # interpolation points per forward/backward pass
SATURATED = 1e-3  # |f(x) - f(b)| below this: a saturated softmax, say so

# What integrated gradients end with: the scores, f(b), the completeness error, the steps used and the notes.
_Integrated = tuple[np.ndarray, float, float, int, list[str]]


def attribute(
    session: Session,
    text: str | Encoding,
    pair: str | None = None,
    *,
    method: str = "integrated-gradients",
    target: Target | None = None,
    score: str = "log-probability",
    ig_steps: int | None = None,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[Attribution]]:
    """Attribute one decision on `text` to its tokens; progress items, the last one carrying the result.

    `ig_steps`: integrated gradients' steps (None: 32, doubled up to 256 until the completeness error is under 5%);
    the passes run under `conditions` (None: the model as it is); `job`: a probe decision's cache, and the cancel."""
    cancel = job.cancel
    if method not in METHODS:
        raise InputError(f"unknown attribution method {method!r}; use one of: {', '.join(METHODS)}")
    if score not in SCORES:
        raise InputError(f"unknown score {score!r}; use one of: {', '.join(SCORES)}")
    if ig_steps is not None and not 1 <= ig_steps <= 4096:
        raise InputError(f"{ig_steps} integration steps asked for; give 1 to 4096", setting="ig_steps")
    target = target or Target()
    encoding = text if isinstance(text, Encoding) else session.encode(with_mask_token(session.tokenizer, text), pair)
    conditions = conditions or Conditions(session.mask(None))
    head_mask, ablation = conditions.mask, conditions.ablation
    kind = _target_kind(session, encoding, target)
    probe = None
    if kind == "probe":
        from bertscope.analyses.probing.decision import decision_probe

        task = target.probe
        assert task is not None  # `_target_kind` refuses a probe decision without its task
        probe = yield from relay(
            decision_probe(
                session, task, data=target.data, layer=target.layer, pooling=target.pooling, cache_dir=job.cache_dir, cancel=cancel
            )
        )
        if probe is None:
            return  # cancelled
    decision = _Decision(session, encoding, kind, target, probe, score, session.gate_tensor(head_mask), ablation)
    common: dict[str, Any] = dict(
        encoding=decision.encoding,
        method=method,
        target=decision.describe(),
        score="cosine" if kind == "similarity" else score,
        mask=head_mask,
        ablation=ablation,
    )
    if method == "attention-rollout":
        parts = []
        for side, rows in decision.reads():
            attentions = session.forward(side, attentions=True, mask=head_mask, ablation=ablation, mlm_logits=False).attentions
            assert attentions is not None  # asked for
            parts.append(rollout(attentions, decision.read_layer, rows))
        yield Progress("done", 1, 1, Attribution(scores=np.concatenate(parts), output=decision.output, **common))
        return
    if method in MIXING:
        from bertscope.analyses.mixing.run import context_mixing

        parts, mixing_notes = [], []
        for side, rows in decision.reads():
            mixing = yield from relay(context_mixing(session, side, method=MIXING[method], conditions=conditions, job=job))
            if mixing is None:
                return  # cancelled
            rolled = mixing.rolled[decision.read_layer - 1] if decision.read_layer else np.eye(len(side))
            parts.append(rolled[rows].mean(0).astype(np.float32))
            mixing_notes += [note for note in mixing.notes if note not in mixing_notes]
        scores = np.concatenate(parts)
        yield Progress("done", 1, 1, Attribution(scores=scores, output=decision.output, notes=tuple(mixing_notes), **common))
        return
    if method in ("gradient", "gradient-x-input"):
        embeds = decision.embeds[None].clone().requires_grad_()
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(decision.f(embeds).sum(), embeds)
        grad = grad[0].float()
        scores = grad.norm(dim=-1) if method == "gradient" else (grad * decision.embeds.float()).sum(-1)
        yield Progress("done", 1, 1, Attribution(scores=scores.cpu().numpy(), output=decision.output, **common))
        return
    result: Progress[Attribution] | _Integrated | None = None
    for result in _integrated_gradients(decision, ig_steps, cancel):
        if isinstance(result, Progress):
            yield result
    if not isinstance(result, tuple):
        return  # cancelled
    scores, baseline_output, error, used, notes = result
    yield Progress(
        "done",
        1,
        1,
        Attribution(
            scores=scores,
            output=decision.output,
            baseline_output=baseline_output,
            completeness_error=error,
            steps=used,
            notes=tuple(notes),
            **common,
        ),
    )


def rollout(attentions: np.ndarray, layers: int, rows: np.ndarray) -> npt.NDArray[np.float32]:
    """Abnar & Zuidema's attention rollout through the first `layers` layers, read at `rows` (averaged).

    `attentions` `[L, H, T, T]`. A head switched off with zero ablation has all-zero
    weights; it counts as such in the mean, and the renormalisation keeps rows summing to 1.
    """
    length = attentions.shape[-1]
    joint = np.eye(length)
    identity = np.eye(length)
    for layer in range(layers):
        mixed = 0.5 * attentions[layer].astype(np.float64).mean(0) + 0.5 * identity
        mixed /= mixed.sum(-1, keepdims=True)
        joint = mixed @ joint
    return cast(npt.NDArray[np.float32], joint[rows].mean(0).astype(np.float32))


def gauss_legendre(steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes α in (0, 1) and weights (summing to 1) of the `steps`-point Gauss-Legendre rule."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    return 0.5 * (nodes + 1), 0.5 * weights


def _integrated_gradients(
    decision: _Decision, steps: int | None, cancel: threading.Event | None
) -> Iterator[Progress[Attribution] | _Integrated]:
    """Yields progress, then (scores, f(b), completeness error, steps used, notes)."""
    x, b = decision.embeds, decision.baseline
    with torch.no_grad():
        ends = decision.f(torch.stack([x, b])).double()
    difference = float(ends[0] - ends[1])
    schedule = [steps] if steps is not None else [n for n in (DEFAULT_STEPS, 64, 128, MAX_STEPS)]
    total = sum(schedule)
    done = 0
    notes: list[str] = []
    for count in schedule:
        alphas, weights = gauss_legendre(count)
        total_grad = torch.zeros_like(x, dtype=torch.float64)
        for start in range(0, count, IG_BATCH):
            if cancel is not None and cancel.is_set():
                return
            alpha = torch.as_tensor(alphas[start : start + IG_BATCH], device=x.device, dtype=x.dtype)
            weight = torch.as_tensor(weights[start : start + IG_BATCH], device=x.device, dtype=torch.float64)
            points = (b[None] + alpha[:, None, None] * (x - b)[None]).detach().requires_grad_()
            with torch.enable_grad():
                (grad,) = torch.autograd.grad(decision.f(points).sum(), points)
            total_grad += (grad.double() * weight[:, None, None]).sum(0)
            done += len(alpha)
            yield Progress(f"integrated gradients ({count} steps)", done, total)
        scores = ((x - b).double() * total_grad).sum(-1)
        error = abs(float(scores.sum()) - difference) / abs(difference) if abs(difference) > 1e-9 else float("nan")
        if steps is not None or not error >= COMPLETENESS_GOAL or abs(difference) < SATURATED:  # more steps cannot help
            break
    if abs(difference) < SATURATED:
        notes.append(
            f"the explained output barely differs between the input and the baseline (f(x) - f(b) = {difference:.2g}), "
            "so the attributions are near 0 and the completeness error is ill-conditioned; try the logit score"
        )
    if error >= COMPLETENESS_GOAL:
        notes.append(f"completeness error {error:.1%} after {count} steps; try {count * 2} steps")
    yield scores.float().cpu().numpy(), float(ends[1]), error, count, notes


# --- the decision: one scalar function of the word embeddings ------------------------------


def _target_kind(session: Session, encoding: Encoding, target: Target) -> TargetKind:
    if target.kind is not None:
        kind = target.kind
    elif target.probe is not None:
        kind = "probe"
    elif session.is_token_classifier:
        kind = "token"
    elif session.is_question_answerer:
        kind = "answer"
    elif session.is_classifier:
        kind = "class"
    elif session.mlm_head is None and encoding.pair is not None:
        kind = "similarity"  # a model without a head of its own, and two sentences: a sentence-embedding model's decision
    else:
        kind = "mlm"
    if target.word is not None and kind != "token":
        why = "a probe's decision reads no word" if kind == "probe" else f"{session.info.architecture} is not one (…ForTokenClassification)"
        raise InputError(f"a word is chosen for a token classifier's label; {why}", setting="word")
    if kind == "probe" and target.probe is None:
        raise InputError("a probe decision needs a probing task (e.g. subject_number)", setting="probe")
    if kind == "class" and not session.is_classifier:
        raise InputError(
            f"{session.info.architecture} is not a sequence classifier; explain an MLM guess or a probe's decision", setting="probe"
        )
    if kind == "token" and not session.is_token_classifier:
        raise InputError(
            f"{session.info.architecture} is not a token classifier (…ForTokenClassification); it labels no word", setting="word"
        )
    if kind == "answer":
        if not session.is_question_answerer:
            raise InputError(
                f"{session.info.architecture} is not a question-answering model (…ForQuestionAnswering); it predicts no answer span",
                setting="target",
            )
        if encoding.pair is None:
            raise InputError(
                "a QA model answers a question from a context: give the question as the text and the context as the pair", setting="pair"
            )
    if kind == "similarity" and encoding.pair is None:
        raise InputError("a similarity is between two sentences: give the second one as the pair", setting="pair")
    if kind == "mlm":
        if session.mlm_head is None or session.tokenizer.mask_token_id is None:
            raise InputError(
                f"{session.info.source} has neither an MLM head nor a classifier: explain a probe's decision instead, "
                "e.g. of the built-in task subject_number, or of a task in a SentEval file, or give a second sentence "
                "as the pair to explain the cosine of their embeddings",
                setting="probe",
            )
        if not len(mask_positions(session.tokenizer, encoding)):
            raise InputError(
                f"the text has no {MASK_TEXT} for the MLM head to fill; write one, or explain a probe's decision",
                setting="probe",
            )
    return kind


def _joined(first: Encoding, second: Encoding) -> Encoding:
    """Two inputs encoded apart, shown as one: [CLS] a [SEP] then [CLS] b [SEP], the second as segment 1."""
    return Encoding(
        text=first.text,
        pair=second.text,
        tokens=first.tokens + second.tokens,
        input_ids=np.concatenate([first.input_ids, second.input_ids]),
        token_type_ids=np.concatenate([first.token_type_ids, second.token_type_ids]),
        special=np.concatenate([first.special, second.special]),
        word_ids=first.word_ids + second.word_ids,
        segment_ids=first.segment_ids + tuple(None if segment is None else 1 for segment in second.segment_ids),
        truncated=first.truncated + second.truncated,
    )


def _words(encoding: Encoding) -> list[tuple[int, str]]:
    """The first segment's words: (first word piece's position, the word as written) in order."""
    found: dict[int, list[int]] = {}
    for position, (word, segment) in enumerate(zip(encoding.word_ids, encoding.segment_ids)):
        if word is not None and not encoding.special[position] and not segment:
            found.setdefault(word, []).append(position)
    return [
        (positions[0], "".join(encoding.tokens[p].removeprefix("##") if n else encoding.tokens[p] for n, p in enumerate(positions)))
        for _, positions in sorted(found.items())
    ]


def chosen_word(encoding: Encoding, word: int | str | None) -> tuple[int, int, str]:
    """(word index, its first piece's position, its text) of the word chosen by index or text."""
    words = _words(encoding)
    listed = " ".join(f"{text}({index})" for index, (_, text) in enumerate(words[:12])) + (" …" if len(words) > 12 else "")
    if not words:
        raise InputError("the text has no words to label", setting="word")
    if word is None:
        raise InputError(
            f"a token classifier labels every word: choose one by index (0 to {len(words) - 1}) or by its text; words: {listed}",
            setting="word",
        )
    if isinstance(word, int) or word.strip().isdigit():
        index = int(word)
        if not 0 <= index < len(words):
            raise InputError(
                f"word {index} is out of range: the text has {len(words)} words (0 to {len(words) - 1}): {listed}", setting="word"
            )
        return index, words[index][0], words[index][1]
    for exact in (True, False):
        for index, (position, text) in enumerate(words):
            if text == word.strip() if exact else text.lower() == word.strip().lower():
                return index, position, text
    raise InputError(f"no word {word!r} in the text; its words: {listed}", setting="word")


def answer_spans(logits: Tensor, encoding: Encoding, count: int = 1) -> list[tuple[int, int]]:
    """The `count` best answers of start and end logits `[2, T]`: start ≤ end within the context (the pair), by start + end
    logit, at most `MAX_ANSWER_TOKENS` tokens, as transformers' run_qa chooses them."""
    inside = torch.as_tensor(
        [segment == 1 and not special for segment, special in zip(encoding.segment_ids, encoding.special)], device=logits.device
    )
    if not bool(inside.any()):
        raise InputError(
            "the input has no context to answer from (or it was cut off entirely); give the context as the pair", setting="pair"
        )
    spans = span_scores(logits[0].float(), logits[1].float(), inside)
    best = torch.topk(spans.flatten(), min(count, int(torch.isfinite(spans).sum()))).indices.tolist()
    return [(flat // spans.shape[-1], flat % spans.shape[-1]) for flat in best]


class _Decision:
    """f(word embeddings `[B, T, D]`) → `[B]` for one target, plus where it reads the sequence."""

    def __init__(
        self,
        session: Session,
        encoding: Encoding,
        kind: TargetKind,
        target: Target,
        probe: DecisionProbe | None,
        score: str,
        gates: Tensor | None,
        ablation: Ablation,
    ) -> None:
        self.session, self.kind, self.probe, self.score_name = session, kind, probe, score
        self.gates, self.ablation = gates, ablation
        self.sides = [encoding]  # the inputs run apart: two for a similarity
        if kind == "similarity":
            assert encoding.pair is not None  # `_target_kind` refuses a similarity without its pair
            self.sides = [session.encode(encoding.text), session.encode(encoding.pair)]
            encoding = _joined(*self.sides)
        self.encoding = encoding
        device = session.device
        ids = torch.as_tensor(encoding.input_ids, device=device)
        self.token_type_ids = torch.as_tensor(encoding.token_type_ids, device=device)
        self.special = torch.as_tensor(encoding.special, device=device)
        embeddings = session.model.get_input_embeddings()
        with torch.no_grad():  # not inference_mode: these tensors enter autograd later
            self.embeds = embeddings(ids).detach().clone()
            kept = self.special | (ids == session.tokenizer.mask_token_id) if session.tokenizer.mask_token_id is not None else self.special
            pad = session.tokenizer.pad_token_id if session.tokenizer.pad_token_id is not None else 0
            self.baseline = embeddings(torch.where(kept, ids, torch.full_like(ids, pad))).detach().clone()
        self.read_layer = session.num_layers
        length = len(encoding)
        self.position: int | None = None
        self.word: tuple[int, int, str] | None = None
        self.part = "span"
        if kind == "mlm":
            positions = mask_positions(session.tokenizer, encoding)
            if target.position is None:
                self.position = int(positions[0])
            elif target.position in positions:
                self.position = int(target.position)
            else:
                where = ", ".join(str(p) for p in positions)
                raise InputError(
                    f"position {target.position} is not a {MASK_TEXT}; the text's [MASK] positions are {where}", setting="position"
                )
            self.read_rows = np.array([self.position])
        elif kind == "token":
            self.word = chosen_word(encoding, target.word)
            self.position = self.word[1]
            self.read_rows = np.array([self.position])
        elif kind == "probe":
            assert probe is not None  # a probe decision comes with its probe
            self.read_layer = probe.layer
            self.read_rows = np.array([0]) if probe.pooling == "cls" else np.flatnonzero(~encoding.special)
        else:
            self.read_rows = np.array([0])
        if not len(self.read_rows):
            self.read_rows = np.arange(length)
        if kind == "similarity":
            self.index, self.label, self.num_classes = 0, "cosine", 1
            with torch.no_grad():
                self.output = float(self.f(self.embeds[None])[0])
            return
        with torch.no_grad():
            logits = self._logits(self.embeds[None])
        if kind == "answer":
            self.part = self._part(target.label)
            self.span = self._best_span(logits[0])
            self.index, self.label = self.span[0], self._answer_text(*self.span)
            self.read_rows = np.array([self.span[("start", "end").index(self.part)]] if self.part != "span" else list(self.span))
            self.num_classes = length
            self.output = float(self._span_score(logits)[0])
            return
        self.num_classes = logits.shape[-1]
        self.index, self.label = self._resolve(target.label, logits[0])
        self.output = float(self._score(logits)[0])

    def reads(self) -> list[tuple[Encoding, np.ndarray]]:
        """Each input run apart, with the rows of its own pass the decision reads (a rolled-out method's rows)."""
        if self.kind != "similarity":
            return [(self.encoding, self.read_rows)]
        modes = self.session.pooling.modes
        rows = []
        for side in self.sides:
            if modes == ("cls",):
                rows.append(np.array([0]))
            elif modes == ("lasttoken",):
                rows.append(np.array([len(side) - 1]))
            else:  # mean (and what mixes modes): every token the pooling reads
                rows.append(np.arange(len(side)))
        return list(zip(self.sides, rows, strict=True))

    def _logits(self, embeds: Tensor) -> Tensor:
        """`[B, C]` logits over the target's classes (vocabulary for mlm; `[B, 2, T]` start and end logits for answer)."""
        session = self.session
        inputs = {"inputs_embeds": embeds, "token_type_ids": self.token_type_ids.expand(len(embeds), -1)}
        if self.kind in ("class", "token", "answer"):
            outputs = session.run(inputs, gates=self.gates, ablation=self.ablation, hidden_states=False)
            if self.kind == "class":
                return cast(Tensor, outputs.logits.float())
            if self.kind == "token":
                return cast(Tensor, outputs.logits[:, self.position].float())
            return torch.stack([outputs.start_logits.float(), outputs.end_logits.float()], dim=1)
        hidden = session.run(inputs, gates=self.gates, ablation=self.ablation, encoder_only=True).hidden_states
        if self.kind == "mlm":
            head = session.mlm_head
            assert head is not None  # `_target_kind` refuses an MLM decision without the head
            return head(hidden[-1][:, self.position]).float()
        assert self.probe is not None  # a probe decision comes with its probe
        return self.probe.logits(hidden[self.read_layer], self.special)

    def _cosine(self, embeds: Tensor) -> Tensor:
        """The cosine `[B]` of the two sides' pooled embeddings, each side run alone."""
        pooled = []
        first = len(self.sides[0])
        for part in (embeds[:, :first], embeds[:, first:]):
            inputs = {"inputs_embeds": part, "token_type_ids": torch.zeros(part.shape[:2], dtype=torch.long, device=part.device)}
            hidden = self.session.run(inputs, gates=self.gates, ablation=self.ablation, hidden_states=False, encoder_only=True)
            pooled.append(self.session.pooling(hidden.last_hidden_state, torch.ones(part.shape[:2], device=part.device)))
        return torch.nn.functional.cosine_similarity(pooled[0].double(), pooled[1].double(), dim=-1)

    def f(self, embeds: Tensor) -> Tensor:
        """The explained score `[B]` of a batch of word embeddings `[B, T, D]`."""
        if self.kind == "similarity":
            return self._cosine(embeds)
        if self.kind == "answer":
            return self._span_score(self._logits(embeds))
        return self._score(self._logits(embeds))

    def _score(self, logits: Tensor) -> Tensor:
        if self.score_name == "logit":
            return logits[:, self.index]
        log_probabilities = torch.log_softmax(logits.double(), dim=-1)[:, self.index]
        return log_probabilities if self.score_name == "log-probability" else log_probabilities.exp()

    def _span_score(self, logits: Tensor) -> Tensor:
        """The answer's score from start and end logits `[B, 2, T]`: both parts summed (the span's), or one."""
        parts = (0, 1) if self.part == "span" else (("start", "end").index(self.part),)
        values = logits.double() if self.score_name == "logit" else torch.log_softmax(logits.double(), dim=-1)
        total = sum(values[:, part, self.span[part]] for part in parts)
        assert isinstance(total, Tensor)  # at least one part
        return total.exp() if self.score_name == "probability" else total

    def _part(self, label: str | None) -> str:
        part = (label or "span").strip().lower()
        if part not in SPAN_PARTS:
            raise InputError(
                f"target {label!r} is not a part of an answer; a QA decision explains {', '.join(SPAN_PARTS)}", setting="target"
            )
        return part

    def _best_span(self, logits: Tensor) -> tuple[int, int]:
        """The predicted answer (`answer_spans`' best)."""
        return answer_spans(logits, self.encoding)[0]

    def _answer_text(self, start: int, end: int) -> str:
        return self.session.tokenizer.convert_tokens_to_string(list(self.encoding.tokens[start : end + 1]))

    def _resolve(self, label: str | None, logits: Tensor) -> tuple[int, str]:
        if label is None:
            index = int(logits.argmax())
            return index, self._name(index)
        if self.kind == "mlm":
            answer = answer_id(self.session.tokenizer, label)
            if answer is None:
                raise InputError(f"target {label!r} is not one token of this model's vocabulary; give a one-token word", setting="target")
            return answer, self._name(answer)
        names = self._class_names(self.num_classes)
        lowered = {name.lower(): i for i, name in enumerate(names)}
        if label.lower() in lowered:
            return lowered[label.lower()], names[lowered[label.lower()]]
        if label.isdigit() and int(label) < len(names):
            return int(label), names[int(label)]
        if self.kind == "token":
            raise InputError(f"target {label!r} is not a label of this token classifier; its labels: {', '.join(names)}", setting="target")
        raise InputError(f"target {label!r} is not a class here; classes: {', '.join(names)}", setting="target")

    def _class_names(self, count: int) -> list[str]:
        if self.kind == "probe":
            assert self.probe is not None  # a probe decision comes with its probe
            return list(self.probe.classes)
        id2label = getattr(self.session.model.config, "id2label", None) or {}
        return [str(id2label.get(i, i)) for i in range(count)]

    def _name(self, index: int) -> str:
        if self.kind == "mlm":
            return cast(str, self.session.tokenizer.convert_ids_to_tokens(index))  # transformers: str for one id, a list for many
        return self._class_names(self.num_classes)[index]

    def describe(self) -> dict[str, Any]:
        description: dict[str, Any] = {"kind": self.kind, "label": self.label, "index": self.index}
        if self.kind == "mlm":
            description["position"] = self.position
        if self.kind == "token":
            assert self.word is not None  # a token decision has its word
            description.update(word=self.word[0], word_text=self.word[2], position=self.position)
        if self.kind == "answer":
            description.update(start=self.span[0], end=self.span[1], explained="start+end" if self.part == "span" else self.part)
        if self.kind == "similarity":
            description.update(pooling=self.session.pooling.source, first_tokens=len(self.sides[0]), second_tokens=len(self.sides[1]))
        if self.kind == "probe":
            assert self.probe is not None  # a probe decision comes with its probe
            description.update(self.probe.describe())
        return description
