"""Built-in sentence-level probing tasks, generated from a small seeded grammar.

Layer-wise probing (Conneau et al. 2018, *What you can cram into a single vector*;
Jawahar et al. 2019) needs labelled sentences. These come from code, not a download: a
grammar of 46 nouns and 37 verbs builds every sentence from parts whose number and tense
it knows, so each label is right by construction and a test can recompute it from the
words. Plain Python, so the CLI and the UI can list and export tasks without torch.

Within each split the labels are balanced, and so are the confounds that would give a
label away without the knowledge the task asks for (the number of an attractor noun, the
tense of an embedded verb): they are drawn independently of the label. No sentence text
appears twice in one data set, and a shifted or inverted sentence never appears beside
its original, so a probe cannot match pairs across splits.
"""

from __future__ import annotations

import itertools
import os
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from bertscope.base.errors import InputError
from bertscope.data.corpus import SPLITS, Sentence
from bertscope.data.files import atomic_write


@dataclass(frozen=True)
class ProbingTask:
    """One built-in task: its name, its group in Conneau et al.'s taxonomy, and its labels."""

    name: str
    group: str  # "surface" | "syntactic" | "semantic"
    description: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    """A generated sentence and what the grammar knows about it.

    `facts` holds the structure behind the label: word indices (into the words of the
    text without its final period, split at spaces) of the subject and object heads, the
    main verb, attractor nouns and embedded verbs, with their number and tense. Tests use
    them to check labels; analyses can use them for control tasks (Hewitt & Liang 2019)
    or to ask whether a probe reads the attractor instead of the head.
    """

    sentence: Sentence
    facts: Mapping[str, object] = field(default_factory=dict)


LENGTH_BINS = ((5, 7), (8, 9), (10, 11), (12, 13), (14, 16), (17, 20))
"""The `sentence_length` bins, in words: whitespace-separated, the last one with its period."""

MIN_WORDS, MAX_WORDS = 5, 20

WORD_TASKS = ("upos", "xpos", "deprel")
"""Tasks over a treebank's words, read from CoNLL-U columns (or the built-in treebank)."""
STRUCTURAL_TASKS = ("depth", "distance")
"""Hewitt & Manning's structural probes, over a treebank's dependency tree."""
TREEBANK_TASKS = WORD_TASKS + STRUCTURAL_TASKS

TASKS: dict[str, ProbingTask] = {
    task.name: task
    for task in (
        ProbingTask(
            "sentence_length",
            "surface",
            "number of words (split at spaces) in six bins: 5-7, 8-9, 10-11, 12-13, 14-16, 17-20",
            tuple(f"{low}-{high}" for low, high in LENGTH_BINS),
        ),
        ProbingTask(
            "bigram_shift",
            "syntactic",
            "O: as generated; I: two adjacent words swapped (never the first word or the final period)",
            ("O", "I"),
        ),
        ProbingTask(
            "agreement_attractors",
            "syntactic",
            "correct/wrong: does the main verb agree in number with the subject's head noun, across an "
            "attractor noun (in a prepositional phrase or relative clause) whose number is independent",
            ("correct", "wrong"),
        ),
        ProbingTask(
            "main_verb_tense",
            "semantic",
            "past/present tense of the main-clause verb; every sentence has an embedded verb whose tense is independent of the label",
            ("past", "present"),
        ),
        ProbingTask(
            "subject_number",
            "semantic",
            "NN/NNS: number of the main-clause subject's head noun, past an attractor noun of either number",
            ("NN", "NNS"),
        ),
        ProbingTask(
            "object_number",
            "semantic",
            "NN/NNS: number of the direct object's head noun, past an attractor noun of either number",
            ("NN", "NNS"),
        ),
        ProbingTask(
            "coordination_inversion",
            "semantic",
            "O: two clauses 'X, and Y.' in the order the events happen; I: the same clauses inverted",
            ("O", "I"),
        ),
    )
}


