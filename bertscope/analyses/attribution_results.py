"""What an attribution is and what it explains: plain types the CLI and the UI share (no torch).

The computation lives in analyses.attribution; see its docstring for the methods, the
baseline and the completeness error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bertscope.figures.notebook import Shown
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding

if TYPE_CHECKING:
    from matplotlib.figure import Figure

METHODS = ("gradient", "gradient-x-input", "integrated-gradients", "attention-rollout", "attention-flow", "norms", "value-zeroing", "alti")
METHOD_NAMES = {
    "gradient": "gradient saliency",
    "gradient-x-input": "gradient × input",
    "integrated-gradients": "integrated gradients",
    "attention-rollout": "attention rollout",
    "attention-flow": "attention flow",
    "norms": "value-weighted norms rolled out",
    "value-zeroing": "value zeroing rolled out",
    "alti": "ALTI rolled out",
}
# The methods that read a row of a context-mixing measure rolled out from the input (analyses.mixing.run), by its name there.
MIXING = {"attention-flow": "flow", "norms": "norms", "value-zeroing": "value-zeroing", "alti": "alti"}
SIGNED = ("gradient-x-input", "integrated-gradients")  # the methods whose scores can push either way
SCORES = ("log-probability", "probability", "logit")
SPAN_PARTS = ("span", "start", "end")  # what a QA decision explains: start + end (the span), or one of them

TargetKind = Literal["mlm", "class", "probe", "token", "answer", "similarity"]
TARGET_KINDS: tuple[TargetKind, ...] = ("mlm", "class", "probe", "token", "answer", "similarity")


TASK_KINDS = ("token", "answer", "similarity")  # the decisions of a fine-tuned task's head (or pooling)
SCORE_SYMBOLS = {"log-probability": "log p", "probability": "p", "logit": "logit", "cosine": "cos"}


def task_decision(target: dict[str, Any], f: str, short: bool = False) -> str:
    """What a token label, answer span or similarity decision explains, in words (`f`: the score's symbol)."""
    if target["kind"] == "token":
        return f"{f}({target['label']}) at word {target['word']} ({target['word_text']})"
    if target["kind"] == "answer":
        parts = " + ".join(f"{f}({part}={target[part]})" for part in target["explained"].split("+"))
        return f"{parts}, answer {target['label']!r}"
    return "cos(first, second)" if short else f"the cosine of the two sentences' embeddings ({target['pooling']})"


@dataclass(frozen=True)
class Target:
    """What to explain. `kind` None picks: a probe if `probe` is given, else the model's own head (a token
    classifier's label at `word`, a QA model's answer span, a sequence classifier's class, the MLM head's guess at
    the [MASK]), else, for a model with none of those and a pair of sentences, the cosine of their embeddings.

    `label`: the token (mlm), class (class, probe) or entity label (token) whose score is explained; None = the
    model's top choice; for a QA model `span` (default: start + end), `start` or `end` of the predicted answer.
    `word`: the token classifier's word, by index (an int or its digits) or its text.
    `position`: the [MASK]'s token position (None = the first [MASK]).
    `probe`, `data`, `layer`, `pooling`: the probe task, its SentEval file (None = the
    built-in generated task), the hidden-state layer it reads (None = best on dev) and how
    it pools the sentence.
    """

    kind: TargetKind | None = None
    label: str | None = None
    position: int | None = None
    word: int | str | None = None
    probe: str | None = None
    data: str | None = None
    layer: int | None = None
    pooling: str = "cls"


@dataclass(frozen=True, repr=False)
class Attribution(Shown):
    """Per-token scores `[T]` for one decision, with what the decision was."""

    encoding: Encoding
    method: str
    scores: np.ndarray  # [T]
    target: dict[str, Any]  # kind, label, and where it is read (position / layer / probe details)
    score: str  # what f is: log-probability, probability or logit (cosine for a similarity)
    output: float  # f(x)
    baseline_output: float | None = None  # f(b), integrated gradients only
    completeness_error: float | None = None
    steps: int | None = None
    mask: HeadMask | None = None
    ablation: Ablation = "zero"
    notes: tuple[str, ...] = ()

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.encoding.tokens

    def words(self) -> list[dict[str, Any]]:
        """Scores summed over each word's sub-word tokens (special tokens left out)."""
        groups: dict[tuple[int, int], list[int]] = {}
        for index, (word, segment) in enumerate(zip(self.encoding.word_ids, self.encoding.segment_ids)):
            if word is not None and not self.encoding.special[index]:
                groups.setdefault((segment or 0, word), []).append(index)
        return [
            {
                "word": "".join(self.tokens[i].removeprefix("##") if n else self.tokens[i] for n, i in enumerate(positions)),
                "positions": positions,
                "score": float(self.scores[positions].sum()),
            }
            for positions in groups.values()
        ]

    def summary(self) -> str:
        explained = " ".join(str(self.target[key]) for key in ("kind", "label") if self.target.get(key) is not None)
        top = sorted(self.words(), key=lambda word: -abs(word["score"]))[:3]
        words = ", ".join(f"{word['word']} {word['score']:.3g}" for word in top)
        return f"{self.method} · explains {explained} ({self.score} {self.output:.4g}) · {len(self.tokens)} tokens · strongest: {words}"

    def table(self) -> list[dict[str, Any]]:
        """One row per token: its position, text and score."""
        return [{"position": i, "token": token, "score": float(score)} for i, (token, score) in enumerate(zip(self.tokens, self.scores))]

    def figure(self) -> Figure:
        """The tokens in a row, each shaded by its score (orange raises the explained score, purple lowers it), the colour
        bar naming the method and what it explains."""
        from bertscope.figures.strips import attribution_strip

        target, f = self.target, SCORE_SYMBOLS[self.score]
        if target["kind"] == "mlm":
            explained = f"{f}({target['label']}) at the [MASK] at {target['position']}"
        elif target["kind"] in TASK_KINDS:
            explained = task_decision(target, f)
        elif target["kind"] == "class":
            explained = f"{f}(class {target['label']})"
        else:
            explained = f"{f}({target['label']}) of the {target['task']} probe on layer {target['layer']}"
        note = None
        if self.method == "integrated-gradients" and self.completeness_error is not None and np.isfinite(self.completeness_error):
            note = f"completeness error {self.completeness_error:.1%} ({self.steps} steps)"
        if self.mask is not None and len(self.mask):
            note = "; ".join(part for part in (note, f"heads off {self.mask.spec()} ({self.ablation})") if part)
        return attribution_strip(
            self.tokens,
            self.scores,
            label=f"{METHOD_NAMES[self.method]} of {explained} = {self.output:.3g}",
            special=self.encoding.special,
            signed=self.method in SIGNED,
            note=note,
        )

    def as_json(self) -> dict[str, Any]:
        payload = {
            "tokens": list(self.tokens),
            "method": self.method,
            "target": self.target,
            "score": self.score,
            "output": round(self.output, 6),
            "attributions": [
                {"position": i, "token": token, "score": round(float(s), 6)} for i, (token, s) in enumerate(zip(self.tokens, self.scores))
            ],
            "words": [{**w, "score": round(w["score"], 6)} for w in self.words()],
            "mask": self.mask.spec() if self.mask is not None else "",
            "ablation": self.ablation,
        }
        if self.method == "integrated-gradients":
            assert self.baseline_output is not None and self.completeness_error is not None  # integrated gradients sets both
            payload.update(
                baseline_output=round(self.baseline_output, 6),
                steps=self.steps,
                completeness_error=None if np.isnan(self.completeness_error) else round(self.completeness_error, 6),
                baseline="[PAD] word embeddings; [CLS], [SEP] and [MASK] kept",
            )
        payload["notes"] = list(self.notes)
        return payload
