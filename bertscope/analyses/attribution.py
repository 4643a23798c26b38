"""Which input tokens a decision rests on: gradients, integrated gradients, attention rollout.

The decision (a `Target`) is one of: the masked-LM's score for a token at a [MASK], a
sequence classifier's score for a class, or a probe's score for a class of the sentence
(Mohebbi et al. 2021; see analyses.probing.decision). Its scalar output f is the
log-probability of that token or class (`score` can choose the probability or the raw
logit); the token or class is the model's own top choice unless one is named.

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

from bertscope.analyses.attribution_results import METHODS, MIXING, SCORES, Attribution, Target, TargetKind
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.mlm import MASK_TEXT, answer_id, mask_positions, with_mask_token
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.model.masks import Ablation
from bertscope.model.results import Encoding

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
        encoding=encoding, method=method, target=decision.describe(), score=score, mask=head_mask, ablation=ablation
    )
    if method == "attention-rollout":
        attentions = session.forward(encoding, attentions=True, mask=head_mask, ablation=ablation, mlm_logits=False).attentions
        assert attentions is not None  # asked for
        scores = rollout(attentions, decision.read_layer, decision.read_rows)
        yield Progress("done", 1, 1, Attribution(scores=scores, output=decision.output, **common))
        return
    if method in MIXING:
        from bertscope.analyses.mixing.run import context_mixing

        measure = context_mixing(session, encoding, method=MIXING[method], conditions=conditions, job=job)
        mixing = yield from relay(measure)
        if mixing is None:
            return  # cancelled
        rolled = mixing.rolled[decision.read_layer - 1] if decision.read_layer else np.eye(len(encoding))
        scores = rolled[decision.read_rows].mean(0).astype(np.float32)
        yield Progress("done", 1, 1, Attribution(scores=scores, output=decision.output, notes=mixing.notes, **common))
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
    elif session.is_classifier:
        kind = "class"
    else:
        kind = "mlm"
    if kind == "probe" and target.probe is None:
        raise InputError("a probe decision needs a probing task (e.g. subject_number)", setting="probe")
    if kind == "class" and not session.is_classifier:
        raise InputError(
            f"{session.info.architecture} is not a sequence classifier; explain an MLM guess or a probe's decision", setting="probe"
        )
    if kind == "mlm":
        if session.mlm_head is None or session.tokenizer.mask_token_id is None:
            raise InputError(
                f"{session.info.source} has neither an MLM head nor a classifier: explain a probe's decision instead, "
                "e.g. of the built-in task subject_number, or of a task in a SentEval file",
                setting="probe",
            )
        if not len(mask_positions(session.tokenizer, encoding)):
            raise InputError(
                f"the text has no {MASK_TEXT} for the MLM head to fill; write one, or explain a probe's decision",
                setting="probe",
            )
    return kind


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
        elif kind == "probe":
            assert probe is not None  # a probe decision comes with its probe
            self.read_layer = probe.layer
            self.read_rows = np.array([0]) if probe.pooling == "cls" else np.flatnonzero(~encoding.special)
        else:
            self.read_rows = np.array([0])
        if not len(self.read_rows):
            self.read_rows = np.arange(length)
        with torch.no_grad():
            logits = self._logits(self.embeds[None])
        self.num_classes = logits.shape[-1]
        self.index, self.label = self._resolve(target.label, logits[0])
        self.output = float(self._score(logits)[0])

    def _logits(self, embeds: Tensor) -> Tensor:
        """`[B, C]` logits over the target's classes (vocabulary for mlm)."""
        session = self.session
        inputs = {"inputs_embeds": embeds, "token_type_ids": self.token_type_ids.expand(len(embeds), -1)}
        if self.kind == "class":
            return cast(Tensor, session.run(inputs, gates=self.gates, ablation=self.ablation, hidden_states=False).logits.float())
        hidden = session.run(inputs, gates=self.gates, ablation=self.ablation, encoder_only=True).hidden_states
        if self.kind == "mlm":
            head = session.mlm_head
            assert head is not None  # `_target_kind` refuses an MLM decision without the head
            return head(hidden[-1][:, self.position]).float()
        assert self.probe is not None  # a probe decision comes with its probe
        return self.probe.logits(hidden[self.read_layer], self.special)

    def f(self, embeds: Tensor) -> Tensor:
        """The explained score `[B]` of a batch of word embeddings `[B, T, D]`."""
        return self._score(self._logits(embeds))

    def _score(self, logits: Tensor) -> Tensor:
        if self.score_name == "logit":
            return logits[:, self.index]
        log_probabilities = torch.log_softmax(logits.double(), dim=-1)[:, self.index]
        return log_probabilities if self.score_name == "log-probability" else log_probabilities.exp()

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
        description = {"kind": self.kind, "label": self.label, "index": self.index}
        if self.kind == "mlm":
            description["position"] = self.position
        if self.kind == "probe":
            assert self.probe is not None  # a probe decision comes with its probe
            description.update(self.probe.describe())
        return description
