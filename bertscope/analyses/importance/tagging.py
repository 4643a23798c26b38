"""Entity-level F1 for token classification, as conlleval and seqeval (its default mode) define it.

Plain Python. Entities are read from IOB1, IOB2 or BIOES tags (`B-PER`, `I-PER`, `E-PER`,
`S-PER`, `O`) by conlleval's rules: an entity starts at B- or S-, at I- or E- after O, E- or S-,
and wherever the type changes; it ends before O, B- or S-, after E- or S-, and wherever the type
changes. F1 over a corpus is micro-averaged over its entities: 2·TP / (predicted + gold), an
entity counting as found only with its type and both its ends right. Label sets that are not
entity tags (POS tags, say) are scored by token accuracy instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

ENTITY_TAG = re.compile(r"^[BIES]-.+")


def scheme_of(label_names: Iterable[str], gold: Iterable[Sequence[str]]) -> str | None:
    """IOB1, IOB2 or BIOES when every label is O or a prefixed entity tag, else None (not entity tags).

    IOB1 and IOB2 have the same labels; they differ in the data: IOB2 begins every entity with
    B-, IOB1 only one that follows another of its type. Both are read by the same rules.
    """
    names = [name for name in label_names if name != "O"]
    if not names or not all(ENTITY_TAG.match(name) for name in names):
        return None
    if any(name[0] in "ES" for name in names):
        return "BIOES"
    for tags in gold:
        previous = "O"
        for tag in tags:
            if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
                return "IOB1"
            previous = tag
    return "IOB2"


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities of one sentence's tags: (type, first word, last word)."""
    found = set()
    start, previous, previous_type = 0, "O", ""
    for index, tag in enumerate([*tags, "O"]):
        prefix, entity_type = (tag[0], tag[2:]) if ENTITY_TAG.match(tag) else ("O", "")
        if _ends(previous, prefix, previous_type, entity_type):
            found.add((previous_type, start, index - 1))
        if _begins(previous, prefix, previous_type, entity_type):
            start = index
        previous, previous_type = prefix, entity_type
    return found


def _ends(previous: str, prefix: str, previous_type: str, entity_type: str) -> bool:
    """Whether an entity ended at the word before this one."""
    if previous in "ES":
        return True
    if previous in "BI" and prefix in "BSO":
        return True
    return previous != "O" and previous_type != entity_type


def _begins(previous: str, prefix: str, previous_type: str, entity_type: str) -> bool:
    """Whether an entity begins at this word."""
    if prefix in "BS":
        return True
    if prefix in "IE" and previous in "ESO":
        return True
    return prefix != "O" and previous_type != entity_type


def f1_counts(gold: Sequence[str], predicted: Sequence[str]) -> tuple[int, int]:
    """(2·TP, predicted + gold entities) of one sentence: summed over a corpus, their ratio is its micro F1."""
    wanted, found = entities(gold), entities(predicted)
    return 2 * len(wanted & found), len(wanted) + len(found)


def f1_score(gold: Iterable[Sequence[str]], predicted: Iterable[Sequence[str]]) -> float:
    """Micro-averaged entity F1 over sentences (0 where there is no entity at all, as seqeval)."""
    twice_found = counted = 0
    for wanted, guessed in zip(gold, predicted, strict=True):
        hits, count = f1_counts(wanted, guessed)
        twice_found, counted = twice_found + hits, counted + count
    return twice_found / counted if counted else 0.0