def generate(task: str, *, train: int = 2000, dev: int = 400, test: int = 400, seed: int = 0) -> list[Sentence]:
    """The sentences of a built-in task: `train`, then `dev`, then `test` of them.

    Each has its label, its split (`tr`, `va`, `te`) and a location `builtin:<task>:<n>`,
    `n` counting from 1 (the line it gets from `write_senteval`). The same arguments give
    the same sentences on every machine and Python.
    """
    return [example.sentence for example in generate_examples(task, train=train, dev=dev, test=test, seed=seed)]


def generate_examples(task: str, *, train: int = 2000, dev: int = 400, test: int = 400, seed: int = 0) -> list[Example]:
    """`generate`, with the grammar's facts about each sentence (see `Example`)."""
    spec = _spec(task)
    sizes = _sizes(train=train, dev=dev, test=test)
    # A str seed is hashed with SHA-512 by `random`, not by Python's salted hash(): stable everywhere.
    rng = random.Random(f"bertscope:{task}:{seed}")
    used: set[str] = set()
    drafts: list[tuple[str, _Draft]] = []
    for split, size in zip(SPLITS, sizes):
        planned = [_draw(task, spec, cell, rng, used) for cell in _plan(TASKS[task].labels, spec, size, rng)]
        rng.shuffle(planned)
        drafts.extend((split, draft) for draft in planned)
    return [
        Example(
            Sentence(draft.text, location=f"builtin:{task}:{number}", label=draft.label, split=split),
            draft.facts,
        )
        for number, (split, draft) in enumerate(drafts, start=1)
    ]


def write_senteval(path: str | os.PathLike[str], sentences: Iterable[Sentence]) -> int:
    """Write `split<TAB>label<TAB>sentence` lines (SentEval's probing format); return how many.

    Written atomically and in UTF-8 whatever the locale, so `read_sentences` reads back
    exactly what was written and a failure leaves no half file.
    """
    count = 0
    with atomic_write(path, "wb") as handle:
        for sentence in sentences:
            where = sentence.location or f"sentence {count + 1}"
            if sentence.split not in SPLITS or not sentence.label:
                raise InputError(f"{where}: a SentEval line needs a split (tr, va or te) and a label; give both")
            if any(bad in part for part in (sentence.label, sentence.text) for bad in "\t\r\n"):
                raise InputError(f"{where}: a tab or line break inside a label or sentence; remove it first")
            handle.write(f"{sentence.split}\t{sentence.label}\t{sentence.text}\n".encode())
            count += 1
    return count


# --- tasks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Draft:
    """A candidate sentence; `twin` is its shifted or inverted counterpart, kept out of the set."""

    text: str
    label: str
    facts: Mapping[str, object]
    twin: str | None = None


@dataclass(frozen=True)
class _Spec:
    """How to build a task: the nuisance values to balance within each label, and a builder.

    The builder gets the cell `(label, *nuisances)` and returns a draft, or None to try again.
    """

    nuisances: tuple[tuple[str, ...], ...]
    build: Callable[[random.Random, tuple[str, ...]], _Draft | None]


_MAX_TRIES = 2000


def _spec(task: str) -> _Spec:
    if task not in TASKS:
        raise InputError(f"unknown probing task {task!r}; choose one of: {', '.join(TASKS)}")
    return _SPECS[task]


def _sizes(**sizes: int) -> tuple[int, ...]:
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InputError(f"the {name} size must be a whole number 0 or more, not {size!r}")
    return tuple(sizes.values())


def _plan(labels: tuple[str, ...], spec: _Spec, size: int, rng: random.Random) -> list[tuple[str, ...]]:
    """`size` cells, each round covering every cell once: labels and nuisances balance.

    Inside a round the labels cycle within each nuisance combination, so a cut-off last
    round leaves no label more than one ahead of another.
    """
    order = list(labels)
    combos = list(itertools.product(*spec.nuisances))
    cells: list[tuple[str, ...]] = []
    while len(cells) < size:
        rng.shuffle(combos)
        for combo in combos:
            rng.shuffle(order)
            cells.extend((label, *combo) for label in order)
    return cells[:size]


