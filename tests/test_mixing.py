"""Context mixing (issue 32): each measure against a computation of its own, written here.

- value zeroing: for each token j, a forward hook that zeroes j's values on the value projection (module paths
  spelled out below) and a plain call of the layer, T separate runs; bertscope computes the T variants as rows of
  one batch from the attention block's decomposition;
- ALTI: one layer of a two-token input by hand, from the weights (queries, keys, values, LayerNorm) up;
- attention flow: networkx's maximum flow (float capacities, Edmonds-Karp) on the same layered graph;
- rollout: analyses.attribution's; norms: the session's value-weighted norms.
"""

from __future__ import annotations

import json
import warnings

import networkx as nx
import numpy as np
import pytest
import torch

import bertscope
from bertscope.analyses.attribution import rollout as attribution_rollout
from bertscope.analyses.conditions import Conditions
from bertscope.analyses.mixing.results import METHODS, PER_LAYER
from bertscope.analyses.mixing.run import mixings, rolled_out
from bertscope.base.progress import outcome
from bertscope.model.results import Encoding
from tests.family_models import FAMILIES, save_tiny_family

TEXT = "The keys to the cabinet are on the table."
SHORT = "The cat sat."

# Per family: the module whose output holds a layer's values, and which third of it (ModernBERT's fused Wqkv).
VALUES = {
    "bert": lambda layer: (layer.attention.self.value, None),
    "distilbert": lambda layer: (layer.attention.v_lin, None),
    "albert": lambda layer: (layer.attention.value, None),
    "deberta-v2": lambda layer: (layer.attention.self.value_proj, None),
    "modernbert": lambda layer: (layer.attn.Wqkv, 2),
    "mpnet": lambda layer: (layer.attention.attn.v, None),
}


def value_zeroing_by_hooks(session, family: str, text: str, mask=None) -> np.ndarray:
    """`[L, T, T]` raw 1 − cos, one plain run of each layer per zeroed token, the values zeroed by a hook of this file."""
    hidden = session.forward(text, attentions=False, mask=mask, mlm_logits=False).hidden_states
    length, layers = hidden.shape[1], session.num_layers
    gates = session.gate_tensor(session.mask(mask))
    scores = np.zeros((layers, length, length))
    from bertscope.model.ablation import attention_pass

    for index, layer in enumerate(session.layer_modules):
        module, third = VALUES[family](layer)
        entering = torch.as_tensor(hidden[index])[None]
        for zeroed in range(length):

            def zero(_module, _args, output, zeroed=zeroed, third=third):
                output = output.clone()
                if third is None:
                    output[:, zeroed] = 0
                else:
                    width = output.shape[-1] // 3
                    output[:, zeroed, third * width :] = 0
                return output

            handle = module.register_forward_hook(zero)
            try:
                with torch.inference_mode(), attention_pass(session._layers, gates=gates):
                    changed = session.run_layers(entering, index, index + 1)[0].double()
            finally:
                handle.remove()
            clean = torch.as_tensor(hidden[index + 1]).double()
            scores[index, :, zeroed] = (1 - torch.nn.functional.cosine_similarity(changed, clean, dim=-1)).numpy()
    return scores


def normalise(matrix: np.ndarray) -> np.ndarray:
    return matrix / matrix.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def found(tiny_session):
    return outcome(mixings(tiny_session, TEXT))


def test_every_measure_has_rows_summing_to_one_and_no_negative_cell(found):
    assert list(found) == list(METHODS)
    for method, mixing in found.items():
        assert mixing.rolled.shape == (3, len(mixing.tokens), len(mixing.tokens)), method
        np.testing.assert_allclose(mixing.rolled.sum(-1), 1.0, atol=1e-9, err_msg=method)
        assert (mixing.rolled >= 0).all(), method
        if method in PER_LAYER:
            np.testing.assert_allclose(mixing.per_layer.sum(-1), 1.0, atol=1e-9, err_msg=method)
            assert (mixing.per_layer >= 0).all(), method
            np.testing.assert_allclose(mixing.rolled, rolled_out(torch.as_tensor(mixing.per_layer)).numpy(), atol=1e-12)
        else:
            assert mixing.per_layer is None


def test_value_zeroing_equals_zeroing_values_by_hooks_one_token_at_a_time(tiny_session, found):
    reference = value_zeroing_by_hooks(tiny_session, "bert", TEXT)
    np.testing.assert_allclose(found["value-zeroing"].per_layer, normalise(reference), atol=2e-4)


