"""A built-in English treebank in Universal Dependencies style, generated from a seeded grammar.

Word-level probes (UPOS, XPOS, dependency relations) and Hewitt & Manning's structural
probes (tree depth and distance) need trees, and an offline machine has none beyond the
20-sentence sample. This grammar builds them from code: it speaks the lexicon of
`probing_tasks` (nouns with number and kind, verbs with transitivity and tense forms,
determiners, adjectives, prepositions, adverbs, conjunctions, names) and adds what trees
need: pronouns, auxiliaries and modals, negation, copula predicates, prepositional phrases
on nouns and verbs, subject and object relative clauses, adverbial, complement and
infinitival clauses, questions, and coordination of nouns, adjectives, verb phrases and
clauses. Each word gets its UPOS, Penn Treebank XPOS, head and relation as it is placed,
so the annotation is right by construction. The conventions are those of UD v2 English
(EWT, GUM): a copula sentence has its predicate as root with `cop` on the verb; `cc` and a
comma before a conjunct attach to that conjunct; `not` is PART/RB `advmod`; possessive
determiners are PRON/PRP$ `nmod:poss`; the comma after a fronted adverbial clause
attaches to that clause's head.

Plain Python, so the CLI can write the treebank out without loading torch.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, cast

from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence
from bertscope.data.files import atomic_write
from bertscope.data.probing_tasks import (
    _ADJECTIVES,
    _ADVERBS,
    _CONJUNCTIONS,
    _MODIFIER_PREPOSITIONS,
    _NAMES,
    _NOUNS,
    _PLACE_PREPOSITIONS,
    _Noun,
    _nouns,
    _Verb,
    _verb,
    _verbs,
)

MIN_WORDS, MAX_WORDS = 4, 30
"""Sentence length limits in words, punctuation included (as UD counts them)."""

DEFAULT_SENTENCES = 4000

_MAX_TRIES = 200


def generate_treebank(sentences: int = DEFAULT_SENTENCES, seed: int = 0) -> list[Sentence]:
    """`sentences` distinct annotated sentences: words, UPOS, XPOS, heads (from 1; 0 = root), relations.

    The same arguments give the same treebank on every machine and Python, and a smaller
    one is the start of a larger one with the same seed. Each sentence's location is
    `builtin:treebank:<n>`, `n` counting from 1.
    """
    if isinstance(sentences, bool) or not isinstance(sentences, int) or sentences < 1:
        raise InputError(f"the number of treebank sentences must be a whole number 1 or more, not {sentences!r}")
    # A str seed is hashed with SHA-512 by `random`, not by Python's salted hash(): stable everywhere.
    rng = random.Random(f"bertscope:treebank:{seed}")
    used: set[str] = set()
    treebank = []
    for number in range(1, sentences + 1):
        for _ in range(_MAX_TRIES):
            tree = _Grammar(rng).sentence()
            if MIN_WORDS <= len(tree.words) <= MAX_WORDS and tree.text() not in used:
                break
        else:
            raise InputError(f"the treebank grammar ran out of new sentences after {len(used):,}; ask for fewer")
        used.add(tree.text())
        treebank.append(tree.sentence(f"builtin:treebank:{number}"))
    return treebank


def write_conllu(path: str | os.PathLike[str], sentences: Iterable[Sentence], *, id_prefix: str = "treebank") -> int:
    """Write annotated sentences as CoNLL-U, with `# sent_id` and `# text`; return how many.

    Written atomically in UTF-8, so `read_sentences` reads back exactly these sentences and
    a failure leaves no half file. LEMMA, FEATS and DEPS are `_`; MISC has `SpaceAfter=No`
    where the text has no space after a word.
    """
    count = 0
    with atomic_write(path, "wb") as handle:
        for sentence in sentences:
            count += 1
            where = sentence.location or f"sentence {count}"
            words, upos, xpos, heads, deprels = sentence.words, sentence.upos, sentence.xpos, sentence.heads, sentence.deprels
            if (
                words is None
                or upos is None
                or xpos is None
                or heads is None
                or deprels is None
                or not len(words) == len(upos) == len(xpos) == len(heads) == len(deprels)
            ):
                raise InputError(f"{where}: CoNLL-U needs words, UPOS, XPOS, heads and relations of one length each")
            values = [*words, *upos, *xpos, *deprels, sentence.text, id_prefix]
            if any(not value or any(bad in value for bad in "\t\r\n") for value in values):
                raise InputError(f"{where}: an empty field, or a tab or line break inside one; fix the sentence first")
            lines = [f"# sent_id = {id_prefix}-{count}", f"# text = {sentence.text}"]
            spaced = _space_after(sentence.text, words)
            for index, word in enumerate(words):
                misc = "_" if spaced[index] else "SpaceAfter=No"
                row = (index + 1, word, "_", upos[index], xpos[index], "_", heads[index], deprels[index], "_", misc)
                lines.append("\t".join(str(value) for value in row))
            handle.write(("\n".join(lines) + "\n\n").encode())
    return count


def _space_after(text: str, words: tuple[str, ...]) -> list[bool]:
    """Whether the text has a space after each word; True throughout if the words are not the text's."""
    flags, position = [], 0
    for word in words:
        start = text.find(word, position)
        if start < 0 or text[position:start].strip():
            return [True] * len(words)
        position = start + len(word)
        flags.append(position < len(text) and text[position].isspace())
    flags[-1] = True  # nothing follows the last word
    return flags