def _draw(task: str, spec: _Spec, cell: tuple[str, ...], rng: random.Random, used: set[str]) -> _Draft:
    """A draft for `cell` that fits the length limits and repeats no text already used."""
    for _ in range(_MAX_TRIES):
        draft = spec.build(rng, cell)
        if draft is None or draft.label != cell[0] or not MIN_WORDS <= len(draft.text.split()) <= MAX_WORDS:
            continue
        if draft.text in used or draft.twin in used:
            continue
        used.add(draft.text)
        if draft.twin:
            used.add(draft.twin)
        return draft
    raise InputError(f"the grammar of {task} ran out of new sentences after {len(used):,}; ask for fewer sentences")


def _length_label(text: str) -> str:
    words = len(text.split())
    return next((f"{low}-{high}" for low, high in LENGTH_BINS if low <= words <= high), "")


def _build_length(rng: random.Random, cell: tuple[str, ...]) -> _Draft | None:
    # A richness drawn per sentence spreads the lengths over all the bins.
    words, facts = _declarative(rng, richness=rng.uniform(0.05, 0.95))
    text = _text(words)
    return _Draft(text, _length_label(text), {**facts, "words": len(text.split())})


def _build_bigram(rng: random.Random, cell: tuple[str, ...]) -> _Draft | None:
    words, facts = _declarative(rng)
    original = _text(words)
    if cell[0] == "O":
        return _Draft(original, "O", {**facts, "original": original, "swap": None})
    # Swap words i and i+1: never the first word (it carries the capital), the period stays last.
    places = [i for i in range(1, len(words) - 1) if words[i] != words[i + 1]]
    if not places:
        return None
    i = rng.choice(places)
    shifted = words[:i] + [words[i + 1], words[i]] + words[i + 2 :]
    return _Draft(_text(shifted), "I", {**facts, "original": original, "swap": i}, twin=original)


def _build_agreement(rng: random.Random, cell: tuple[str, ...]) -> _Draft | None:
    label, subject_number, attractor_number = cell
    verb_number = subject_number if label == "correct" else _other(subject_number)
    # Only a present verb or a copula shows its number; embedded verbs are past, so they show none.
    predicate = rng.choice(_PREDICATES)
    tense = rng.choice(_TENSES) if predicate == "copula" else "present"
    words, facts = _declarative(
        rng,
        subject_number=subject_number,
        verb_number=verb_number,
        tense=tense,
        predicate=predicate,
        subject_attractor=attractor_number,
        object_attractor=None,
        embedded_tense="past",
        clause=False,
    )
    return _Draft(_text(words), label, facts)


def _build_tense(rng: random.Random, cell: tuple[str, ...]) -> _Draft | None:
    label, embedded_tense = cell
    words, facts = _declarative(
        rng,
        tense=label,
        embedded_tense=embedded_tense,
        modifiers=("subject_rc", "object_rc"),
        clause=rng.random() < 0.4,
    )
    if not facts["embedded"]:
        return None
    return _Draft(_text(words), label, facts)


def _build_subject_number(rng: random.Random, cell: tuple[str, ...]) -> _Draft | None:
    label, attractor_number = cell
    words, facts = _declarative(rng, subject_number=label, subject_attractor=attractor_number)
    return _Draft(_text(words), label, facts)


def _build_object_number(rng: random.Random, cell: tuple[str, ...]) -> _Draft | None:
    label, attractor_number = cell
    words, facts = _declarative(rng, predicate="transitive", object_number=label, object_attractor=attractor_number)
    return _Draft(_text(words), label, facts)


def _build_coordination(rng: random.Random, cell: tuple[str, ...]) -> _Draft | None:
    label = cell[0]
    index = rng.randrange(len(_SCRIPTS))
    events = tuple(_fill(rng, event) for event in _SCRIPTS[index])
    subject, pronoun = _protagonist(rng)
    opening = rng.choice(_TIME_PHRASES)

    def sentence(first: str, second: str) -> str:
        return _text(f"{opening} {subject} {first}, and {pronoun} {second}".split())

    original, inverted = sentence(*events), sentence(*reversed(events))
    facts = {"script": index, "events": events, "subject": subject, "pronoun": pronoun}
    if label == "O":
        return _Draft(original, "O", facts, twin=inverted)
    return _Draft(inverted, "I", facts, twin=original)


