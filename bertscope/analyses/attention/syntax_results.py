"""Heads that track syntactic relations (Clark et al. 2019, §4), as plain data (numpy, no torch).

The statistics are integer counts, so results of shards of a corpus add up exactly
(`SyntaxResult.merged`): per relation, direction, layer and head the number of instances
whose most-attended other word is the right one, and per relation, direction and fixed
offset the number the offset baseline gets right. Accuracies are ratios of these counts.
Computed by analyses.attention.syntax; kept apart so the UI's contract can name it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DIRECTIONS = ("dependent_to_head", "head_to_dependent")
OFFSETS = (-3, -2, -1, 1, 2, 3)  # the fixed-offset baselines, in words; 0 (the word itself) is no prediction
DEFAULT_MIN_COUNT = 100  # fewer instances than this and a relation's best head is flagged as unreliable

# UD v2 universal relations (universaldependencies.org/u/dep); a label is one of these, or one with a `:subtype`.
UD_RELATIONS = frozenset(
    "acl advcl advmod amod appos aux case cc ccomp clf compound conj cop csubj dep det discourse dislocated expl "
    "fixed flat goeswith iobj list mark nmod nsubj nummod obj obl orphan parataxis punct reparandum root vocative "
    "xcomp".split()
)
# Clark et al. used Stanford Dependencies on the Penn Treebank; their names for UD v2's.
ALIASES = {"dobj": "obj", "poss": "nmod:poss", "nsubjpass": "nsubj:pass", "auxpass": "aux:pass", "pobj": "obl", "prep": "case"}


def relation_name(name: str) -> str:
    """A relation as the treebank labels it: Clark et al.'s `dobj` is UD v2's `obj`, `poss` is `nmod:poss`."""
    name = name.strip().lower()
    return ALIASES.get(name, name)


def is_known_relation(name: str) -> bool:
    """A UD v2 label: a universal relation, alone or with a language-specific `:subtype`."""
    return name.split(":", 1)[0] in UD_RELATIONS


@dataclass(frozen=True, repr=False)
class SyntaxResult(Shown):
    """Per relation (UD label as in the treebank, subtypes kept apart) and direction, every head's hits.

    `counts[r, d]`: instances of relation r in direction d (a dependent whose head is in the
    sentence, both words reaching the model). `correct[r, d, l, h]`: instances where head
    (l, h)'s most-attended other word is the right one. `baseline_correct[r, d, k]`: instances
    where the word at `OFFSETS[k]` from the query is the right one.
    """

    relations: tuple[str, ...]
    counts: np.ndarray  # [R, 2] int64
    correct: np.ndarray  # [R, 2, L, H] int64
    baseline_correct: np.ndarray  # [R, 2, len(OFFSETS)] int64
    sentences: int
    words: int
    truncated: int  # sentences cut to fit the model; relations with a word beyond the cut are not counted
    notes: tuple[str, ...] = ()  # what a person should be told about the outcome (lines skipped, sentences cut)

    def index(self, relation: str) -> int:
        return self.relations.index(relation_name(relation))

    def accuracy(self, relation: str, direction: str = DIRECTIONS[0]) -> npt.NDArray[np.float64]:
        """`[L, H]`: each head's share of the relation's instances it gets right (0 where there are none)."""
        r, d = self.index(relation), DIRECTIONS.index(direction)
        return cast(npt.NDArray[np.float64], self.correct[r, d] / max(int(self.counts[r, d]), 1))

    def best(self, relation: str, direction: str = DIRECTIONS[0]) -> tuple[int, int, float]:
        """(layer, head, accuracy) of the head that gets the relation right most often (the first on a tie)."""
        accuracy = self.accuracy(relation, direction)
        layer, head = np.unravel_index(int(np.argmax(accuracy)), accuracy.shape)
        return int(layer), int(head), float(accuracy[layer, head])

    def baseline(self, relation: str, direction: str = DIRECTIONS[0]) -> tuple[int, float]:
        """(offset, accuracy) of the best fixed-offset baseline."""
        r, d = self.index(relation), DIRECTIONS.index(direction)
        k = int(np.argmax(self.baseline_correct[r, d]))
        return OFFSETS[k], float(self.baseline_correct[r, d, k] / max(int(self.counts[r, d]), 1))

    def by_frequency(self) -> list[str]:
        """The relations, most frequent first, ties by name (the same order however the corpus was sharded)."""
        return sorted(self.relations, key=lambda name: (-int(self.counts[self.relations.index(name), 0]), name))

    def merged(self, other: SyntaxResult) -> SyntaxResult:
        """The sums of two results over disjoint sentences (shards of one corpus), relations matched by name."""
        relations = tuple(dict.fromkeys(self.relations + other.relations))
        arrays = []
        for name in ("counts", "correct", "baseline_correct"):
            total = np.zeros((len(relations), *getattr(self, name).shape[1:]), dtype=np.int64)
            for part in (self, other):
                rows = [relations.index(relation) for relation in part.relations]
                np.add.at(total, rows, getattr(part, name))
            arrays.append(total)
        counts, correct, baseline_correct = arrays
        return SyntaxResult(
            relations,
            counts,
            correct,
            baseline_correct,
            sentences=self.sentences + other.sentences,
            words=self.words + other.words,
            truncated=self.truncated + other.truncated,
        )

    def summary(self) -> str:
        num_layers, num_heads = self.correct.shape[2:]
        parts = [f"{self.sentences:,} sentences", f"{self.words:,} words", f"{len(self.relations)} relations"]
        parts.append(f"{num_layers}×{num_heads} heads")
        best = []
        for relation in self.by_frequency()[:3]:
            layer, head, accuracy = self.best(relation)
            best.append(f"{relation} {layer}:{head} {accuracy:.2f} (offset {self.baseline(relation)[1]:.2f})")
        return " · ".join(parts) + (" · best heads: " + ", ".join(best) if best else "")

    def table(self) -> list[dict[str, Any]]:
        """One row per relation and direction, most frequent first: its count, best head and best fixed-offset baseline."""
        return [
            {
                "relation": row["relation"],
                "direction": row["direction"],
                "count": row["count"],
                "layer": row["best"]["layer"],
                "head": row["best"]["head"],
                "accuracy": row["best"]["accuracy"],
                "baseline_offset": row["baseline"]["offset"],
                "baseline_accuracy": row["baseline"]["accuracy"],
            }
            for row in self.rows()
        ]

    def figure(self, relations: list[str] | None = None, direction: str = DIRECTIONS[0], under: str = "") -> Figure:
        """Each head's accuracy for each of `relations` (default: the four most frequent), one grid per relation on one
        0–1 scale, the best head boxed; the title of each names its count and the best fixed-offset baseline. `under`
        ends the note: what the passes ran under (" · mask 0:3 (zero)"), which the result does not hold."""
        from bertscope.figures.grids import Grid, head_grids

        if direction not in DIRECTIONS:
            raise InputError(f"no direction {direction!r}: choose {' or '.join(DIRECTIONS)}", setting="direction")
        chosen = [relation_name(name) for name in relations] if relations is not None else self.by_frequency()[:4]
        missing = [name for name in chosen if name not in self.relations]
        if missing or not chosen:
            have = ", ".join(self.by_frequency()[:12]) or "none"
            raise InputError(f"no instances of {', '.join(missing) or 'any relation'} in this corpus; it has {have}", setting="relations")
        panels = []
        for relation in chosen:
            layer, head, _ = self.best(relation, direction)
            offset, baseline = self.baseline(relation, direction)
            count = int(self.counts[self.index(relation), DIRECTIONS.index(direction)])
            title = f"{relation} (n = {count:,}) · best offset {offset:+d}: {baseline:.2f}"
            panels.append(Grid(self.accuracy(relation, direction), title, (layer, head)))
        arrow = direction.replace("_to_", " → ").replace("_", " ")
        return head_grids(
            panels,
            f"accuracy, {arrow}",
            title="heads that track dependency relations",
            note=f"over {self.sentences:,} sentences; the best head boxed{under}",
            vmin=0.0,
            vmax=1.0,
        )

    def rows(self, relations: list[str] | None = None, min_count: int = DEFAULT_MIN_COUNT) -> list[dict[str, Any]]:
        """One entry per relation and direction, as `bertscope syntax --json` prints them.

        `relations`: those to report, in that order (one absent from the corpus has count 0);
        default every relation of the corpus, most frequent first.
        """
        rows = []
        for relation in relations if relations is not None else self.by_frequency():
            relation = relation_name(relation)
            for direction in DIRECTIONS:
                if relation in self.relations:
                    count = int(self.counts[self.index(relation), DIRECTIONS.index(direction)])
                    layer, head, accuracy = self.best(relation, direction)
                    offset, baseline = self.baseline(relation, direction)
                    heads = np.round(self.accuracy(relation, direction), 6).tolist()
                else:
                    count, layer, head, accuracy, offset, baseline, heads = 0, 0, 0, 0.0, OFFSETS[0], 0.0, []
                rows.append(
                    {
                        "relation": relation,
                        "direction": direction,
                        "count": count,
                        "few": count < min_count,
                        "best": {"layer": layer, "head": head, "accuracy": round(accuracy, 6)},
                        "baseline": {"offset": offset, "accuracy": round(baseline, 6)},
                        "heads": heads,
                    }
                )
        return rows