# --- trees ----------------------------------------------------------------------------------


@dataclass
class _Word:
    form: str
    upos: str
    xpos: str
    head: int | None = None  # an index into the tree's words, -1 for the root
    deprel: str = ""


class _Tree:
    """The words of one sentence in order, each attached to its head as the grammar places it."""

    def __init__(self) -> None:
        self.words: list[_Word] = []

    def add(self, form: str, upos: str, xpos: str, head: int | None = None, deprel: str = "") -> int:
        """Append a word (its head may come later, see `attach`); return its index."""
        self.words.append(_Word(form, upos, xpos, head, deprel))
        return len(self.words) - 1

    def attach(self, index: int, head: int, deprel: str) -> None:
        self.words[index].head, self.words[index].deprel = head, deprel

    def text(self) -> str:
        """The words joined as English writes them: no space before punctuation."""
        parts: list[str] = []
        for word in self.words:
            if parts and word.upos != "PUNCT":
                parts.append(" ")
            parts.append(word.form)
        return "".join(parts)

    def sentence(self, location: str) -> Sentence:
        unattached = [word.form for word in self.words if word.head is None]
        assert not unattached, f"the grammar left {unattached} without a head"
        return Sentence(
            self.text(),
            location=location,
            words=tuple(word.form for word in self.words),
            upos=tuple(word.upos for word in self.words),
            xpos=tuple(word.xpos for word in self.words),
            heads=tuple(cast(int, word.head) + 1 for word in self.words),  # every word attached (above)
            deprels=tuple(word.deprel for word in self.words),
        )


# --- the grammar ----------------------------------------------------------------------------


# A verb's form: "base" (after an auxiliary or `to`), or its (tense, agreement).
_VerbForm = Literal["base"] | tuple[str, str]


@dataclass(frozen=True)
class _Nominal:
    """A placed noun phrase: its head word, its agreement and what it refers to."""

    head: int
    agreement: str  # "1sg", "3sg" or "pl" ("you" agrees as "pl": you are, you see)
    noun: _Noun  # for the verbs it can go with (only `kind` matters for pronouns and names)


_PERSON = _Noun("person", "people", "person")
_ANIMAL = _Noun("animal", "animals", "animal")
_THING = _Noun("thing", "things", "thing")
_KINDS = ("person", "animal", "thing")
# Nouns spelled like verbs or auxiliaries (a watch / they watch, a saw / she saw, a can / we can), so that
# a word's form does not always settle its part of speech: a probe has to read the context, as in real text.
_TREEBANK_NOUNS = _NOUNS + _nouns("thing", "watch/watches saw can paint light")
_NOUN_PREPOSITIONS = _MODIFIER_PREPOSITIONS + ("of", "of", "to")  # `to` is also the infinitive's PART
_AGREEMENT = {"NN": "3sg", "NNS": "pl"}

