"""The built-in probing tasks: deterministic, balanced, disjoint splits, and labels that are right.

Labels are recomputed from the words of each sentence wherever the sentence alone tells
them (length, number, tense, agreement), using the word indices in the generator's facts
only to find which word is the subject, the verb or the object.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import subprocess
import sys

import pytest

from bertscope.base.errors import InputError
from bertscope.data import probing_tasks
from bertscope.data.corpus import SPLITS, Sentence, detect_format, read_sentences
from bertscope.data.probing_tasks import TASKS, generate, generate_examples, write_senteval

SIZES = {"train": 2000, "dev": 400, "test": 400}

SINGULAR = {noun.singular for noun in probing_tasks._NOUNS}
PLURAL = {noun.plural for noun in probing_tasks._NOUNS}
PAST = {verb.past for verb in probing_tasks._VERBS} | {"was", "were"}
PRESENT = {verb.present3 for verb in probing_tasks._VERBS} | {verb.present for verb in probing_tasks._VERBS}
PRESENT |= {"is", "are"}
VERB_SINGULAR = {verb.present3 for verb in probing_tasks._VERBS} | {"is", "was"}
VERB_PLURAL = {verb.present for verb in probing_tasks._VERBS} | {"are", "were"}


@pytest.fixture(scope="module")
def examples():
    """Every task at its default sizes, generated once for the module."""
    cache: dict[str, list] = {}

    def get(task: str):
        if task not in cache:
            cache[task] = generate_examples(task, **SIZES)
        return cache[task]

    return get


def words(text: str) -> list[str]:
    """The words the facts index: the text without its final period, split at spaces."""
    return text.removesuffix(".").split()


def number_of(noun: str) -> str:
    assert (noun in SINGULAR) != (noun in PLURAL), noun
    return "NN" if noun in SINGULAR else "NNS"


def verb_number(verb: str) -> str:
    assert (verb in VERB_SINGULAR) != (verb in VERB_PLURAL), verb
    return "NN" if verb in VERB_SINGULAR else "NNS"


def tense_of(verb: str) -> str:
    assert (verb in PAST) != (verb in PRESENT), verb
    return "past" if verb in PAST else "present"


def correlation(xs: list[bool], ys: list[bool]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / n
    sx = (sum((x - mx) ** 2 for x in xs) / n) ** 0.5
    sy = (sum((y - my) ** 2 for y in ys) / n) ** 0.5
    return cov / (sx * sy)


# --- the task list and the API --------------------------------------------------------------


def test_tasks_are_grouped_as_in_conneau():
    groups = [task.group for task in TASKS.values()]
    order = ("surface", "syntactic", "semantic")
    assert set(groups) == set(order)
    assert groups == sorted(groups, key=order.index), "tasks of one group are listed together"
    assert list(TASKS) == [
        "sentence_length",
        "bigram_shift",
        "agreement_attractors",
        "main_verb_tense",
        "subject_number",
        "object_number",
        "coordination_inversion",
    ]
    for name, task in TASKS.items():
        assert task.name == name and task.description and len(set(task.labels)) == len(task.labels) >= 2


def test_lexicon_forms_are_unambiguous():
    """Recomputing labels from words needs each word form to say its number and tense."""
    assert len(probing_tasks._NOUNS) >= 40 and len(probing_tasks._VERBS) >= 30
    assert not SINGULAR & PLURAL
    assert not PAST & PRESENT
    assert not VERB_SINGULAR & VERB_PLURAL
    kinds = collections.Counter(noun.kind for noun in probing_tasks._NOUNS)
    assert set(kinds) == {"person", "animal", "thing"}


def test_unknown_task_names_the_choices():
    with pytest.raises(InputError) as raised:
        generate("word_content")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("unknown probing task 'word_content'; choose one of: sentence_length, bigram_shift")


@pytest.mark.parametrize("sizes", [{"train": -1}, {"dev": 2.5}, {"test": True}])
def test_bad_sizes_are_input_errors(sizes):
    with pytest.raises(InputError, match="size must be a whole number"):
        generate("bigram_shift", **sizes)


def test_zero_sizes_give_empty_splits():
    assert generate("subject_number", train=0, dev=0, test=0) == []
    only_test = generate("subject_number", train=0, dev=0, test=5)
    assert [s.split for s in only_test] == ["te"] * 5


def test_running_out_of_sentences_is_an_input_error(monkeypatch):
    def same(rng, cell):
        return probing_tasks._Draft("The dog sees the cat.", cell[0], {})

    monkeypatch.setattr(probing_tasks, "_MAX_TRIES", 20)
    monkeypatch.setitem(probing_tasks._SPECS, "bigram_shift", probing_tasks._Spec((), same))
    with pytest.raises(InputError, match="ran out of new sentences after 1; ask for fewer"):
        generate("bigram_shift", train=3, dev=0, test=0)


# --- properties of every task ---------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS)
def test_deterministic_and_seeded(task):
    first = generate(task, train=200, dev=40, test=40, seed=3)
    assert first == generate(task, train=200, dev=40, test=40, seed=3)
    assert first != generate(task, train=200, dev=40, test=40, seed=4)
    # the training split does not depend on how large dev and test are
    assert first[:200] == generate(task, train=200, dev=10, test=0, seed=3)[:200]


def test_same_output_in_another_process_whatever_the_hash_seed():
    """No salted hash() and no global RNG: a fresh interpreter with another PYTHONHASHSEED agrees."""

    def digest(sentences: list[Sentence]) -> str:
        lines = "\n".join(f"{s.split}\t{s.label}\t{s.text}\t{s.location}" for s in sentences)
        return hashlib.sha256(lines.encode()).hexdigest()

    here = {task: digest(generate(task, train=50, dev=10, test=10)) for task in TASKS}
    code = (
        "import hashlib, json, random; random.seed(12345)\n"
        "from bertscope.data.probing_tasks import TASKS, generate\n"
        "def digest(ss): return hashlib.sha256('\\n'.join(f'{s.split}\\t{s.label}\\t{s.text}\\t{s.location}' "
        "for s in ss).encode()).hexdigest()\n"
        "print(json.dumps({t: digest(generate(t, train=50, dev=10, test=10)) for t in TASKS}))"
    )
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
        assert json.loads(done.stdout) == here


@pytest.mark.parametrize("task", TASKS)
def test_split_sizes_order_and_locations(task, examples):
    sentences = [example.sentence for example in examples(task)]
    assert [s.split for s in sentences] == ["tr"] * 2000 + ["va"] * 400 + ["te"] * 400
    assert [s.location for s in sentences] == [f"builtin:{task}:{n}" for n in range(1, 2801)]
    assert all(s.label in TASKS[task].labels for s in sentences)


@pytest.mark.parametrize("task", TASKS)
def test_labels_balanced_within_each_split(task, examples):
    for split in SPLITS:
        counts = collections.Counter(e.sentence.label for e in examples(task) if e.sentence.split == split)
        per_label = [counts[label] for label in TASKS[task].labels]
        assert max(per_label) - min(per_label) <= 1, (split, counts)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("sizes", [{"train": 7, "dev": 3, "test": 1}, {"train": 13, "dev": 5, "test": 11}])
def test_small_odd_sizes_stay_balanced(task, sizes):
    sentences = generate(task, **sizes, seed=1)
    for split, size in zip(SPLITS, sizes.values()):
        labels = [s.label for s in sentences if s.split == split]
        assert len(labels) == size
        per_label = [labels.count(label) for label in TASKS[task].labels]
        assert max(per_label) - min(per_label) <= 1


@pytest.mark.parametrize("task", TASKS)
def test_no_text_repeated_nor_shared_between_splits(task, examples):
    texts = [e.sentence.text for e in examples(task)]
    assert len(set(texts)) == len(texts)
    train = {e.sentence.text for e in examples(task) if e.sentence.split == "tr"}
    test = {e.sentence.text for e in examples(task) if e.sentence.split == "te"}
    assert not train & test


@pytest.mark.parametrize("task", TASKS)
def test_sentences_are_well_formed(task, examples):
    for example in examples(task):
        text = example.sentence.text
        assert text[0].isupper() and text.endswith(".") and not text.endswith(" .")
        assert 5 <= len(text.split()) <= 20, text
        assert text == text.strip() and "  " not in text and "\t" not in text
        assert ".." not in text and text.count(".") == 1


# --- labels, task by task -------------------------------------------------------------------


def test_sentence_length_label_is_the_bin_of_the_word_count(examples):
    for example in examples("sentence_length"):
        count = len(example.sentence.text.split())
        low, high = (int(part) for part in example.sentence.label.split("-"))
        assert low <= count <= high
        assert example.facts["words"] == count
    assert probing_tasks.LENGTH_BINS[0][0] == 5 and probing_tasks.LENGTH_BINS[-1][1] == 20


def test_bigram_shift_inverted_is_an_original_with_one_adjacent_swap(examples):
    data = examples("bigram_shift")
    texts = {e.sentence.text for e in data}
    for example in data:
        text, original = example.sentence.text, example.facts["original"]
        if example.sentence.label == "O":
            assert text == original and example.facts["swap"] is None
            continue
        shifted, base = words(text), words(original)
        i = example.facts["swap"]
        assert 1 <= i and i + 1 < len(base), "never the first word; the period stays at the end"
        assert base[i] != base[i + 1]
        assert shifted == base[:i] + [base[i + 1], base[i]] + base[i + 2 :]
        assert [k for k in range(len(base)) if shifted[k] != base[k]] == [i, i + 1]
        assert original not in texts, "an original and its shifted twin are never both in the data"
    originals = [e for e in data if e.sentence.label == "O"]
    # the originals are sentences of the grammar: subject first, a main verb at a known place
    assert all(number_of(words(e.sentence.text)[e.facts["subject"]]) == e.facts["subject_number"] for e in originals)


def test_agreement_label_is_whether_the_verb_agrees_with_the_head(examples):
    for example in examples("agreement_attractors"):
        w, facts = words(example.sentence.text), example.facts
        subject, verb = number_of(w[facts["subject"]]), verb_number(w[facts["verb"]])
        attractor = number_of(w[facts["subject_attractor"]])
        assert (subject, verb, attractor) == (
            facts["subject_number"],
            facts["verb_number"],
            facts["subject_attractor_number"],
        )
        assert facts["subject"] < facts["subject_attractor"] < facts["verb"], "the attractor stands in between"
        assert example.sentence.label == ("correct" if subject == verb else "wrong")
        assert all(tense == "past" for _, tense in facts["embedded"]), "embedded verbs show no number"


def test_agreement_attractor_and_verb_alone_predict_nothing(examples):
    for split in SPLITS:
        data = [e for e in examples("agreement_attractors") if e.sentence.split == split]
        cells = collections.Counter((e.sentence.label, e.facts["subject_number"], e.facts["subject_attractor_number"]) for e in data)
        assert len(cells) == 8 and max(cells.values()) - min(cells.values()) <= 1
    data = [e for e in examples("agreement_attractors") if e.sentence.split == "tr"]
    wrong = [e.sentence.label == "wrong" for e in data]
    for fact in ("subject_attractor_number", "verb_number", "subject_number"):
        assert abs(correlation([e.facts[fact] == "NNS" for e in data], wrong)) < 0.05, fact


def test_agreement_hand_checked_examples():
    """Read and checked by hand: a change to the grammar changes every data set, so update on purpose."""
    got = [(s.text, s.label) for s in generate("agreement_attractors", train=4, dev=2, test=2)[:3]]
    assert got == [
        ("The rabbits beside the door notice their cat.", "correct"),  # rabbits ... notice
        ("Our ducks near every bag is in every heavy shelf.", "wrong"),  # ducks ... is (bag: attractor)
        ("Many wolves that carried two dogs holds his geese.", "wrong"),  # wolves ... holds
    ]


def test_main_verb_tense_label_is_the_main_verbs_tense(examples):
    for example in examples("main_verb_tense"):
        w, facts = words(example.sentence.text), example.facts
        assert tense_of(w[facts["verb"]]) == example.sentence.label == facts["tense"]
        assert facts["embedded"], "every sentence has a distractor verb"
        for index, tense in facts["embedded"]:
            assert index != facts["verb"] and tense_of(w[index]) == tense


def test_main_verb_tense_distractors_are_independent(examples):
    for split in SPLITS:
        data = [e for e in examples("main_verb_tense") if e.sentence.split == split]
        cells = collections.Counter((e.sentence.label, e.facts["embedded"][0][1]) for e in data)
        assert len(cells) == 4 and max(cells.values()) - min(cells.values()) <= 1
    data = [e for e in examples("main_verb_tense") if e.sentence.split == "tr"]
    past = [e.sentence.label == "past" for e in data]
    assert abs(correlation([e.facts["embedded"][0][1] == "past" for e in data], past)) < 0.05


@pytest.mark.parametrize("role", ["subject", "object"])
def test_number_label_is_the_heads_number(role, examples):
    data = examples(f"{role}_number")
    for example in data:
        w, facts = words(example.sentence.text), example.facts
        assert number_of(w[facts[role]]) == example.sentence.label == facts[f"{role}_number"]
        assert number_of(w[facts[f"{role}_attractor"]]) == facts[f"{role}_attractor_number"]
    # The noun lemmas are shared: every noun that heads the phrase shows up in both numbers.
    heads = collections.defaultdict(set)
    for example in data:
        noun = words(example.sentence.text)[example.facts[role]]
        lemma = next(n.singular for n in probing_tasks._NOUNS if noun in (n.singular, n.plural))
        heads[lemma].add(example.sentence.label)
    assert len(heads) >= 20 and sum(labels == {"NN", "NNS"} for labels in heads.values()) >= 0.9 * len(heads)


@pytest.mark.parametrize("role", ["subject", "object"])
def test_number_is_not_recoverable_from_the_attractor(role, examples):
    data = [e for e in examples(f"{role}_number") if e.sentence.split == "tr"]
    assert len(data) == 2000
    plural = [e.sentence.label == "NNS" for e in data]
    attractor = [e.facts[f"{role}_attractor_number"] == "NNS" for e in data]
    assert abs(correlation(attractor, plural)) < 0.05
    other = sum(e.facts[f"{role}_attractor_number"] != e.sentence.label for e in data)
    assert 900 <= other <= 1100, "attractors of the other number are half of them"
    if role == "object":
        subject = [e.facts["subject_number"] == "NNS" for e in data]
        assert abs(correlation(subject, plural)) < 0.1


def test_coordination_inversion_clause_order(examples):
    data = examples("coordination_inversion")
    texts = {e.sentence.text for e in data}
    for example in data:
        text, facts = example.sentence.text, example.facts
        first_event, second_event = facts["events"]
        assert text.count(", and ") == 1
        first, second = text.removesuffix(".").split(", and ")
        if example.sentence.label == "I":
            first_event, second_event = second_event, first_event
        opening = f"{facts['subject']} {first_event}"
        assert first.endswith(opening) or first == opening[0].upper() + opening[1:]
        assert second == f"{facts['pronoun']} {second_event}"
        twin = text.replace(first_event, "\0").replace(second_event, first_event).replace("\0", second_event)
        assert twin not in texts, "a sentence and its inversion are never both in the data"
    assert len({e.facts["script"] for e in data}) >= 30


# --- export ---------------------------------------------------------------------------------


def test_write_senteval_reads_back_identically(tmp_path):
    sentences = generate("object_number", train=30, dev=6, test=6)
    path = tmp_path / "object_number.tsv"
    assert write_senteval(path, sentences) == 42
    assert detect_format(path) == "senteval"
    back = list(read_sentences(path, "senteval"))
    assert [(s.text, s.label, s.split) for s in back] == [(s.text, s.label, s.split) for s in sentences]
    assert [s.location for s in back] == [f"{path}:{n}" for n in range(1, 43)]
    assert list(tmp_path.iterdir()) == [path], "no temporary file left behind"


def test_write_senteval_refuses_unlabelled_sentences_and_leaves_no_file(tmp_path):
    path = tmp_path / "out.tsv"
    with pytest.raises(InputError, match="needs a split"):
        write_senteval(path, [Sentence("A sentence.", label="x", split="tr"), Sentence("No label.")])
    assert list(tmp_path.iterdir()) == []


def test_import_loads_neither_torch_nor_textual():
    code = "import bertscope.data.probing_tasks, sys; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert not {"torch", "transformers", "textual"} & set(done.stdout.split())
