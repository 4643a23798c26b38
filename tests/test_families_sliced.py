"""A sliced copy computes what the masked original computes, on every config switch a family's attention has (issue 54).

One config per family is not enough: DeBERTa-v2's default (`share_att_key` false) gives relative positions their own
per-head projections, which slicing the query, key and value alone left whole, and the copy failed in its own check.
Each case writes the copy, loads it back as a user would, and compares it with the original under the same head mask.
"""

from __future__ import annotations

import numpy as np
import pytest

import bertscope
from tests.family_models import save_tiny_family
from tests.helpers.models import save_tiny

TEXT = "The keys to the cabinet are on the table."

# (family, config switches): every combination of DeBERTa-v2's attention switches that changes which projections a
# head has, and the switches of the other families that slice (BERT and RoBERTa have none left in transformers 5).
CASES = [
    ("deberta-v2", dict(share_att_key=True)),  # DeBERTa-v3's layout, the tiny model's default
    ("deberta-v2", dict(share_att_key=False)),  # transformers' default: pos_key_proj and pos_query_proj
    ("deberta-v2", dict(share_att_key=False, pos_att_type=["c2p"], position_buckets=-1)),
    ("deberta-v2", dict(share_att_key=False, pos_att_type=["p2c"])),
    ("deberta-v2", dict(share_att_key=True, pos_att_type=["p2c"], position_buckets=-1)),
    ("deberta-v2", dict(share_att_key=False, pos_att_type="c2p|p2c", max_relative_positions=-1, position_buckets=-1)),
    ("deberta-v2", dict(share_att_key=False, pos_att_type=[])),  # relative attention with no relative terms
    ("deberta-v2", dict(relative_attention=False, position_biased_input=True, pos_att_type=None)),
    ("deberta-v2", dict(share_att_key=False, conv_kernel_size=3)),  # DeBERTa-v2's convolution beside layer 0
    ("distilbert", dict()),
    ("distilbert", dict(sinusoidal_pos_embds=True)),
    ("bert", dict()),
    ("roberta", dict()),
    ("electra", dict()),
    ("electra", dict(embedding_size=16)),  # embeddings projected up to the layers' width
]


def _save(directory, family: str, switches: dict):
    if family in ("bert", "roberta", "electra"):
        prefix = {"bert": "Bert", "roberta": "Roberta", "electra": "Electra"}[family]
        # RoBERTa numbers positions from pad_token_id + 1: two more positions hold conftest's 64 tokens
        extra = dict(pad_token_id=1, max_position_embeddings=66) if family == "roberta" else {}
        return save_tiny(directory, f"{prefix}ForMaskedLM", config_class_name=f"{prefix}Config", **extra, **switches)
    return save_tiny_family(directory, family, "ForMaskedLM", **switches)


@pytest.mark.parametrize(
    "family, switches", CASES, ids=[f"{f}-{'-'.join(f'{k}={v}' for k, v in s.items()) or 'default'}" for f, s in CASES]
)
def test_a_sliced_copy_computes_the_masked_original(family, switches, tmp_path, monkeypatch):
    from bertscope.analyses.importance import pruned_export

    timing = pruned_export.PairedTiming((1.0,), (1.0,), sentences=1)
    monkeypatch.setattr(pruned_export, "time_paired", lambda original, pruned_copy, texts: timing)  # the speed-up is not the point here

    session = bertscope.load(str(_save(tmp_path / "model", family, switches)), device="cpu")
    remove = [(0, 1), (0, 2), *((1, head) for head in range(session.num_heads))]  # layer 1 loses every head
    written = pruned_export.write_pruned_model(session, remove, tmp_path / "sliced", timing_texts=[TEXT], extra={})
    assert written.parameters_after < written.parameters_before
    assert written.max_abs_difference < 1e-5
    pruned = bertscope.load(str(tmp_path / "sliced"), device="cpu").forward(TEXT)
    masked = session.forward(TEXT, mask=",".join(f"{layer}:{head}" for layer, head in remove))
    for name in ("hidden_states", "attentions", "mlm_logits"):
        np.testing.assert_allclose(getattr(pruned, name), getattr(masked, name), atol=1e-5)


@pytest.mark.parametrize("family", ["albert", "modernbert", "mpnet"])
def test_the_api_refuses_a_sliced_copy_it_cannot_write_before_scoring_a_head(family, tmp_path, monkeypatch):
    """Issue 54: the refusal came after 14-18 s of importance scoring; the family says it before any."""
    from bertscope import api
    from bertscope.base.errors import InputError

    def scored(*args, **kwargs):
        raise AssertionError("heads were scored before the copy was judged")

    monkeypatch.setattr(api, "_ranking", scored)
    session = bertscope.load(str(save_tiny_family(tmp_path / "model", family)), device="cpu")
    with pytest.raises(InputError, match="cannot be sliced out of its weights; write a copy with the heads' weights zeroed"):
        bertscope.prune(session, "preserve", [TEXT], fraction=0.5, output=tmp_path / "sliced")
    assert not (tmp_path / "sliced").exists()