# Determiners: (form, UPOS, XPOS, relation), by the number they go with.
_DET = ("DET", "DT", "det")
_POSSESSIVE = ("PRON", "PRP$", "nmod:poss")
_SHARED = [("the", *_DET)] * 10 + [(word, *_POSSESSIVE) for word in ("my", "his", "her", "our", "their", "your")]
_BY_NUMBER = {
    "NN": [(word, *_DET) for word in ("a", "a", "this", "that", "every")],
    "NNS": [(word, *_DET) for word in ("these", "those", "some")]
    + [(word, "NUM", "CD", "nummod") for word in ("two", "three", "five")]
    + [("many", "ADJ", "JJ", "amod")],
}
_SUBJECT_PRONOUNS = (
    ("I", "1sg", _PERSON), ("you", "pl", _PERSON), ("he", "3sg", _PERSON), ("she", "3sg", _PERSON),
    ("it", "3sg", _ANIMAL), ("it", "3sg", _THING), ("we", "pl", _PERSON), ("they", "pl", _PERSON),
    ("they", "pl", _ANIMAL),
)  # fmt: skip
_OBJECT_PRONOUNS = {
    "person": ("me", "you", "him", "her", "us", "them"),
    "animal": ("it", "them"),
    "thing": ("it", "them"),
}
_DEGREE = ("very", "very", "really", "rather")
_MODALS = ("can", "must", "should", "might", "could")
_COORDINATORS = ("and", "and", "and", "but", "or")
_SUBORDINATORS = _CONJUNCTIONS + ("after", "before", "if", "because", "when")
_FRONT_ADVERBS = ("then", "later", "today", "now", "suddenly", "finally")
_DAYS = ("Monday", "Tuesday", "Friday", "Saturday", "Sunday")
_TIMES = (("at", "noon"), ("at", "night"), ("in", "the", "morning"), ("in", "the", "evening"), ("after", "lunch"),
          ("before", "dinner"))  # fmt: skip
_SAYING = _verbs("", "says/say/said thinks/think/thought knows/know/knew hopes/hope/hoped", subject="person")
_WANTING = _verbs("", "wants/want/wanted tries/try/tried likes/like/liked starts/start/started needs/need/needed")
_TENSES = ("past",) * 9 + ("present",) * 7 + ("future", "future", "modal", "modal")
_COPULA = {("present", "1sg"): "am", ("present", "3sg"): "is", ("present", "pl"): "are",
           ("past", "1sg"): "was", ("past", "3sg"): "was", ("past", "pl"): "were"}  # fmt: skip