def test_norms_attention_and_rollout_are_the_sessions_own(tiny_session, found):
    out = tiny_session.forward(TEXT, norms=True)
    np.testing.assert_allclose(found["norms"].per_layer, normalise(out.norms.sum(1).astype(np.float64)), atol=1e-6)
    np.testing.assert_allclose(found["attention"].per_layer, out.attentions.mean(1), atol=1e-6)
    rows = np.arange(len(out.tokens))
    for layer in range(tiny_session.num_layers):
        for row in rows:
            np.testing.assert_allclose(
                found["rollout"].rolled[layer][row], attribution_rollout(out.attentions, layer + 1, rows[row : row + 1]), atol=1e-6
            )


def test_attention_flow_equals_a_general_max_flow_solver(tiny_session):
    mixing = bertscope.mixing(tiny_session, SHORT, method="flow")
    attentions = tiny_session.forward(SHORT).attentions.astype(np.float64)
    layers, _, length, _ = attentions.shape
    residual = 0.5 * attentions.mean(1) + 0.5 * np.eye(length)
    residual /= residual.sum(-1, keepdims=True)
    graph = nx.DiGraph()
    for layer in range(layers):  # token a of hidden state layer+1 gives to token b of hidden state layer
        for a in range(length):
            for b in range(length):
                graph.add_edge((layer + 1, a), (layer, b), capacity=float(residual[layer, a, b]))
    for layer in range(layers):
        flows = np.array([[nx.maximum_flow_value(graph, (layer + 1, i), (0, j)) for j in range(length)] for i in range(length)])
        np.testing.assert_allclose(mixing.rolled[layer], normalise(flows), atol=1e-6)


def test_alti_by_hand_on_one_layer_of_two_tokens(tiny_session):
    tokenizer = tiny_session.tokenizer
    ids = np.array([tokenizer.cls_token_id, tokenizer.sep_token_id])
    encoding = Encoding(
        text="",
        pair=None,
        tokens=("[CLS]", "[SEP]"),
        input_ids=ids,
        token_type_ids=np.zeros(2, dtype=np.int64),
        special=np.array([True, True]),
        word_ids=(None, None),
        segment_ids=(None, None),
    )
    mixing = outcome(mixings(tiny_session, encoding, methods=["alti"]))["alti"]
    x = torch.as_tensor(tiny_session.forward(encoding, attentions=False).hidden_states[0]).double()  # [2, D]
    layer = tiny_session.model.encoder.layer[0]
    attention, output = layer.attention.self, layer.attention.output
    heads = tiny_session.num_heads
    size = x.shape[1] // heads

    def linear(module, inputs):
        return inputs @ module.weight.detach().double().T + module.bias.detach().double()

    q, k, v = (linear(module, x).view(2, heads, size) for module in (attention.query, attention.key, attention.value))
    w_o = output.dense.weight.detach().double()  # [D, H·d]
    gain, beta, eps = output.LayerNorm.weight.detach().double(), output.LayerNorm.bias.detach().double(), output.LayerNorm.eps
    expected = np.zeros((2, 2))
    for i in range(2):
        terms = []
        for j in range(2):
            term = x[i].clone() if i == j else torch.zeros_like(x[i])
            for h in range(heads):
                scores = torch.stack([q[i, h] @ k[m, h] for m in range(2)]) / size**0.5
                alpha = torch.softmax(scores, 0)[j]
                term = term + alpha * (w_o[:, h * size : (h + 1) * size] @ v[j, h])
            terms.append(term)
        summed = terms[0] + terms[1] + output.dense.bias.detach().double()
        sigma = torch.sqrt(summed.var(unbiased=False) + eps)
        y = gain * (summed - summed.mean()) / sigma + beta  # the LayerNorm's output: the attention block's
        for j in range(2):
            t = gain * (terms[j] - terms[j].mean()) / sigma  # linearised at token i's own sigma
            expected[i, j] = max(0.0, float(y.abs().sum() - (y - t).abs().sum()))
    np.testing.assert_allclose(mixing.per_layer[0], normalise(expected), atol=1e-5)
    assert (mixing.per_layer >= 0).all()
    np.testing.assert_allclose(mixing.per_layer.sum(-1), 1.0, atol=1e-9)


