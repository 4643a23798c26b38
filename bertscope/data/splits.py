"""A probe's train, dev and test sentences: given, read off a SentEval file's split column, or held out of train.

Plain data (no torch): `bertscope.task_sentences` hands a user the very splits a probe trains on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence


@dataclass(frozen=True)
class Splits:
    train: list[Sentence]
    dev: list[Sentence]
    test: list[Sentence]
    notes: list[str]


def make_splits(train: Sequence[Sentence], dev: Sequence[Sentence] | None, test: Sequence[Sentence] | None, seed: int = 0) -> Splits:
    """Use the given splits, the SentEval split column, or hold out parts of train (by sentence)."""
    train, notes = list(train), []
    if any(sentence.split for sentence in train):  # a SentEval file: its tr rows train; va/te unless given apart
        by_split = {name: [s for s in train if s.split == name] for name in ("tr", "va", "te")}
        train = by_split["tr"]
        dev = dev if dev is not None else by_split["va"]
        test = test if test is not None else by_split["te"]
    shuffled = train[:]
    random.Random(seed).shuffle(shuffled)
    if test is None or not test:
        cut = max(1, len(shuffled) // 5)
        test, shuffled = shuffled[:cut], shuffled[cut:]
        notes.append(f"no test split: held out {len(test)} training sentences (20%) for testing")
    if dev is None or not dev:
        cut = max(1, len(shuffled) // 10)
        dev, shuffled = shuffled[:cut], shuffled[cut:]
        notes.append(
            f"no dev split: held out {len(dev)} training sentences (10%) as dev (it chooses the L2 strength, or when training stops)"
        )
    train = shuffled if len(notes) else train
    for name, split in (("train", train), ("dev", dev), ("test", test)):
        if not split:
            raise InputError(f"the {name} split is empty; give more sentences or the missing split")
    return Splits(list(train), list(dev), list(test), notes)
