"""Corpus jobs keep nothing of a batch once it is done: memory is flat in the corpus (issue 15).

Each check drives a job's generator on the tiny model over a varied corpus whose batches grow
longer as it goes (length-sorted chunks), and measures the bytes of every live torch tensor
between batches. Anything a batch left behind (its outputs held across the yield, a list of
batches, a cache without a bound) makes the figure grow with the batches read.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.probing.probes import ProbeTraining
from bertscope.data.batching import plan_batches
from bertscope.data.corpus import Sentence
from bertscope.data.splits import make_splits
from bertscope.data.treebank import generate_treebank

# A few KB may appear once (a buffer the framework sizes on first use); one batch of the tiny
# model holds far more: 4 sentences of ~40 tokens are ~80 KB of hidden states, ~300 KB of maps.
SLACK = 16 * 1024


@pytest.fixture(autouse=True)
def only_what_the_test_makes():
    """What was alive before the test (its fixtures' models, other tests' objects) is set aside from the collector,
    so `live_tensor_bytes` walks the objects the test made, not the whole process (0.4 s a look in a full run)."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def live_tensor_bytes() -> int:
    """Bytes of the storages of every torch tensor made since the test began and alive now (each storage once)."""
    gc.collect()
    storages = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and obj.device.type == "cpu" and not obj.is_meta:
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def varied(count: int, seed: int = 0) -> list[Sentence]:
    """Treebank sentences; every fifth one three of them joined, so batches differ in length."""
    trees = generate_treebank(count * 3, seed=seed)
    sentences, pool = [], iter(trees)
    for index in range(count):
        text = next(pool).text
        if index % 5 == 4:
            text = text.rstrip(".") + ", and " + next(pool).text.rstrip(".") + ", and " + next(pool).text
        sentences.append(Sentence(text, location=f"varied:{index + 1}"))
    return sentences


def growth_between_batches(steps, skip: int = 1) -> tuple[int, int]:
    """Live tensor bytes after the first `skip` items, and the most seen at any later item."""
    first = None
    most = 0
    for number, _ in enumerate(steps):
        if number < skip:
            continue
        size = live_tensor_bytes()
        if first is None:
            first = size
        most = max(most, size)
    assert first is not None, "the job yielded too few items to compare"
    return first, most


def test_batches_are_capped_by_tokens_and_by_the_square():
    lengths = [10] * 40 + [100] * 10 + [400]
    batches = list(plan_batches(lengths, 32, max_tokens=1000, max_square=50_000))
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) == 1 or (len(batch) <= 32 and len(batch) * longest <= 1000 and len(batch) * longest**2 <= 50_000)
    assert [lengths[i] for i in batches[-1]] == [400]  # alone beyond the caps, but not dropped
    assert max(len(b) for b in batches if lengths[b[0]] == 100) == 5  # 5 · 100² = 50,000


def test_batches_fill_the_caps_so_the_largest_batch_does_not_follow_the_corpus():
    """With no sentence count given, a small corpus's largest batch is as large as a big one's."""

    def largest(lengths, **caps):
        return max(len(batch) * max(lengths[i] for i in batch) for batch in plan_batches(lengths, max_tokens=4096, **caps))

    rng = np.random.default_rng(0)
    big = rng.integers(5, 130, size=16_000).tolist()  # a big corpus holds longer sentences...
    small = [min(length, 79) for length in big[:1_000]]  # ... than its first thousand
    assert largest(small) > 0.95 * 4096 and largest(big) > 0.95 * 4096
    assert max(len(batch) for batch in plan_batches([10] * 1000, max_tokens=4096)) == 409  # not 32 sentences
    square = [len(batch) * max(big[i] for i in batch) ** 2 for batch in plan_batches(big, max_tokens=4096, max_square=300_000)]
    assert max(square) <= 300_000