# --- the grammar ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Noun:
    singular: str
    plural: str
    kind: str  # "person", "animal" or "thing"
    pronoun: str = ""  # "he" or "she" where the singular has one; plurals take "they"

    def form(self, number: str) -> str:
        return self.singular if number == "NN" else self.plural


@dataclass(frozen=True)
class _Verb:
    present3: str
    present: str
    past: str
    takes: str  # its object: "any", "animate", "thing", or "" for none
    subject: str = "animate"  # "animate" or "person"

    def form(self, tense: str, number: str) -> str:
        if tense == "past":
            return self.past
        return self.present3 if number == "NN" else self.present


def _nouns(kind: str, spec: str) -> tuple[_Noun, ...]:
    """`_Noun`s from `singular/plural[/pronoun]` items; a bare word takes -s."""
    nouns = []
    for item in spec.split():
        parts = item.split("/")
        plural = parts[1] if len(parts) > 1 and parts[1] else parts[0] + "s"
        nouns.append(_Noun(parts[0], plural, kind, parts[2] if len(parts) > 2 else ""))
    return tuple(nouns)


def _verbs(takes: str, spec: str, subject: str = "animate") -> tuple[_Verb, ...]:
    """`_Verb`s from `present3/present/past` items."""
    forms = (item.split("/") for item in spec.split())
    return tuple(_Verb(present3, present, past, takes, subject) for present3, present, past in forms)


_NOUNS = (
    _nouns(
        "person",
        "man/men/he woman/women/she boy//he girl//she child/children teacher doctor farmer student driver "
        "artist neighbor writer baker nurse pilot",
    )
    + _nouns("animal", "dog cat horse bird mouse/mice fox/foxes wolf/wolves goose/geese rabbit duck")
    + _nouns(
        "thing",
        "key book box/boxes cup table chair door window letter bottle knife/knives glass/glasses lamp bag "
        "coin picture shelf/shelves cabinet map ball",
    )
)
_VERBS = (
    _verbs(
        "any",
        "sees/see/saw finds/find/found watches/watch/watched likes/like/liked notices/notice/noticed "
        "wants/want/wanted holds/hold/held carries/carry/carried touches/touch/touched hides/hide/hid "
        "washes/wash/washed lifts/lift/lifted",
    )
    + _verbs(
        "animate",
        "follows/follow/followed chases/chase/chased feeds/feed/fed helps/help/helped calls/call/called meets/meet/met",
    )
    + _verbs(
        "thing",
        "pushes/push/pushed pulls/pull/pulled opens/open/opened cleans/clean/cleaned paints/paint/painted "
        "drops/drop/dropped breaks/break/broke fixes/fix/fixed buys/buy/bought brings/bring/brought",
        subject="person",
    )
    + _verbs("", "sleeps/sleep/slept waits/wait/waited runs/run/ran sits/sit/sat rests/rest/rested stands/stand/stood")
    + _verbs("", "smiles/smile/smiled laughs/laugh/laughed works/work/worked", subject="person")
)
_COPULA = {("present", "NN"): "is", ("present", "NNS"): "are", ("past", "NN"): "was", ("past", "NNS"): "were"}