def test_a_head_mask_changes_the_masked_layer_and_above_not_below(tiny_session, found):
    masked = outcome(mixings(tiny_session, TEXT, conditions=Conditions(tiny_session.mask("1:0,1:2"))))
    for method in ("attention", "norms", "value-zeroing", "alti"):
        np.testing.assert_allclose(masked[method].per_layer[0], found[method].per_layer[0], atol=1e-6, err_msg=method)
        assert np.abs(masked[method].per_layer[1] - found[method].per_layer[1]).max() > 1e-5, method  # near-uniform random heads
    reference = value_zeroing_by_hooks(tiny_session, "bert", TEXT, mask="1:0,1:2")
    np.testing.assert_allclose(masked["value-zeroing"].per_layer, normalise(reference), atol=2e-4)
    uniform = bertscope.mixing(tiny_session, TEXT, method="value-zeroing", mask="1:0", ablation="uniform")
    assert np.abs(uniform.per_layer[1] - found["value-zeroing"].per_layer[1]).max() > 1e-3


def test_a_layer_with_every_head_off_mixes_nothing(tiny_session):
    with pytest.warns(bertscope.BertscopeNote, match="layer 1 is switched off"):
        mixing = bertscope.mixing(tiny_session, SHORT, method="value-zeroing", mask="1:*")
    np.testing.assert_allclose(mixing.per_layer[1], np.eye(len(mixing.tokens)), atol=1e-9)


@pytest.fixture(scope="module", params=FAMILIES)
def family_session(request, tmp_path_factory):
    directory = save_tiny_family(tmp_path_factory.mktemp(f"mixing-{request.param}"), request.param, seed=5)
    return request.param, bertscope.load(str(directory), device="cpu")


def test_every_family_value_zeroing_by_hooks_and_alti_rows(family_session):
    family, session = family_session
    found = outcome(mixings(session, TEXT, methods=["value-zeroing", "alti", "attention"]))
    reference = value_zeroing_by_hooks(session, family, TEXT)
    np.testing.assert_allclose(found["value-zeroing"].per_layer, normalise(reference), atol=2e-4)
    alti = found["alti"]
    assert (alti.per_layer >= 0).all() and np.allclose(alti.per_layer.sum(-1), 1.0)
    if family == "modernbert":  # pre-LN: said in a note
        assert any("pre-LN" in note for note in alti.notes)


def test_the_decomposition_rebuilds_every_layers_output(family_session):
    """The attention block's residual sum, run through the rest of the layer as the family says, is the layer's output:
    in a padded batch too, for every real token of each input."""
    from bertscope.analyses.mixing.run import _Pass

    _, session = family_session
    encodings = [session.encode(TEXT), session.encode(SHORT)]
    run = _Pass(session, encodings, session.mask(None), "zero", norms=False, values=True)
    length = len(encodings[0])
    for layer in range(session.num_layers):
        _, _, summed = run.decomposition(layer)
        with torch.inference_mode():
            rebuilt = session.family.after_attention(session.model, layer, summed).view(2, length, -1)
        for row, encoding in enumerate(encodings):
            real = len(encoding)
            np.testing.assert_allclose(rebuilt[row, :real].numpy(), run.hidden[layer + 1][row, :real].numpy(), atol=2e-4)


def test_a_padded_batch_gives_each_input_its_own_measures(family_session):
    """What the corpus form computes a batch at a time is what each sentence gives alone, on every family (padding
    moves nothing into a real token, and no padding row or column is kept)."""
    from bertscope.analyses.mixing.run import batch_mixings

    _, session = family_session
    encodings = [session.encode(text) for text in (SHORT, TEXT, "Dogs bark.")]
    methods = ["attention", "norms", "value-zeroing", "alti", "rollout"]
    together = outcome(batch_mixings(session, encodings, methods=methods))
    for encoding, found in zip(encodings, together, strict=True):
        alone = outcome(mixings(session, encoding, methods=methods))
        for method in methods:
            assert found[method].rolled.shape == (session.num_layers, len(encoding), len(encoding))
            np.testing.assert_allclose(found[method].rolled, alone[method].rolled, atol=2e-5, err_msg=method)


def spearman_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """scipy's Spearman correlation of each row of `a` with the same row of `b` (NaN where a row is constant)."""
    from scipy.stats import spearmanr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant row: scipy warns and gives NaN
        return np.array([spearmanr(x, y).statistic for x, y in zip(a, b, strict=True)])