def test_pattern_statistics_keep_no_batch(tiny_session):
    from bertscope.analyses.attention.patterns import pattern_statistics

    steps = pattern_statistics(tiny_session, varied(96), job=JobOptions(batch_size=4), chunk_size=24)
    first, most = growth_between_batches(steps)
    assert most <= first + SLACK, f"live tensors grew from {first:,} to {most:,} bytes as batches were read"


def test_representation_sample_keeps_no_batch(tiny_session):
    from bertscope.analyses.geometry.representations import stream_sample

    steps = stream_sample(
        [tiny_session, tiny_session],
        varied(96),
        unit="token",
        max_rows=16,
        job=JobOptions(batch_size=4),
        attentions=True,
        on_batch=lambda outputs, prepared: None,
    )
    first, most = growth_between_batches(steps)
    assert most <= first + SLACK, f"live tensors grew from {first:,} to {most:,} bytes as batches were read"


def test_importance_walks_keep_no_batch(tiny_session):
    from bertscope.analyses.importance.objectives import make_objective
    from bertscope.analyses.importance.run import gradient_importance

    before = live_tensor_bytes()
    objective = make_objective(tiny_session, "preserve", varied(96), batch_size=4)
    assert live_tensor_bytes() - before <= 4096, "preparing the objective kept tensors of its sentences"
    first, most = growth_between_batches(gradient_importance(objective), skip=2)
    assert most - first <= objective.CACHE_ELEMENTS * 4, "the walk kept more than the bounded reference cache"
    held = live_tensor_bytes()
    for _ in gradient_importance(objective):
        pass
    assert live_tensor_bytes() <= held + 4096, "a second walk kept what the first did not"


def test_task_objective_walks_keep_no_batch(tiny_session, tmp_path):
    """The objectives of fine-tuned models stream as `preserve` does: similarity's sentence pairs (each side pooled)
    and a token classifier's labelled words, walked by gradient and by ablation."""
    from bertscope.analyses.importance.objectives import make_objective
    from bertscope.analyses.importance.run import ablation_importance, gradient_importance
    from bertscope.model.session import Session
    from tests.helpers.models import NER_LABELS, save_tiny_ner

    sentences = varied(64)
    pairs = [Sentence(a.text, pair=b.text, label=str(i % 6)) for i, (a, b) in enumerate(zip(sentences, sentences[1:] + sentences[:1]))]
    tagger = Session.open(str(save_tiny_ner(tmp_path / "ner")), device="cpu")
    tagged = []
    for i, sentence in enumerate(sentences):
        words = tuple(sentence.text.split())
        tagged.append(Sentence(sentence.text, words=words, tags=tuple(NER_LABELS[(i + j) % 2] for j in range(len(words)))))
    for session, name, data in ((tiny_session, "similarity", pairs), (tagger, "token-classification", tagged)):
        objective = make_objective(session, name, data, batch_size=4)
        one_batch = 4 * 16 * session.hidden_size * (session.num_layers + 1) * 4  # 4 sentences' states, 16 tokens each
        for walk in (gradient_importance, ablation_importance):
            first, most = growth_between_batches(walk(objective), skip=2)
            assert most - first <= one_batch, f"{name}'s {walk.__name__} kept batches: {most - first:,} bytes"


def test_cloze_keeps_no_batch(tiny_mlm_session):
    from bertscope.analyses.mlm import cloze_scores
    from bertscope.analyses.mlm_results import ClozeQuery

    queries = [ClozeQuery(s.text.rstrip(".") + " [MASK].", "the", f"q:{i}") for i, s in enumerate(varied(64))]
    first, most = growth_between_batches(cloze_scores(tiny_mlm_session, queries, batch_size=4))
    assert most <= first + SLACK, f"live tensors grew from {first:,} to {most:,} bytes as batches were read"