class _Grammar:
    """One sentence's worth of choices.

    `richness`, drawn per sentence, scales the chance of every optional part, which
    spreads the lengths; `budget` counts the clauses that may still be embedded, which
    keeps recursion finite.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.richness = rng.uniform(0.3, 1.0)
        self.budget = 1 + (rng.random() < self.richness) + (rng.random() < self.richness * 0.7)
        self.tree = _Tree()

    def chance(self, weight: float) -> bool:
        """True with probability `weight` × richness."""
        return self.rng.random() < weight * self.richness

    def spend(self) -> bool:
        """Take one embedded clause from the budget, if any is left."""
        if self.budget <= 0:
            return False
        self.budget -= 1
        return True

    def add(self, form: str, upos: str, xpos: str, head: int | None = None, deprel: str = "") -> int:
        return self.tree.add(form, upos, xpos, head, deprel)

    # sentences

    def sentence(self) -> _Tree:
        rng = self.rng
        if rng.random() < 0.08:
            root = self.question()
            self.add("?", "PUNCT", ".", root, "punct")
        else:
            root = self.main_clause()
            self.add(".", "PUNCT", ".", root, "punct")
        self.tree.attach(root, -1, "root")
        first = self.tree.words[0]
        first.form = first.form[:1].upper() + first.form[1:]
        return self.tree

    def main_clause(self) -> int:
        """A declarative clause, perhaps with a fronted or final adverbial clause, or coordinated."""
        rng = self.rng
        fronted: list[tuple[int, str]] = []  # (head, relation) to attach to the main predicate
        if self.chance(0.3) and self.spend():
            advcl = self.adverbial_clause()
            self.add(",", "PUNCT", ",", advcl, "punct")
            fronted.append((advcl, "advcl"))
        elif self.chance(0.15):
            fronted.append((self.time_phrase(), ""))
            if rng.random() < 0.6:
                fronted.append((self.add(",", "PUNCT", ","), "punct"))
        root = self.clause()
        for head, deprel in fronted:
            self.tree.attach(head, root, deprel or self.tree.words[head].deprel)
        if self.chance(0.35) and self.spend():
            if rng.random() < 0.5:
                comma = self.add(",", "PUNCT", ",") if rng.random() < 0.7 else None
                cc = self.add(rng.choice(_COORDINATORS), "CCONJ", "CC")
                second = self.clause()
                self.tree.attach(cc, second, "cc")
                if comma is not None:
                    self.tree.attach(comma, second, "punct")
                self.tree.attach(second, root, "conj")
            else:
                self.tree.attach(self.adverbial_clause(), root, "advcl")
        return root

    def question(self) -> int:
        """A yes/no question: `Did the dog see the cat?`, `Will you help me?`, `Is the box empty?`."""
        rng = self.rng
        tense = rng.choice(("past", "present", "future", "modal"))
        # The fronted auxiliary's form and XPOS are filled in once the subject's agreement is known.
        if rng.random() < 0.35:  # copula: `Are the boys tired?`
            cop = self.add("", "AUX", "")
            subject = self.subject(_KINDS)
            if tense in ("future", "modal"):
                self.tree.words[cop].form, self.tree.words[cop].xpos = rng.choice(("will",) + _MODALS), "MD"
                cop_be = self.add("be", "AUX", "VB")
                predicate = self.adjective_predicate(subject)
                self.tree.attach(cop, predicate, "aux")
                self.tree.attach(cop_be, predicate, "cop")
            else:
                form = _COPULA[tense, subject.agreement]
                self.tree.words[cop].form, self.tree.words[cop].xpos = form, _copula_xpos(tense, subject.agreement)
                predicate = self.adjective_predicate(subject)
                self.tree.attach(cop, predicate, "cop")
            self.tree.attach(subject.head, predicate, "nsubj")
            return predicate
        aux = self.add("", "AUX", "")
        subject = self.subject(("person", "animal"))
        if tense in ("future", "modal"):
            form, xpos = ("will" if tense == "future" else rng.choice(_MODALS)), "MD"
        else:
            form, _, xpos = _do(tense, subject.agreement)
        self.tree.words[aux].form, self.tree.words[aux].xpos = form, xpos
        verb = self.verb_phrase(subject, "base")
        self.tree.attach(aux, verb, "aux")
        self.tree.attach(subject.head, verb, "nsubj")
        return verb

    def clause(self, tense: str | None = None) -> int:
        """Subject and predicate; returns the predicate's head, with the subject attached to it."""
        rng = self.rng
        tense = tense or rng.choice(_TENSES)
        negated = rng.random() < 0.1
        if rng.random() < 0.3:  # only a copula takes a thing for subject: `the box is empty`
            subject = self.subject(_KINDS)
            return self.copula_predicate(subject, tense, negated)
        subject = self.subject(("person", "animal"))
        early_adverb = self.add(rng.choice(_ADVERBS), "ADV", "RB") if self.chance(0.08) and not negated else None
        auxiliaries: list[tuple[int, str]] = []
        form: _VerbForm = "base"
        if tense in ("future", "modal"):
            auxiliaries.append((self.add("will" if tense == "future" else rng.choice(_MODALS), "AUX", "MD"), "aux"))
        elif negated:  # do-support: `did not see`
            auxiliaries.append((self.add(*_do(tense, subject.agreement)), "aux"))
        else:
            form = (tense, subject.agreement)
        if negated:
            auxiliaries.append((self.add("not", "PART", "RB"), "advmod"))
        verb = self.verb_phrase(subject, form)
        for index, deprel in auxiliaries:
            self.tree.attach(index, verb, deprel)
        if early_adverb is not None:
            self.tree.attach(early_adverb, verb, "advmod")
        self.tree.attach(subject.head, verb, "nsubj")
        return verb

    def verb_phrase(self, subject: _Nominal, form: _VerbForm, coordinate: bool = True) -> int:
        """A verb with its complements and modifiers, perhaps coordinated with a second one.

        `form` is "base" (after an auxiliary or `to`) or `(tense, agreement)`.
        """
        rng = self.rng
        roll = rng.random()
        if subject.noun.kind == "person" and roll < 0.1 and self.spend():  # `says that the dog slept`
            verb = self.finite(rng.choice(_SAYING), form)
            mark = self.add("that", "SCONJ", "IN") if rng.random() < 0.6 else None
            embedded = self.clause()
            if mark is not None:
                self.tree.attach(mark, embedded, "mark")
            self.tree.attach(embedded, verb, "ccomp")
        elif roll < 0.2:  # `wants to open the door`
            verb = self.finite(rng.choice(_WANTING), form)
            to = self.add("to", "PART", "TO")
            infinitive = self.verb_phrase(subject, "base", coordinate=False)
            self.tree.attach(to, infinitive, "mark")
            self.tree.attach(infinitive, verb, "xcomp")
        elif roll < 0.6:
            object_kind = rng.choice(_KINDS if subject.noun.kind == "person" else ("animal", "thing"))
            verb = self.finite(_verb(rng, subject.noun, object_kind), form)
            obj = self.object(object_kind)
            self.tree.attach(obj, verb, "obj")
        else:
            verb = self.finite(_verb(rng, subject.noun, None), form)
        if self.chance(0.5):
            self.tree.attach(self.prepositional_phrase(_PLACE_PREPOSITIONS, ("thing",)), verb, "obl")
        elif self.chance(0.1):
            when = self.time_phrase()
            self.tree.attach(when, verb, self.tree.words[when].deprel)
        if self.chance(0.25):
            self.add(rng.choice(_ADVERBS), "ADV", "RB", verb, "advmod")
        if coordinate and self.chance(0.12):
            cc = self.add(rng.choice(_COORDINATORS), "CCONJ", "CC")
            second = self.verb_phrase(subject, form, coordinate=False)
            self.tree.attach(cc, second, "cc")
            self.tree.attach(second, verb, "conj")
        return verb

    def finite(self, verb: _Verb, form: _VerbForm) -> int:
        """The verb in `form`: base after an auxiliary, else its tense and agreement."""
        if form == "base":
            return self.add(verb.present, "VERB", "VB")
        tense, agreement = form
        if tense == "past":
            return self.add(verb.past, "VERB", "VBD")
        if agreement == "3sg":
            return self.add(verb.present3, "VERB", "VBZ")
        return self.add(verb.present, "VERB", "VBP")

    def copula_predicate(self, subject: _Nominal, tense: str, negated: bool, nsubj: int | None = None) -> int:
        """`is hungry`, `was on the table`, `will not be a doctor`: the predicate heads the clause.

        The subject (`nsubj`, by default the subject's head) is attached to the predicate.
        """
        rng = self.rng
        attach: list[tuple[int, str]] = []
        if tense in ("future", "modal"):
            attach.append((self.add("will" if tense == "future" else rng.choice(_MODALS), "AUX", "MD"), "aux"))
            if negated:
                attach.append((self.add("not", "PART", "RB"), "advmod"))
            attach.append((self.add("be", "AUX", "VB"), "cop"))
        else:
            form = _COPULA[tense, subject.agreement]
            attach.append((self.add(form, "AUX", _copula_xpos(tense, subject.agreement)), "cop"))
            if negated:
                attach.append((self.add("not", "PART", "RB"), "advmod"))
        roll = rng.random()
        if roll < 0.5:
            predicate = self.adjective_predicate(subject)
        elif roll < 0.8 or subject.noun.kind != "person":
            predicate = self.prepositional_phrase(_PLACE_PREPOSITIONS, ("thing",))
        else:  # `the woman is a doctor`, `they were teachers`
            number = "NN" if subject.agreement != "pl" else "NNS"
            predicate = self.noun_phrase(number, ("person",), modifiers=False, predicate=True).head
        for index, deprel in attach:
            self.tree.attach(index, predicate, deprel)
        self.tree.attach(subject.head if nsubj is None else nsubj, predicate, "nsubj")
        return predicate

    def adjective_predicate(self, subject: _Nominal) -> int:
        """An adjective fitting the subject, perhaps `very` old, perhaps `old and tired`."""
        adjectives = _ADJECTIVES[subject.noun.kind]
        adjective = self.adjective(adjectives)
        if self.chance(0.15):
            cc = self.add(self.rng.choice(("and", "but", "or")), "CCONJ", "CC")
            first = self.tree.words[adjective].form
            second = self.adjective(tuple(a for a in adjectives if a != first))
            self.tree.attach(cc, second, "cc")
            self.tree.attach(second, adjective, "conj")
        return adjective

    def adjective(self, adjectives: tuple[str, ...]) -> int:
        degree = self.add(self.rng.choice(_DEGREE), "ADV", "RB") if self.chance(0.15) else None
        adjective = self.add(self.rng.choice(adjectives), "ADJ", "JJ")
        if degree is not None:
            self.tree.attach(degree, adjective, "advmod")
        return adjective

    # clauses inside clauses

    def adverbial_clause(self) -> int:
        """`because the dog slept`: its verb heads it, the conjunction is its `mark`."""
        mark = self.add(self.rng.choice(_SUBORDINATORS), "SCONJ", "IN")
        verb = self.clause(tense=self.rng.choice(("past", "present")))
        self.tree.attach(mark, verb, "mark")
        return verb

    def relative_clause(self, head: _Nominal) -> int:
        """`who saw the cat`, `that the dogs chased`, `that was on the table`; attached as acl:relcl."""
        rng = self.rng
        tense = rng.choice(("past", "present"))
        kind = head.noun.kind
        roll = rng.random()
        pronoun = ("who", "PRON", "WP") if kind == "person" else ("that", "PRON", "WDT")
        if kind != "thing" and roll < 0.5:  # subject relative
            relative = self.add(*pronoun)
            verb = self.verb_phrase(head, (tense, head.agreement), coordinate=False)
            self.tree.attach(relative, verb, "nsubj")
        elif roll < (0.85 if kind != "thing" else 0.6):  # object relative: the head is the object
            relative = self.add("that", "PRON", "WDT")
            subject = self.subject(("person", "animal"), modifiers=False)
            verb = self.finite(_verb(rng, subject.noun, kind), (tense, subject.agreement))
            self.tree.attach(relative, verb, "obj")
            self.tree.attach(subject.head, verb, "nsubj")
            if self.chance(0.3):
                self.tree.attach(self.prepositional_phrase(_PLACE_PREPOSITIONS, ("thing",)), verb, "obl")
        else:  # a copula relative, its pronoun the subject: `that was on the table`
            relative = self.add(*pronoun)
            verb = self.copula_predicate(head, tense, negated=False, nsubj=relative)
        return verb

    # noun phrases

    def subject(self, kinds: tuple[str, ...], modifiers: bool = True) -> _Nominal:
        """A pronoun, a name, a noun phrase, or two noun phrases joined by `and`."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            pronoun, agreement, noun = rng.choice([p for p in _SUBJECT_PRONOUNS if p[2].kind in kinds])
            return _Nominal(self.add(pronoun, "PRON", "PRP"), agreement, noun)
        if roll < 0.3 and "person" in kinds:
            return _Nominal(self.add(rng.choice(_NAMES)[0], "PROPN", "NNP"), "3sg", _PERSON)
        number = rng.choice(("NN", "NNS"))
        first = self.noun_phrase(number, kinds, modifiers)
        if modifiers and self.chance(0.1):
            cc = self.add("and", "CCONJ", "CC")
            second = self.noun_phrase(rng.choice(("NN", "NNS")), (first.noun.kind,), modifiers=False)
            self.tree.attach(cc, second.head, "cc")
            self.tree.attach(second.head, first.head, "conj")
            return _Nominal(first.head, "pl", first.noun)
        return first

    def object(self, kind: str) -> int:
        rng = self.rng
        if rng.random() < 0.15:
            return self.add(rng.choice(_OBJECT_PRONOUNS[kind]), "PRON", "PRP")
        if kind == "person" and rng.random() < 0.15:
            return self.add(rng.choice(_NAMES)[0], "PROPN", "NNP")
        return self.noun_phrase(rng.choice(("NN", "NNS")), (kind,)).head

    def noun_phrase(self, number: str, kinds: tuple[str, ...], modifiers: bool = True, predicate: bool = False) -> _Nominal:
        """Determiner, adjectives, noun; then perhaps a prepositional phrase or a relative clause.

        A `predicate` noun phrase (`is a doctor`, `were teachers`) takes `a`, `the` or nothing.
        """
        rng = self.rng
        noun = rng.choice([noun for noun in _TREEBANK_NOUNS if noun.kind in kinds])
        if predicate:
            determiner = rng.choice(((("a" if number == "NN" else "the"), *_DET), None))
        else:
            determiner = rng.choice(_SHARED if rng.random() < 0.6 else _BY_NUMBER[number])
        if number == "NN" and determiner is None:
            determiner = ("a", *_DET)
        before = [self.add(*determiner[:3])] if determiner else []
        if self.chance(0.5):
            before.append(self.adjective(_ADJECTIVES[noun.kind]))
            if self.chance(0.1):
                first = self.tree.words[before[-1]].form
                before.append(self.adjective(tuple(a for a in _ADJECTIVES[noun.kind] if a != first)))
        head = self.add(noun.form(number), "NOUN", number)
        if determiner:
            words = self.tree.words
            if words[before[0]].form == "a" and words[before[0] + 1].form[0] in "aeiou":
                words[before[0]].form = "an"
            self.tree.attach(before.pop(0), head, determiner[3])
        for adjective in before:
            self.tree.attach(adjective, head, "amod")
        nominal = _Nominal(head, _AGREEMENT[number], noun)
        if modifiers:
            if self.chance(0.35):
                self.tree.attach(self.prepositional_phrase(_NOUN_PREPOSITIONS, _KINDS), head, "nmod")
            elif self.chance(0.35) and self.spend():
                self.tree.attach(self.relative_clause(nominal), head, "acl:relcl")
        return nominal

    def prepositional_phrase(self, prepositions: tuple[str, ...], kinds: tuple[str, ...]) -> int:
        """`near the old door`: the noun heads it, the preposition is its `case`; attach the noun."""
        case = self.add(self.rng.choice(prepositions), "ADP", "IN")
        if self.rng.random() < 0.1:
            noun = self.add(self.rng.choice(_OBJECT_PRONOUNS[self.rng.choice(kinds)]), "PRON", "PRP")
        else:
            # a nested phrase only now and then, so that chains stay short
            noun = self.noun_phrase(self.rng.choice(("NN", "NNS")), kinds, modifiers=self.chance(0.6)).head
        self.tree.attach(case, noun, "case")
        return noun

    def time_phrase(self) -> int:
        """`then`, `on Sunday`, `in the morning`: an adverb or a nominal, unattached; returns its head.

        Its relation is set here (advmod or obl); the caller attaches it to the predicate.
        """
        rng = self.rng
        roll = rng.random()
        if roll < 0.4:
            return self.add(rng.choice(_FRONT_ADVERBS), "ADV", "RB", None, "advmod")
        if roll < 0.7:
            case = self.add("on", "ADP", "IN")
            day = self.add(rng.choice(_DAYS), "PROPN", "NNP", None, "obl")
            self.tree.attach(case, day, "case")
            return day
        words = rng.choice(_TIMES)
        case = self.add(words[0], "ADP", "IN")
        det = self.add(words[1], "DET", "DT") if len(words) == 3 else None
        noun = self.add(words[-1], "NOUN", "NN", None, "obl")
        self.tree.attach(case, noun, "case")
        if det is not None:
            self.tree.attach(det, noun, "det")
        return noun


def _do(tense: str, agreement: str) -> tuple[str, str, str]:
    """`do` as an auxiliary: form, UPOS, XPOS."""
    if tense == "past":
        return "did", "AUX", "VBD"
    return ("does", "AUX", "VBZ") if agreement == "3sg" else ("do", "AUX", "VBP")


def _copula_xpos(tense: str, agreement: str) -> str:
    if tense == "past":
        return "VBD"
    return "VBZ" if agreement == "3sg" else "VBP"