def test_row_rank_correlations_equal_scipys_with_ties_and_padding():
    """The corpus form ranks a padded batch's rows on the device: each input's rows over its own columns, ties at their
    mean rank, constant rows and padding rows NaN, as scipy's spearmanr row by row."""
    from bertscope.analyses.mixing.run import _spearman_between

    rng = np.random.default_rng(0)
    lengths = [7, 5]
    maps = rng.integers(0, 4, size=(2, 2, 7, 7)).astype(np.float64)  # few values: many ties
    maps[0, 0, 1] = maps[1, 0, 1]  # the same row in both: 1
    maps[1, 1, 2, :5] = 3.0  # a constant row within its input's columns (its padding columns differ): NaN
    real = torch.arange(7) < torch.tensor(lengths)[:, None]
    found = _spearman_between(torch.as_tensor(maps), real).numpy()  # [M, M, B, T]
    for b, length in enumerate(lengths):
        for m in range(2):
            for n in range(2):
                rows = found[m, n, b]
                np.testing.assert_allclose(
                    rows[:length], spearman_rows(maps[m, b, :length, :length], maps[n, b, :length, :length]), atol=1e-12
                )
                assert np.isnan(rows[length:]).all()
    assert found[0, 1, 0, 1] == pytest.approx(1.0) and np.isnan(found[0, 1, 1, 2])


def test_the_corpus_form_agreement_and_shares(tiny_session):
    texts = [TEXT, SHORT, "Dogs bark at night, loudly."]
    result = bertscope.mixing_agreement(tiny_session, texts, method=["attention", "value-zeroing", "rollout"])
    assert result.methods == ("attention", "value-zeroing", "rollout") and result.sentences == 3
    np.testing.assert_allclose(np.diag(result.agreement), 1.0)
    np.testing.assert_allclose(result.agreement, result.agreement.T)
    singles = [bertscope.mixing(tiny_session, text, method="value-zeroing") for text in texts]
    expected = np.mean(
        [
            np.nanmean(spearman_rows(single.rolled[-1], bertscope.mixing(tiny_session, text, method="rollout").rolled[-1]))
            for single, text in zip(singles, texts)
        ]
    )
    assert result.agreement[1, 2] == pytest.approx(expected, abs=1e-9)
    # value zeroing's maps come from a float32 model run on a padded batch, alone: their rounding differs (about 1e-8)
    np.testing.assert_allclose(result.rolled_shares[1], np.mean([single.shares() for single in singles], axis=0), atol=1e-6)
    assert np.isnan(result.layer_shares[2]).all()  # rollout has no per-layer map
    payload = result.as_json()
    assert payload["shares"]["rollout"]["layer"] is None and len(payload["shares"]["attention"]["rolled"]) == 3
    figure = result.figure()
    np.testing.assert_allclose(figure.axes[0].images[0].get_array(), result.agreement)
    assert [label.get_text() for label in figure.axes[0].get_xticklabels()] == ["raw attention", "value zeroing", "attention rollout"]
    assert (
        repr(result).startswith("MixingAgreement(3 methods · 3 sentences") and '<img alt="MixingAgreement figure"' in result._repr_html_()
    )


def test_the_api_refuses_bad_input(tiny_session):
    with pytest.raises(bertscope.BertscopeError, match="unknown context-mixing method 'nope'"):
        bertscope.mixing(tiny_session, TEXT, method="nope")
    with pytest.raises(bertscope.BertscopeError, match="empty"):
        bertscope.mixing(tiny_session, "  ")
    with pytest.raises(bertscope.BertscopeError, match="out of range"):
        bertscope.mixing(tiny_session, TEXT, mask="7:0")


def test_the_cli_prints_the_issues_json(tiny_bert_dir):
    from click.testing import CliRunner

    from bertscope.cli import main

    done = CliRunner().invoke(main, ["mixing", SHORT, "--method", "alti", "--json", "-m", str(tiny_bert_dir)])
    assert done.exit_code == 0, done.output
    payload = json.loads(done.stdout)
    assert list(payload)[:6] == ["model", "method", "definition", "tokens", "per_layer", "rolled"]
    length = len(payload["tokens"])
    assert np.array(payload["per_layer"]).shape == (3, length, length)
    np.testing.assert_allclose(np.array(payload["rolled"]).sum(-1), 1.0, atol=1e-5)
    flow = json.loads(CliRunner().invoke(main, ["mixing", SHORT, "--method", "flow", "--json", "-m", str(tiny_bert_dir)]).stdout)
    assert "per_layer" not in flow and np.array(flow["rolled"]).shape == (3, length, length)
    shown = CliRunner().invoke(main, ["mixing", SHORT, "--method", "norms", "--layer", "2", "-m", str(tiny_bert_dir)])
    assert shown.exit_code == 0 and "layer 2" in shown.stdout and "rolled out" in shown.stdout