def test_attention_consumer_sees_every_layer_and_the_output_keeps_none(tiny_session):
    inputs = tiny_session.tokenize_batch(["A short one.", "A somewhat longer sentence with more words in it."])
    seen = {}
    with torch.inference_mode():
        output = tiny_session.run(
            inputs, attentions=True, hidden_states=False, on_attention=lambda layer, w: seen.setdefault(layer, w.clone())
        )
        plain = tiny_session.run(inputs, attentions=True, hidden_states=False)
    assert not output.attentions
    assert sorted(seen) == list(range(tiny_session.num_layers))
    for layer, weights in enumerate(plain.attentions):
        np.testing.assert_allclose(seen[layer].numpy(), weights.numpy(), atol=1e-6)


@pytest.mark.parametrize("cap", [None, 200_000])
def test_plan_keeps_every_sentence_once(cap):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=500).tolist()
    batches = list(plan_batches(lengths, 16, max_tokens=2048, max_square=cap))
    assert sorted(i for b in batches for i in b) == list(range(500))


def test_corpus_heap_maps_large_blocks_only_while_a_job_runs(monkeypatch):
    """Corpus jobs serve large blocks with mmap (no fragmented heap growing chunk after chunk), nested
    jobs included; the interactive threshold comes back when the last one ends."""
    from bertscope.model import allocator

    calls = []
    monkeypatch.setattr(allocator, "_tuned", True)
    monkeypatch.setattr(allocator, "_mallopt", lambda option, value: calls.append((option, value)))
    outer = allocator.corpus_heap_over(iter(range(3)))
    assert next(outer) == 0
    assert list(allocator.corpus_heap_over(iter("ab"))) == ["a", "b"]  # a nested job (a pruning curve's importance)
    assert calls == [(allocator.M_MMAP_THRESHOLD, allocator.STREAMING_THRESHOLD)]
    assert list(outer) == [1, 2]
    assert calls[-1] == (allocator.M_MMAP_THRESHOLD, allocator._kept)
    abandoned = allocator.corpus_heap_over(iter(range(3)))
    next(abandoned)
    del abandoned  # a cancelled job: dropping its generator restores the threshold too
    gc.collect()
    assert calls[-1] == (allocator.M_MMAP_THRESHOLD, allocator._kept) and len(calls) == 4


def test_probe_training_holds_a_block_of_rows_not_the_whole_layer(monkeypatch):
    """Beyond FIT_BLOCK rows a linear probe is fitted on blocks read from the features; the
    probes are those of the in-memory fit, and no float32 copy of a whole layer is alive."""
    from bertscope.analyses.probing import lbfgs, probes

    rng = np.random.default_rng(0)
    n, dim, classes = 1200, 16, 4
    y = rng.integers(0, classes, n)
    X = (rng.normal(size=(n, 2, dim)) + 0.4 * rng.normal(size=(classes, 1, dim))[y]).astype(np.float16)
    X_dev, y_dev = X[:300].copy(), y[:300].copy()
    whole = probes.train_probes(X, y, X_dev, y_dev, num_classes=classes, seed=0, training=ProbeTraining(epochs=25))

    monkeypatch.setattr(probes, "FIT_BLOCK", 150)
    monkeypatch.setattr(probes, "SCORE_BLOCK", 100)
    seen = []
    minimise_together = lbfgs.minimise_together

    def watched(function, starts, **options):  # live tensors at the first step of every fit, the final ones included
        first = []

        def measured(points):
            if not first:
                first.append(True)
                seen.append(live_tensor_bytes())
            return function(points)

        return minimise_together(measured, starts, **options)

    monkeypatch.setattr(lbfgs, "minimise_together", watched)
    before = live_tensor_bytes()
    blocks = probes.train_probes(X, y, X_dev, y_dev, num_classes=classes, seed=0, training=ProbeTraining(epochs=25))
    assert blocks.l2.tolist() == whole.l2.tolist()
    np.testing.assert_allclose(blocks.mean, whole.mean, atol=1e-5)
    np.testing.assert_allclose(blocks.std, whole.std, rtol=1e-5)
    assert np.abs(blocks.weights - whole.weights).max() < 2e-3 * np.abs(whole.weights).max()
    assert np.abs(blocks.dev_accuracy - whole.dev_accuracy).max() <= 2 / len(y_dev)
    layer_copy = n * dim * 4  # what the in-memory fit holds: 77 KB
    held = max(seen) - before
    assert held < layer_copy / 2, f"{held:,} bytes of tensors alive while fitting; a whole layer is {layer_copy:,}"


