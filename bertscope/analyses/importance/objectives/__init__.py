"""What head importance is measured against: the objectives, as losses under head gates.

Every objective turns a batch of sentences and `[R, L, H]` gates into a loss per row (lower
is better) and a metric per row (higher is better), so that one code path serves gradients
through float gates (Michel et al.), exact ablation with many masks batched as rows, and
pruning curves:

- `mlm`: cross-entropy of the MLM head on a seeded 15% of each sentence's tokens, replaced
  by [MASK]; metric: accuracy on them. Models with an MLM head.
- `classification`: cross-entropy of the model's classifier on labelled sentences (a
  SentEval-style file, labels by name or number); metric: accuracy. Sequence classifiers.
- `probe`: cross-entropy of a probe trained by the probing feature on one hidden-state layer
  (0 = embeddings) for one task, measured on the held-out test sentences; metric: accuracy.
  Any encoder, with labelled data or a built-in task.
- `preserve`: how far the final hidden states move, Σ‖h' − h‖² / Σ‖h‖² over a sentence's
  real tokens; metric: mean cosine of h' to h. Any encoder, any text.
- `token-classification`: cross-entropy of a token classifier's labels (a CoNLL-2003 or
  CoNLL-U file, labels by the model's id2label names) at each word's first word piece, as
  transformers' token-classification examples label them, averaged over the corpus's labelled
  pieces; metric: entity-level F1 as conlleval and seqeval define it for IOB1, IOB2 and BIOES
  labels (analyses.importance.tagging), token accuracy for other label sets.
- `similarity`: a sentence-embedding model on pairs with gold scores; each sentence pooled as the
  model's sentence-transformers files say (model.pooling), the loss the squared error between
  the pair's cosine and its score scaled to [0, 1] (sentence-transformers' CosineSimilarityLoss);
  metric: Spearman's rho between cosines and scores over the corpus.
- `embedding`: how far each sentence's pooled embedding turns, 1 − cos(e', e); metric: the
  mean cosine. The sentence-level `preserve`, for any encoder and any text.
- `qa`: an extractive question-answering model on SQuAD questions, each question and its
  context in the windows transformers' run_qa makes of a long context (384 tokens or the model's
  limit, overlapping by 128 or a third of that); the loss (CE(start) + CE(end)) / 2 of the first
  gold answer's tokens found from the offsets ([CLS] where a window lacks the answer, or the
  question has none), averaged over the windows; metric: SQuAD's F1 of the best span across a
  question's windows (analyses.importance.squad), its exact match in the notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bertscope.analyses.importance.objectives.base import Batch, Batches, Objective, Scores, Tally, sentence_batches
from bertscope.analyses.importance.objectives.embeddings import EmbeddingObjective, SimilarityObjective
from bertscope.analyses.importance.objectives.probe import ProbeObjective
from bertscope.analyses.importance.objectives.qa import QuestionAnsweringObjective
from bertscope.analyses.importance.objectives.sentences import ClassificationObjective, MLMObjective, PreserveObjective
from bertscope.analyses.importance.objectives.token_classification import TokenClassificationObjective
from bertscope.analyses.importance.results import OBJECTIVES, check_objective_heads, missing_heads
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence

if TYPE_CHECKING:
    from bertscope.data.splits import Splits
    from bertscope.model.session import Session

__all__ = ["Batch", "Batches", "Objective", "ProbeObjective", "Scores", "Tally", "check_objective", "make_objective"]


def check_objective(session: Session, name: str) -> str:
    """`name` if this model can serve it, else an InputError listing the objectives that work."""
    has_mlm_head = session.mlm_head is not None
    if name not in OBJECTIVES:
        working = ", ".join(o for o in OBJECTIVES if o not in missing_heads(session.info.architecture, has_mlm_head, session.is_classifier))
        raise InputError(f"unknown objective {name!r}; objectives for this model: {working}")
    check_objective_heads(name, session.info.architecture, has_mlm_head, session.is_classifier)
    return name


def make_objective(
    session: Session,
    name: str,
    sentences: Sequence[Sentence],
    *,
    batch_size: int | None = None,
    seed: int = 0,
    probe_task: str | None = None,
    probe_layer: int | None = None,
    probe_data: Splits | None = None,
) -> Objective:
    """Prepare `name` over these sentences (tokenised, masked and labelled once, deterministically)."""
    check_objective(session, name)
    sentences = list(sentences)
    if name == "probe":
        return ProbeObjective.build(
            session, sentences, batch_size=batch_size, seed=seed, task=probe_task, layer=probe_layer, splits=probe_data
        )
    if not sentences:
        raise InputError("no sentences to measure the objective on; give a corpus with at least one sentence")
    objective: Objective
    if name == "mlm":
        objective = MLMObjective.build(session, sentences, batch_size, seed)
    elif name == "classification":
        objective = ClassificationObjective.build(session, sentences, batch_size)
    elif name == "token-classification":
        objective = TokenClassificationObjective.build(session, sentences, batch_size)
    elif name == "qa":
        objective = QuestionAnsweringObjective.build(session, sentences, batch_size)
    elif name == "similarity":
        objective = SimilarityObjective.build(session, sentences, batch_size)
    elif name == "embedding":
        notes = [f"sentences embedded by {session.pooling.source}"]
        objective = EmbeddingObjective(session, sentence_batches(session, sentences, batch_size), len(sentences), notes)
    else:
        objective = PreserveObjective(session, sentence_batches(session, sentences, batch_size), len(sentences))
    objective.texts = [sentence.text for sentence in sentences]
    return objective