def test_a_result_shows_itself_in_a_notebook_and_draws_its_map(found, tiny_bert_dir, tmp_path):
    from click.testing import CliRunner

    from bertscope.cli import main

    mixing = found["value-zeroing"]
    assert repr(mixing).startswith("Mixing(value zeroing · 12 tokens · 3 layers · rolled to the last: cls ")
    assert "<img" in mixing._repr_html_() and len(mixing.to_pandas()) == 3
    figure = mixing.figure(1, rolled=False)
    assert figure.axes[0].get_title() == "value zeroing · layer 1" and "value zeroing" in figure.axes[1].get_ylabel()
    np.testing.assert_allclose(figure.axes[0].images[0].get_array(), mixing.per_layer[1])
    path = tmp_path / "map.svg"
    done = CliRunner().invoke(main, ["mixing", SHORT, "--method", "rollout", "--figure", str(path), "--json", "-m", str(tiny_bert_dir)])
    assert done.exit_code == 0 and path.read_text().startswith("<?xml")


def test_the_cli_compares_over_a_corpus(tiny_bert_dir, tmp_path):
    from click.testing import CliRunner

    from bertscope.cli import main

    data = tmp_path / "corpus.txt"
    data.write_text(f"{TEXT}\n{SHORT}\n", encoding="utf-8")
    done = CliRunner().invoke(
        main, ["mixing", "--data", str(data), "--method", "attention", "--method", "alti", "--json", "-m", str(tiny_bert_dir)]
    )
    assert done.exit_code == 0, done.output
    payload = json.loads(done.stdout)
    assert payload["methods"] == ["attention", "alti"] and payload["sentences"] == 2
    assert len(payload["agreement"]) == 2 and payload["agreement"][0][0] == 1.0


def test_a_corpus_run_by_default_leaves_out_the_costly_measures(tiny_session, monkeypatch):
    """Over a corpus, value zeroing (a feed-forward block on T² rows a layer) and flow (L·T² max-flow problems a
    sentence) run only when named: by default neither is computed at all, and no estimate is given."""
    from bertscope.analyses.mixing import run as mixing
    from bertscope.analyses.mixing.results import CORPUS_DEFAULT, CostEstimate

    def refused(*args, **kwargs):
        raise AssertionError("a costly measure ran by default")

    monkeypatch.setattr(mixing, "attention_flow", refused)
    monkeypatch.setattr(mixing, "_value_zeroing", refused)
    records = []
    result = bertscope.mixing_agreement(tiny_session, [TEXT, SHORT], progress=records.append)
    assert result.methods == CORPUS_DEFAULT == ("attention", "norms", "alti", "rollout") and result.sentences == 2
    assert not any(isinstance(record.partial, CostEstimate) for record in records)
    import inspect

    assert inspect.signature(bertscope.mixing_agreement).parameters["method"].default == CORPUS_DEFAULT


def test_a_costly_measure_named_is_timed_on_the_first_batch_and_changes_no_number(tiny_session):
    """Value zeroing and flow named: the record after the first batch carries how long each will take over the
    sentences read (the first batch's time scaled by each one's work in the sentences' lengths), before the rest runs;
    and the numbers are each costly measure's alone, and those of a run with the sentences one a batch."""
    from bertscope.analyses.mixing.results import CostEstimate

    texts = [TEXT, SHORT, "Dogs bark at night, loudly.", "A much longer sentence than the others, with many more tokens in it."]
    records = []
    methods = ["value-zeroing", "flow", "attention"]
    result = bertscope.mixing_agreement(tiny_session, texts, method=methods, progress=records.append)
    estimates = [index for index, record in enumerate(records) if isinstance(record.partial, CostEstimate)]
    assert len(estimates) == 1
    estimate = records[estimates[0]].partial
    assert list(estimate.seconds) == ["value-zeroing", "flow"] and all(seconds > 0 for seconds in estimate.seconds.values())
    assert estimate.covered == 4 and estimate.whole
    assert estimate.line().startswith("value zeroing about ") and ", attention flow about " in estimate.line()
    assert estimate.line().endswith(" for these 4 sentences (timed on the first batch)")
    first_batch_done = next(index for index, record in enumerate(records) if record.stage == "sentences" and record.partial is not estimate)
    assert estimates[0] < first_batch_done  # said before the first batch's sums, long before the last batch
    for method in ("value-zeroing", "flow"):  # each alone, timed alone: the same numbers
        alone = bertscope.mixing_agreement(tiny_session, texts, method=[method])
        np.testing.assert_array_equal(result.rolled_shares[result.methods.index(method)], alone.rolled_shares[0])
    one_by_one = bertscope.mixing_agreement(tiny_session, texts, method=methods, batch_size=1)  # every batch but the first untimed
    np.testing.assert_allclose(result.agreement, one_by_one.agreement, atol=1e-6)  # (a padded batch's float32 rounding)