def test_on_a_gpu_a_layer_is_held_whole_and_on_the_cpu_a_block():
    """The CPU keeps host memory flat in the corpus (FIT_BLOCK rows); a GPU holds a layer whole up to 2 GiB, since
    each block past the first would be copied from the host at every L-BFGS evaluation."""
    import torch

    from bertscope.analyses.probing import probes

    assert probes.block_rows(torch.device("cpu"), 384, probes.FIT_BLOCK) == probes.FIT_BLOCK
    held = probes.block_rows(torch.device("cuda", 0), 384, probes.FIT_BLOCK)
    assert held == (2 << 30) // (4 * 384) and held > 1_000_000  # a million MiniLM rows: 1.5 GB of float32
    assert probes.block_rows(torch.device("cuda"), 1 << 20, probes.FIT_BLOCK) == probes.FIT_BLOCK  # never fewer


def test_probes_read_the_rows_kept_of_a_memory_map_a_block_at_a_time(monkeypatch, tmp_path):
    """A rare label left out keeps a subset of the rows: the probes are those trained on a copy
    of that subset, and no copy of the split (or of a layer of it) is made to train or score them."""
    import tracemalloc

    from bertscope.analyses.probing import probes
    from bertscope.analyses.probing.run import encode_labels

    rng = np.random.default_rng(1)
    n, dim, classes = 3000, 64, 3
    y = rng.integers(0, classes, n)
    X = np.lib.format.open_memmap(tmp_path / "features.npy", mode="w+", dtype=np.float16, shape=(n, 3, dim))
    X[:] = rng.normal(size=(n, 3, dim)) + 0.5 * rng.normal(size=(classes, 1, dim))[y]
    X.flush()
    X = np.load(tmp_path / "features.npy", mmap_mode="r")
    names = [f"c{label}" for label in y]
    names[10] = "rare"  # one training example: left out, so every split's rows are a subset
    labels = encode_labels(names, names[:1000], names[:1000])
    assert labels.keep["train"] is not None and len(labels.keep["train"]) == n - 1

    monkeypatch.setattr(probes, "FIT_BLOCK", 250)
    monkeypatch.setattr(probes, "SCORE_BLOCK", 100)
    monkeypatch.setattr(probes, "SELECTION_ROWS", 200)  # the L2 search's own bounded copy of rows
    monkeypatch.setattr(probes, "EVAL_BATCH", 100)  # and scoring's
    options = dict(num_classes=len(labels.classes), seed=0, training=ProbeTraining(epochs=10))
    copied = probes.train_probes(X[labels.keep["train"]], labels.train, X[labels.keep["dev"]], labels.dev, **options)
    tracemalloc.start()
    try:
        lazy = probes.train_probes(labels.rows("train", X), labels.train, labels.rows("dev", X), labels.dev, **options)
        _, training = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        accuracy = probes.score(lazy, labels.rows("test", X), labels.test, len(labels.classes)).accuracy
        _, scoring = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(lazy.weights, copied.weights)
    np.testing.assert_array_equal(accuracy, probes.score(copied, X[labels.keep["test"]], labels.test, len(labels.classes)).accuracy)
    layer = n * dim * 2  # one layer of the training rows, float16: 384 KB
    assert training < layer / 4, f"{training:,} bytes of arrays traced while training; a layer of the split is {layer:,}"
    test_split = len(labels.test) * 3 * dim * 2  # 384 KB
    assert scoring < test_split / 2, f"{scoring:,} bytes of arrays traced while scoring; the test split is {test_split:,}"