_ADJECTIVES = {
    "person": ("old", "young", "tall", "happy", "tired", "clever", "angry", "quiet", "friendly", "new"),
    "animal": ("old", "young", "small", "big", "brown", "black", "hungry", "angry", "quiet", "friendly"),
    "thing": ("old", "small", "big", "red", "heavy", "empty", "broken", "new", "wooden", "blue"),
}
# "the" and the possessives go with either number, so the determiner only sometimes tells it.
_SHARED_DETERMINERS = ("the", "the", "the", "the", "my", "his", "her", "our", "their")
_DETERMINERS = {"NN": ("a", "this", "that", "every"), "NNS": ("these", "those", "some", "two", "three", "many")}
_MODIFIER_PREPOSITIONS = ("near", "behind", "beside", "with", "from", "under")
_PLACE_PREPOSITIONS = ("on", "under", "near", "behind", "beside", "in")
_ADVERBS = ("quickly", "slowly", "quietly", "carefully", "happily", "suddenly", "again", "often")
_CONJUNCTIONS = ("because", "although", "while", "when")
_NUMBERS = ("NN", "NNS")
_TENSES = ("past", "present")
_PREDICATES = ("copula", "transitive", "intransitive")
_ANY = "any"  # a modifier left to chance: present or not, attractor of either number


def _other(number: str) -> str:
    return "NNS" if number == "NN" else "NN"


def _text(words: list[str]) -> str:
    """Words as a sentence: a capital first letter and a final period."""
    first = words[0][:1].upper() + words[0][1:]
    return " ".join([first, *words[1:]]) + "."


def _pick(rng: random.Random, value: str | None, options: tuple[str, ...]) -> str:
    return rng.choice(options) if value is None else value


def _noun_phrase(rng: random.Random, number: str, kinds: tuple[str, ...], richness: float) -> tuple[list[str], _Noun]:
    """`[determiner, (adjective), noun]` and the noun; the head is always the last word."""
    noun = rng.choice([noun for noun in _NOUNS if noun.kind in kinds])
    determiner = rng.choice(_SHARED_DETERMINERS if rng.random() < 0.7 else _DETERMINERS[number])
    words = [determiner]
    if rng.random() < richness * 0.6:
        words.append(rng.choice(_ADJECTIVES[noun.kind]))
    words.append(noun.form(number))
    if determiner == "a" and words[1][0] in "aeiou":
        words[0] = "an"
    return words, noun


def _verb(rng: random.Random, subject: _Noun, object_kind: str | None) -> _Verb:
    """A verb that `subject` can do, transitive with an object of `object_kind` unless that is None."""
    fits = [
        verb
        for verb in _VERBS
        if (verb.subject == "animate" or subject.kind == "person")
        and (
            not verb.takes
            if object_kind is None
            else verb.takes == "any" or verb.takes == object_kind or (verb.takes == "animate" and object_kind != "thing")
        )
    ]
    return rng.choice(fits)