def test_the_estimate_scales_by_each_measures_work_in_the_lengths():
    """Flow's work counts the max-flow calls `attention_flow` makes (each call's own cost added to its edges'), so that a
    first batch of short sentences, where the calls dominate, is not scaled as if it were all edges; value zeroing's
    counts the rows of each padded batch, as planned."""
    from bertscope.analyses.mixing.run import FLOW_CALL_EDGES, _copy_edges, attention_flow, cost_estimate, costly_work

    rng = np.random.default_rng(0)
    for length in (3, 9, 40):
        residual = rng.random((4, length, length))
        residual /= residual.sum(-1, keepdims=True)
        calls = [record.total for record in attention_flow(residual) if record.result is None][0]
        edges = sum(length * length * _copy_edges(layer, length) for layer in range(1, 4))
        assert costly_work("flow", [length], 4) == edges + FLOW_CALL_EDGES * (1 + calls)
    assert costly_work("flow", [3, 9], 4) == costly_work("flow", [3], 4) + costly_work("flow", [9], 4)  # each input alone
    assert costly_work("value-zeroing", [5, 7], 4) == 2 * 7 * 8  # a padded batch: T + 1 variants of T rows, at the longest
    found = cost_estimate({"value-zeroing": (2.0, [4, 4])}, [[4, 4], [6, 8]], layers=4, whole=False)
    assert found.seconds == {"value-zeroing": pytest.approx(2.0 * (40 + 144) / 40)} and found.covered == 4
    assert found.line() == (
        "value zeroing about 9.2 s for the first 4 sentences read, about as long again for every 4 more (timed on the first batch)"
    )


def test_the_cli_corpus_default_and_the_estimate_line(tiny_bert_dir, tmp_path, run):
    data = tmp_path / "corpus.txt"
    data.write_text(f"{TEXT}\n{SHORT}\n", encoding="utf-8")
    done = run("mixing", "--data", str(data), "--json", "-m", str(tiny_bert_dir))
    assert done.exit_code == 0 and json.loads(done.stdout)["methods"] == ["attention", "norms", "alti", "rollout"]
    assert "timed on the first batch" not in done.stderr
    done = run("mixing", "--data", str(data), "--method", "flow", "--method", "rollout", "--json", "-m", str(tiny_bert_dir))
    assert done.exit_code == 0 and json.loads(done.stdout)["methods"] == ["flow", "rollout"]
    lines = [line for line in done.stderr.splitlines() if "timed on the first batch" in line]
    assert len(lines) == 1 and lines[0].startswith("bertscope: warning: attention flow about "), done.stderr
    assert lines[0].endswith(" for these 2 sentences (timed on the first batch); Ctrl-C stops it")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("mixing", TEXT, "--method", "saliency"), "unknown context-mixing method 'saliency'; use one of: attention, norms"),
        (("mixing", TEXT, "--mask", "0-3"), "mask item '0-3' is not LAYER:HEAD"),
        (("mixing", "--data", "MISSING"), "MISSING: no such file; check the path"),
        (("mixing", " "), "the text is empty; give a sentence to analyse"),
        (("mixing", TEXT, "--method", "alti", "--method", "flow"), "one --method for TEXT"),
        (("mixing", TEXT, "--layer", "6"), "--layer 6 is out of range: this model has 6 layers (0-5)"),
    ],
)
def test_bad_input_is_refused_before_torch(args, message, tmp_path):
    from tests.helpers.cli import assert_refused_before_torch

    missing = str(tmp_path / "missing.txt")
    assert_refused_before_torch(tuple(arg.replace("MISSING", missing) for arg in args), message.replace("MISSING", missing))
