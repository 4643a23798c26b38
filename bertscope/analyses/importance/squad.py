"""SQuAD's answer scores, as its official evaluation scripts compute them (plain Python, no torch).

The v1.1 script's answer normalisation (lower case, punctuation removed, the articles a, an
and the removed, whitespace collapsed), exact match and token-overlap F1, each the best over a
question's gold answers. An empty answer, SQuAD 2.0's "no answer", scores as the v2.0 script
scores it: 1 where gold and prediction are both empty, else 0 (v1.1 has no empty answers).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces: what SQuAD compares."""
    text = "".join(character for character in text.lower() if character not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of the normalised answers."""
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not wanted:
        return float(predicted == wanted)
    same = sum((Counter(predicted) & Counter(wanted)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(wanted)
    return 2 * precision * recall / (precision + recall)


def best_scores(prediction: str, golds: Sequence[str]) -> tuple[float, float]:
    """(exact match, F1) of `prediction`, each the best over `golds` (none: the question has no answer, gold "")."""
    golds = list(golds) or [""]
    return max(exact_match(prediction, gold) for gold in golds), max(f1(prediction, gold) for gold in golds)
