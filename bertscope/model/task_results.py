"""What a fine-tuned model predicts for one input, as plain values (torch-free: the explorer's prediction pane).

A token classifier labels each word at its first word piece (transformers' token-classification
convention); an extractive question-answering model picks the best answer span in the context
(question first, context second, as transformers' run_qa feeds them); a sentence-embedding model
gives the cosine between the two segments' pooled embeddings, each segment embedded on its own
(sentence-transformers' bi-encoder). `model.task_heads` computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_ANSWER_TOKENS = 30  # transformers' run_qa max_answer_length


@dataclass(frozen=True)
class WordLabels:
    """A token classifier's label for each word of the input, read at the word's first piece."""

    words: tuple[str, ...]
    labels: tuple[str, ...]
    probabilities: tuple[float, ...]  # of each chosen label (softmax over the model's labels)
    positions: tuple[int, ...]  # the token index of each word's first piece

    task = "token-classification"


@dataclass(frozen=True)
class AnswerSpan:
    """An extractive QA model's best span in the context (start ≤ end, at most MAX_ANSWER_TOKENS tokens).

    `score` is start logit + end logit, run_qa's span score; `null_score` is [CLS]'s, which outscores every
    span where the model answers nothing (SQuAD 2.0); `probability` is the span's share of the softmax over
    every span scored."""

    start: int
    end: int
    text: str
    score: float
    null_score: float
    probability: float

    task = "qa"

    @property
    def no_answer(self) -> bool:
        return self.null_score > self.score


@dataclass(frozen=True)
class SegmentSimilarity:
    """The cosine between the pooled embeddings of the input's two segments, each embedded alone."""

    cosine: float
    pooling: str  # how the embeddings were pooled (model.pooling's source line)

    task = "similarity"


TaskPrediction = WordLabels | AnswerSpan | SegmentSimilarity