def test_feature_extraction_tokenises_a_chunk_at_a_time_and_keeps_no_batch(tiny_session, tmp_path, monkeypatch):
    """Probing's features: a chunk's tokens and a batch's tensors are gone once done; only the
    features (here a memory-mapped cache entry) grow with the corpus."""
    from bertscope.analyses import streaming
    from bertscope.analyses.probing import features

    monkeypatch.setattr(streaming, "CHUNK", 16)
    encode = features._encode
    chunk_sizes = []

    def counted(session, sentences, level):
        chunk_sizes.append(len(sentences))
        return encode(session, sentences, level)

    monkeypatch.setattr(features, "_encode", counted)
    sentences = generate_treebank(40, seed=3)
    steps = features.extract_features(tiny_session, sentences, features.FeatureOptions(level="word"), cache_dir=tmp_path, batch_size=8)
    first, most = growth_between_batches(step for step in steps if step.result is None)
    assert most <= first + SLACK, f"live tensors grew from {first:,} to {most:,} bytes as batches were read"
    assert chunk_sizes and max(chunk_sizes) <= 16 and sum(chunk_sizes) == len(sentences)
    result = list(features.extract_features(tiny_session, sentences, features.FeatureOptions(level="word"), cache_dir=tmp_path))[-1].result
    assert result.from_cache and len(result.X) == sum(len(sentence.words) for sentence in sentences)


def test_probe_training_runs_on_the_corpus_heap(tiny_session, monkeypatch):
    """A probe's fit streams blocks of rows and their float64 sums through malloc: on the heap that
    interactive passes keep, each block's temporaries left freed holes and the heap grew with the
    number of blocks (EWT, 8,000 sentences: +107 MB). Training must run with blocks of
    FITTING_THRESHOLD and more mapped and handed back, after the feature passes' freed memory
    is trimmed, and give the interactive setting back when done."""
    from bertscope.analyses.probing import probes
    from bertscope.analyses.probing import run as probing
    from bertscope.model import allocator

    calls, streaming_while_fitting = [], []
    monkeypatch.setattr(allocator, "_tuned", True)
    monkeypatch.setattr(allocator, "_mallopt", lambda option, value: calls.append((option, value)))
    trims = []
    monkeypatch.setattr(allocator, "release_freed_memory", lambda: trims.append(len(calls)))
    train_probes = probes.train_probes

    def watched(*args, **options):
        streaming_while_fitting.append(allocator._streaming > 0 and calls[-1] == (allocator.M_MMAP_THRESHOLD, allocator.FITTING_THRESHOLD))
        return train_probes(*args, **options)

    monkeypatch.setattr(probes, "train_probes", watched)
    splits = make_splits(list(generate_treebank(60, seed=3)), None, None)
    steps = list(probing.run_probe(tiny_session, "upos", splits, control=False, random_baseline=False, job=JobOptions(cache_dir=False)))
    assert steps[-1].result is not None and streaming_while_fitting == [True]
    assert trims, "the feature passes' freed memory was not trimmed before training"
    assert calls[-1] == (allocator.M_MMAP_THRESHOLD, allocator._kept) and allocator._streaming == 0


def test_probing_keeps_only_the_treebank_columns_its_task_reads(tmp_path):
    """Probing holds every sentence of its splits: the columns its task never reads are not kept."""
    from bertscope.api import probe_sentences
    from bertscope.data.treebank import generate_treebank, write_conllu

    path = tmp_path / "treebank.conllu"
    write_conllu(path, generate_treebank(20, seed=1))
    upos = probe_sentences("upos", data=path).train
    assert all(s.words and s.upos and s.xpos is None and s.heads is None and s.deprels is None for s in upos)
    depth = probe_sentences("depth", data=path).train
    assert all(s.heads and s.upos and s.xpos is None and s.deprels is None for s in depth)  # PUNCT is skipped by its UPOS
    deprel = probe_sentences("deprel", data=path).train
    assert [s.deprels for s in deprel] == [tree.deprels for tree in generate_treebank(20, seed=1)]
