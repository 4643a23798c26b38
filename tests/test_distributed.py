"""Corpus jobs across two gloo ranks on the CPU (torchrun) equal one process; a failing rank stops the job.

Each test launches `torchrun --standalone --nproc-per-node 2` on tests/distributed_job.py with
the bundled model, and holds rank 0's results against the same job run here, in one process.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bertscope
from bertscope import runtime as distributed
from bertscope.api import probe_sentences
from bertscope.data.corpus import sample_corpus
from tests.distributed_job import COMPARE, ERASE, GEOMETRY, MIXING, PROBE_TASK, SAE, cached_probe_arguments, fitted_on_planted
from tests.helpers.models import command_in_a_new_process, save_tiny

JOB = Path(__file__).with_name("distributed_job.py")


def torchrun(mode: str, out: Path, *arguments: Path) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environment["OMP_NUM_THREADS"] = "1"
    environment["BERTSCOPE_CPU_LINEAR"] = "blas"  # the one process's kernels (`model`): the same arithmetic, shared out
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(JOB),
            mode,
            str(out),
            *map(str, arguments),
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


@pytest.fixture(scope="module")
def other_tiny_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny-b"), "BertModel", seed=5, initializer_range=0.5)


@pytest.fixture(scope="module")
def launched_equal(tmp_path_factory, tiny_bert_dir, other_tiny_dir) -> Path:
    """One torchrun for every equality below and the feature cache's (a launch starts torch in three processes)."""
    folder = tmp_path_factory.mktemp("distributed")
    launched = torchrun(
        "equal", folder / "results.pkl", tiny_bert_dir, other_tiny_dir, folder / "cache", sample_corpus("conllu"), folder / "ranks.json"
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def two_ranks(launched_equal):
    return pickle.loads((launched_equal / "results.pkl").read_bytes())


@pytest.fixture(scope="module")
def model():
    return bertscope.load(device="cpu", cpu_linear="blas")


def test_outside_torchrun_nothing_is_sharded_or_started():
    assert distributed.world() == distributed.World(0, 1, 0) and not distributed.started()
    assert list(distributed.shard(range(5))) == [0, 1, 2, 3, 4]
    assert distributed.sum_across({"a": 1}) == {"a": 1}


def test_shards_take_every_sentence_once(monkeypatch):
    taken = []
    for rank in range(3):
        monkeypatch.setenv("WORLD_SIZE", "3")
        monkeypatch.setenv("RANK", str(rank))
        taken.append(list(distributed.shard(iter(range(10)))))
    assert taken == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


class _Store:
    """The launcher's key-value store, as far as progress uses it."""

    def __init__(self):
        self.values = {}

    def set(self, key, value):
        self.values[key] = value.encode()

    def get(self, key):
        return self.values[key]

    def check(self, keys):
        return all(key in self.values for key in keys)


def test_progress_adds_the_ranks_at_rank_0s_stage_only(monkeypatch):
    from bertscope.base.progress import Progress

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    store = _Store()
    monkeypatch.setattr(distributed, "_state", {"store": store, "published": 0.0})
    store.set("progress/1", "40 50 representations")  # rank 1 has done 40 of its 50 sentences
    shown = []
    publish = distributed.whole_corpus(shown.append)
    publish(Progress("representations", 30, 50, result=1))  # `finished` steps are published at once
    publish(Progress("PCA, TwoNN and neighbours", 2, 7, result=1))  # a stage rank 0 runs alone, after the shards
    assert [(step.stage, step.done, step.total) for step in shown] == [
        ("representations", 70, 100),
        ("PCA, TwoNN and neighbours", 2, 7),
    ]


def test_a_rank_without_a_gpu_of_its_own_says_so_itself(monkeypatch, capsys):
    """Launched with more ranks than GPUs: rank 1 finds no cuda:1 before any group exists, so rank 1 (not rank 0,
    which never hears of it) prints the one line, and exits with status 2 before loading anything."""
    import torch

    from bertscope.cli import main

    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(SystemExit) as stop:
        main(["patterns", "--limit", "2", "--json"])
    assert stop.value.code == 2 and not distributed.started()
    assert capsys.readouterr().err.splitlines() == [
        "bertscope: error: rank 1 would use cuda:1, but this machine has 1 GPU; start at most 1 rank on it, or run on the CPU (--device)"
    ]


@pytest.mark.parametrize(
    "stop, said",
    [
        (KeyboardInterrupt, ["bertscope: interrupted: patterns stopped before it finished; no file was left half written"]),
        (distributed.Terminated, []),  # torchrun's SIGTERM: the rank that failed has said why; rank 0 adds nothing
    ],
)
def test_rank_0_speaks_of_ctrl_c_but_not_of_torchruns_stop(monkeypatch, capsys, stop, said):
    from bertscope.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")

    def stopped(*args, **kwargs):
        raise stop

    monkeypatch.setattr("bertscope.cli.common.ModelChoice.deferred", stopped)
    monkeypatch.setattr("bertscope.cli.common.ModelChoice.open", stopped)
    with pytest.raises(SystemExit) as exit_:
        main(["patterns", "--limit", "2", "--json"])
    assert exit_.value.code == 130 and capsys.readouterr().err.splitlines() == said


def test_patterns_over_two_ranks_equal_one_process(two_ranks, model):
    assert two_ranks["world"] == 2
    one, two = bertscope.patterns(model, limit=24, norms=True), two_ranks["patterns"]
    assert "norm_sep" in two.statistics  # the value-weighted norms' sums are added across ranks too
    assert (two.sentences, two.tokens, two.truncated) == (one.sentences, one.tokens, one.truncated) == (24, two.tokens, 0)
    for name, values in one.statistics.items():
        np.testing.assert_allclose(two.statistics[name], values, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(two.pattern_shares, one.pattern_shares)  # counts of classes: identical
    np.testing.assert_array_equal(two.dominant, one.dominant)


def test_syntax_over_two_ranks_equals_one_process(two_ranks, model):
    one, two = bertscope.api.syntax(model, limit=30), two_ranks["syntax"]
    assert (two.sentences, two.words) == (one.sentences, one.words) == (30, one.words)
    assert two.rows() == one.rows()  # integer counts per relation, matched by name across the shards


def test_probe_over_two_ranks_equals_one_process(two_ranks, model):
    import torch

    train = probe_sentences("upos", data=str(sample_corpus("conllu")), limit=70).train
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks (torchrun's default): a weakly penalised fit on 500 words moves with the sums' order
    try:
        one = bertscope.api.probe(model, "upos", train, control=False, random_baseline=False, cache_dir=False)
    finally:
        torch.set_num_threads(threads)
    two = two_ranks["probe"]
    assert two.as_json() == one.as_json()  # the same rows, back in input order, and the probes trained once


def test_erase_over_two_ranks_equals_one_process(two_ranks, model):
    """The features of each split sharded and gathered on rank 0, which fits the eraser and the probes once and shares
    the eraser; the erased features and the measure over the test split sharded, the measure's sums added."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks, for the probes' fits (see the probe's test)
    try:
        one = bertscope.erase(model, "upos", data=str(sample_corpus("conllu")), **ERASE)
    finally:
        torch.set_num_threads(threads)
    two = two_ranks["erase"]
    assert (two.rank, two.counts, two.guardedness, two.majority) == (one.rank, one.counts, one.guardedness, one.majority)
    assert two.variance_share == pytest.approx(one.variance_share, rel=1e-6)  # float32 arithmetic of the same rows
    for condition in ("none", "erased", "control"):
        assert two.measure[condition] == pytest.approx(one.measure[condition], abs=1e-5), condition
        assert two.measure["loss"][condition] == pytest.approx(one.measure["loss"][condition], abs=1e-5), condition
    assert two.notes == one.notes


@pytest.mark.parametrize("method", ["ablation", "gradient"])
def test_importance_over_two_ranks_equals_one_process(two_ranks, model, method):
    one = bertscope.importance(model, "preserve", limit=10, method=method)
    two = two_ranks[method]
    assert two.sentences == one.sentences == 10
    np.testing.assert_allclose(two.raw, one.raw, rtol=1e-4, atol=1e-7)  # float32 forwards in other batches: ~1e-6 relative
    assert two.baseline_loss == pytest.approx(one.baseline_loss, abs=1e-6)
    assert list(two.order())[:10] == list(one.order())[:10]


def test_a_rank_metric_s_ablation_over_two_ranks_equals_one_process(two_ranks, tiny_bert_dir):
    """Similarity's Spearman rho over pairs gathered from both ranks, for the unablated model and for each mask."""
    from tests.distributed_job import SIMILARITY

    one = bertscope.importance(bertscope.load(str(tiny_bert_dir), device="cpu"), "similarity", **SIMILARITY)
    two = two_ranks["similarity"]
    assert two.sentences == one.sentences == 10
    np.testing.assert_allclose(two.raw, one.raw, rtol=1e-4, atol=1e-7)
    assert two.baseline_metric == pytest.approx(one.baseline_metric, abs=1e-9)
    np.testing.assert_allclose(two.metric_changes.heads, one.metric_changes.heads, atol=1e-9)
    np.testing.assert_allclose(two.metric_changes.layers, one.metric_changes.layers, atol=1e-9)


def test_the_probe_objective_is_trained_once_on_rank_0(two_ranks, tiny_bert_dir):
    one = bertscope.importance(bertscope.load(str(tiny_bert_dir), device="cpu"), "probe", task=PROBE_TASK, method="gradient")
    two = two_ranks["probe_objective"]
    assert two_ranks["probe_fits"] == [1, 0]  # rank 1 received rank 0's probe
    assert two.sentences == one.sentences
    np.testing.assert_allclose(two.raw, one.raw, rtol=1e-4, atol=1e-7)


def test_geometry_over_two_ranks_samples_the_same_rows_as_one_process(two_ranks, model):
    one, two = bertscope.api.geometry(model, **GEOMETRY), two_ranks["geometry"]
    assert (two.sentences, two.seen, two.truncated) == (one.sentences, one.seen, one.truncated) == (16, one.seen, 0)
    assert two.size == one.size == 60 < one.seen  # a sample, merged from both ranks' shards
    assert two.texts == one.texts and two.labels == one.labels  # the same rows, in the same (corpus) order
    np.testing.assert_allclose(two.cka, one.cka, atol=1e-5)
    np.testing.assert_allclose(two.projection, one.projection, atol=1e-4)
    np.testing.assert_allclose(two.intrinsic_dimension, one.intrinsic_dimension, rtol=1e-4)
    np.testing.assert_allclose(two.neighbourhood_overlap, one.neighbourhood_overlap, atol=1e-9)


def test_mixing_agreement_over_two_ranks_equals_one_process(two_ranks, model):
    """Each rank measures its shard in its own batches; the sums of the agreements and shares are added on rank 0."""
    one, two = bertscope.mixing_agreement(model, **MIXING), two_ranks["mixing"]
    assert (two.sentences, two.tokens, two.methods) == (one.sentences, one.tokens, one.methods) == (12, one.tokens, one.methods)
    np.testing.assert_allclose(two.agreement, one.agreement, atol=1e-5)  # float32 passes in other batches
    np.testing.assert_allclose(two.rolled_shares, one.rolled_shares, atol=1e-5)
    np.testing.assert_allclose(two.layer_shares, one.layer_shares, atol=1e-5)


def test_compare_over_two_ranks_equals_one_process(two_ranks, tiny_bert_dir, other_tiny_dir):
    one = bertscope.api.compare(bertscope.load(str(tiny_bert_dir), device="cpu"), str(other_tiny_dir), **COMPARE)
    two = two_ranks["compare"]
    assert (two.sentences, two.tokens, two.rows_sampled) == (one.sentences, one.tokens, one.rows_sampled) == (30, one.tokens, 80)
    np.testing.assert_allclose(two.head_cosine, one.head_cosine, atol=1e-6)  # sums over both shards' sentences
    np.testing.assert_allclose(two.head_cosine_std, one.head_cosine_std, atol=1e-5)
    np.testing.assert_allclose(two.cka, one.cka, atol=1e-5)
    np.testing.assert_allclose(two.cka_debiased, one.cka_debiased, atol=1e-5)


def test_an_sae_trained_over_two_ranks_is_one_process_sae(two_ranks, tiny_bert_dir, tmp_path):
    """Each rank takes its share of each block's sentences; a step's batch is the union of the ranks' rows (the
    shuffle is by token keys, so the same batch as in one process), the gradients added: one process's SAE, and
    held-out figures, within float noise. Rank 0 alone wrote the directory."""
    from bertscope.analyses.sae.autoencoder import TopKSAE

    tiny = bertscope.load(str(tiny_bert_dir), device="cpu")
    one = bertscope.train_sae(tiny, data=str(sample_corpus("conllu")), out=str(tmp_path / "sae"), **SAE)
    two, written = two_ranks["sae"]
    assert (two.sentences, two.tokens, two.held_out_tokens) == (one.sentences, one.tokens, one.held_out_tokens)
    assert two.steps == one.steps == 6  # three steps an epoch, each on both ranks' rows
    for name, tensor in TopKSAE.load(tmp_path / "sae")[0].weights().items():
        np.testing.assert_allclose(written[name].numpy(), tensor.numpy(), atol=1e-6, err_msg=name)
    assert two.fvu == pytest.approx(one.fvu, abs=1e-6) and two.l0 == one.l0 == 8
    assert two.dead_share == one.dead_share and two.preserve == pytest.approx(one.preserve, abs=1e-6)


def test_the_sae_trainer_over_two_ranks_takes_one_process_steps(two_ranks):
    """The trainer alone, each rank holding every other row of each block, features dying and revived by the AuxK
    loss: one process's decoder and running figures, within float noise."""
    one = fitted_on_planted()
    weights, history, steps = two_ranks["sae_fit"]
    assert steps == one.steps
    for name, tensor in one.sae.weights().items():
        np.testing.assert_allclose(weights[name].numpy(), tensor.numpy(), atol=1e-6, err_msg=name)
    assert any(row["dead"] > 0 for row in one.history)  # the AuxK loss ran
    for ours, theirs in zip(history, one.history, strict=True):
        assert ours == pytest.approx(theirs, abs=1e-5)


def test_a_rank_that_runs_out_of_memory_stops_the_job_with_one_line(tmp_path):
    out = tmp_path / "patterns.json"
    launched = torchrun("fail", out)
    assert launched.returncode != 0
    ours = [line for line in launched.stderr.splitlines() if line.startswith("bertscope:")]
    assert ours == [
        "bertscope: error: rank 1: out of memory (CUDA out of memory. Tried to allocate 2.00 GiB); use a smaller batch size (--batch-size N)"
    ]
    assert not out.exists() and not list(tmp_path.iterdir())  # no output, not even a temporary file


def test_ranks_and_one_process_share_the_feature_cache(launched_equal, tmp_path, tiny_bert_dir):
    """Rank 0 writes the whole corpus's features under one process's key: a later single process finds them all
    (and so needs neither transformers nor the weights), with the same report."""
    cache, out, data = launched_equal / "cache", launched_equal / "ranks.json", sample_corpus("conllu")  # one path for both runs
    arguments = cached_probe_arguments(str(cache), str(tiny_bert_dir), str(data))
    status, errors = command_in_a_new_process([*arguments, "-o", str(tmp_path / "one.json")])
    assert status == ["0", "False"], errors
    assert (tmp_path / "one.json").read_text() == out.read_text()