class _Builder:
    """Words of one sentence as they are added, with the facts about them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words: list[str] = []
        self.embedded: list[tuple[int, str]] = []  # (index, tense) of each embedded verb

    def add(self, words: list[str]) -> int:
        """Append `words`; return the index of the last one."""
        self.words.extend(words)
        return len(self.words) - 1

    def modifier(self, head: _Noun, head_number: str, attractor_number: str, tense: str, kinds: tuple[str, ...], richness: float) -> int:
        """A prepositional phrase or relative clause after `head`, holding an attractor noun.

        Returns the attractor's index. In a subject relative ("who saw the dogs") a present
        verb agrees with the head; in an object relative ("that the dogs saw") with the
        attractor.
        """
        rng = self.rng
        kind = rng.choice([k for k in kinds if k != "subject_rc" or head.kind != "thing"])
        if kind == "pp":
            self.add([rng.choice(_MODIFIER_PREPOSITIONS)])
            return self.add(_noun_phrase(rng, attractor_number, ("person", "animal", "thing"), richness)[0])
        if kind == "subject_rc":
            relative = "who" if head.kind == "person" else "that"
            object_kind = rng.choice(("person", "animal", "thing") if head.kind == "person" else ("animal", "thing"))
            verb = _verb(rng, head, object_kind)
            self.embedded.append((self.add([relative, verb.form(tense, head_number)]), tense))
            return self.add(_noun_phrase(rng, attractor_number, (object_kind,), richness)[0])
        # object relative: the attractor is the subject of the clause, the head its object
        words, subject = _noun_phrase(rng, attractor_number, ("person", "animal"), richness)
        self.add(["that"])
        attractor = self.add(words)
        verb = _verb(rng, subject, head.kind)
        self.embedded.append((self.add([verb.form(tense, attractor_number)]), tense))
        return attractor


def _declarative(
    rng: random.Random,
    *,
    subject_number: str | None = None,
    verb_number: str | None = None,
    tense: str | None = None,
    predicate: str | None = None,
    subject_attractor: str | None = _ANY,
    object_number: str | None = None,
    object_attractor: str | None = _ANY,
    embedded_tense: str | None = None,
    modifiers: tuple[str, ...] = ("pp", "subject_rc", "object_rc"),
    clause: bool | None = None,
    richness: float = 0.4,
) -> tuple[list[str], dict[str, object]]:
    """A declarative sentence: subject (+ modifier), verb, object or place, adverb, clause.

    Every choice left as None is random; `richness` is the chance of each optional part.
    An attractor argument is a number (a modifier with an attractor noun of that number),
    None (no modifier) or `_ANY` (chance decides). `verb_number` differs from the subject's
    only to make agreement errors. `embedded_tense` sets the tense of every embedded verb.
    """
    subject_number = _pick(rng, subject_number, _NUMBERS)
    verb_number = verb_number or subject_number
    tense = _pick(rng, tense, _TENSES)
    predicate = _pick(rng, predicate, _PREDICATES)

    def embedded() -> str:
        return _pick(rng, embedded_tense, _TENSES)

    def attractor(choice: str | None) -> str | None:
        if choice != _ANY:
            return choice
        return rng.choice(_NUMBERS) if rng.random() < richness else None

    build = _Builder(rng)
    kinds = ("person", "animal", "thing") if predicate == "copula" else ("person", "animal")
    subject_words, subject = _noun_phrase(rng, subject_number, kinds, richness)
    facts: dict[str, object] = {"subject": build.add(subject_words), "subject_number": subject_number}
    facts["subject_attractor_number"] = subject_attractor = attractor(subject_attractor)
    facts["subject_attractor"] = (
        None if subject_attractor is None else build.modifier(subject, subject_number, subject_attractor, embedded(), modifiers, richness)
    )

    facts.update(verb_number=verb_number, tense=tense, predicate=predicate)
    object_kind = None
    if predicate == "transitive":
        object_kind = rng.choice(("person", "animal", "thing") if subject.kind == "person" else ("animal", "thing"))
    if predicate == "copula":
        facts["verb"] = build.add([_COPULA[tense, verb_number]])
    else:
        facts["verb"] = build.add([_verb(rng, subject, object_kind).form(tense, verb_number)])

    facts.update(object=None, object_number=None, object_attractor=None, object_attractor_number=None)
    ends_in_noun = False
    if object_kind is not None:  # transitive
        number = _pick(rng, object_number, _NUMBERS)
        object_words, head = _noun_phrase(rng, number, (object_kind,), richness)
        facts.update(object=build.add(object_words), object_number=number)
        facts["object_attractor_number"] = number_of_attractor = attractor(object_attractor)
        if number_of_attractor is not None:
            facts["object_attractor"] = build.modifier(head, number, number_of_attractor, embedded(), modifiers, richness)
        ends_in_noun = facts["object_attractor"] in (None, len(build.words) - 1)  # not after an object relative
    elif predicate == "copula" or rng.random() < 0.5 + richness / 2:
        build.add([rng.choice(_PLACE_PREPOSITIONS)])
        build.add(_noun_phrase(rng, rng.choice(_NUMBERS), ("thing",), richness)[0])
        ends_in_noun = predicate != "copula"  # "was on the table quietly" is not English either

    # An adverb only after a noun: beside a verb, swapping the two would still be English.
    if ends_in_noun and rng.random() < richness * 0.5:
        build.add([rng.choice(_ADVERBS)])
    if clause if clause is not None else rng.random() < richness * 0.5:
        build.add([rng.choice(_CONJUNCTIONS)])
        clause_number, clause_tense = rng.choice(_NUMBERS), embedded()
        clause_words, clause_subject = _noun_phrase(rng, clause_number, ("person", "animal"), richness)
        build.add(clause_words)
        clause_verb = _verb(rng, clause_subject, None).form(clause_tense, clause_number)
        build.embedded.append((build.add([clause_verb]), clause_tense))
    facts["embedded"] = tuple(build.embedded)
    return build.words, facts


# --- coordination scripts -------------------------------------------------------------------

# Two events of one protagonist, in the order they happen. "(a|b)" is a choice.
_SCRIPTS = tuple(
    tuple(pair.split(" / "))
    for pair in (
        "opened the (door|gate) / walked (in|inside)",
        "woke up / got out of bed",
        "bought a ticket / got on the (train|bus)",
        "boiled the water / made (tea|coffee)",
        "turned off the (light|lamp) / went to sleep",
        "found the key / unlocked the (door|box|car)",
        "heard a (noise|knock|shout) / looked (outside|around)",
        "missed the (bus|train) / walked home",
        "felt (tired|sleepy) / went to bed",
        "sat down / opened the (book|letter|newspaper)",
        "started the car / drove away",
        "paid the bill / left the (restaurant|shop|cafe)",
        "filled the (bottle|glass|cup) / drank the water",
        "read the map / found the way",
        "planted the seeds / watered the garden",
        "put on a coat / went outside",
        "climbed the (hill|tower|stairs) / looked at the view",
        "wrote a letter / went to the post office",
        "knocked on the door / waited for an answer",
        "caught the ball / threw the ball back",
        "took a shower / got dressed",
        "cooked dinner / washed the dishes",
        "packed a bag / left the house",
        "lost the key / looked everywhere for the key",
        "arrived at the station / waited for the train",
        "ordered a pizza / ate the pizza",
        "dropped the glass / swept up the pieces",
        "finished the work / went home",
        "picked up the phone / said hello",
        "entered the room / sat down",
        "dug a hole / planted the tree",
        "opened the fridge / took out the milk",
        "caught a cold / stayed in bed",
        "won the race / got a medal",
    )
)
_NAMES = (
    ("Anna", "she"), ("Tom", "he"), ("Maria", "she"), ("James", "he"), ("Sara", "she"),
    ("David", "he"), ("Lucy", "she"), ("Peter", "he"), ("Emma", "she"), ("Jack", "he"),
)  # fmt: skip
_TIME_PHRASES = ("", "", "", "yesterday", "last night", "that morning", "on Sunday", "later", "then", "at noon")


def _fill(rng: random.Random, template: str) -> str:
    return re.sub(r"\(([^)]*)\)", lambda match: rng.choice(match.group(1).split("|")), template)


def _protagonist(rng: random.Random) -> tuple[str, str]:
    """A subject and the pronoun that refers back to it."""
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(_NAMES)
    people = [noun for noun in _NOUNS if noun.kind == "person"]
    if roll < 0.55:
        noun = rng.choice([noun for noun in people if noun.pronoun])
        number, pronoun = "NN", noun.pronoun
    else:
        noun, number, pronoun = rng.choice(people), "NNS", "they"
    determiner = rng.choice(("the", "the", "my", "our") + (("a",) if number == "NN" else ("some", "two")))
    adjective = [rng.choice(_ADJECTIVES["person"])] if rng.random() < 0.3 else []
    words = [determiner, *adjective, noun.form(number)]
    if determiner == "a" and words[1][0] in "aeiou":
        words[0] = "an"
    return " ".join(words), pronoun


_SPECS = {
    "sentence_length": _Spec((), _build_length),
    "bigram_shift": _Spec((), _build_bigram),
    "agreement_attractors": _Spec((_NUMBERS, _NUMBERS), _build_agreement),
    "main_verb_tense": _Spec((_TENSES,), _build_tense),
    "subject_number": _Spec((_NUMBERS,), _build_subject_number),
    "object_number": _Spec((_NUMBERS,), _build_object_number),
    "coordination_inversion": _Spec((), _build_coordination),
}
