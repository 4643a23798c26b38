"""Tiny seeded random encoders of five families beyond BERT, each saved with a real tokenizer of its kind.

Tests of family-specific behaviour (DistilBERT's own module names, ALBERT's shared layer,
DeBERTa's relative attention, ModernBERT's local and global layers, MPNet's relative buckets
and <s>/</s> specials) need models of those families; these build offline in a fraction of a
second and load back through `AutoTokenizer` / `AutoConfig` / `AutoModel*`.

Tokenizers: DistilBERT and MPNet reuse the bundled model's uncased WordPiece vocabulary;
ALBERT and DeBERTa-v2 get a small Unigram (SentencePiece-style) vocabulary and ModernBERT a
small byte-level BPE, both trained with `tokenizers` on SENTENCES. Only tokenizer.json is
written for them: there is no sentencepiece .model file to save.
"""

from __future__ import annotations

import string
from pathlib import Path

FAMILIES = ("distilbert", "albert", "deberta-v2", "modernbert", "mpnet")
HEADS = ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")

# Class-name prefix of each family in transformers: f"{prefix}Config", f"{prefix}{head}".
_PREFIX = {
    "distilbert": "DistilBert",
    "albert": "Albert",
    "deberta-v2": "DebertaV2",
    "modernbert": "ModernBert",
    "mpnet": "MPNet",
}

# The training text of the Unigram and BPE tokenizers: everyday English, including the sentences
# the tests and README use most, so those split into sensible pieces.
SENTENCES = (
    "The keys to the cabinet are on the table.",
    "The key to the cabinet is on the table.",
    "The keys are here.",
    "Where are the keys?",
    "The cat sat on the mat.",
    "The cat slept on the mat near the window.",
    "A dog barked loudly.",
    "Dogs bark at night, loudly.",
    "Dante was born in Florence.",
    "Dante was born in Florence and died in Ravenna.",
    "They will visit their grandparents next week.",
    "She said that the report was finished.",
    "Rain fell all night over the quiet town.",
    "The committee approved it.",
    "Those artists that we liked were bakers.",
    "They like to clean her cans.",
    "The quick brown fox jumps over the lazy dog.",
    "Children were playing in the park after school.",
    "He opened the door and walked into the kitchen.",
    "My sister bought a new bicycle last summer.",
    "The teacher explained the lesson again.",
    "We watched the birds flying south for the winter.",
    "The old bridge was closed because of the storm.",
    "Scientists discovered a new species of frog.",
    "The train arrived at the station ten minutes late.",
    "Please put the books back on the shelf.",
    "The river flows slowly through the green valley.",
    "Her brother is writing a long letter to his friend.",
    "The students who passed the exam were happy.",
    "It was raining when we left the house.",
    "The company announced its profits on Monday.",
    "A small boat sailed across the lake at dawn.",
    "The doctor told him to rest for three days.",
    "Nobody knew where the missing painting had gone.",
    "The music was so loud that we could not hear each other.",
    "Our neighbours planted apple trees in their garden.",
    "The city council will meet again in June.",
    "Reading before bed helps many people sleep.",
    "The museum opens at nine and closes at five.",
    "Every morning the baker makes fresh bread.",
    "The players celebrated after winning the final match.",
    "I think the answer is probably somewhere in this book.",
    "The mountains were covered with snow in January.",
    "Two of the windows in the old school were broken.",
)

# Specials of the trained tokenizers, in id order 0-4 (ALBERT's tokenizer takes id 1 as unknown).
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_SPECIAL_NAMES = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")

# Every printable ASCII character is in every trained vocabulary, so no ASCII text maps to [UNK].
_ALPHABET = list(string.ascii_letters + string.digits + string.punctuation)

_TOKENIZERS: dict[str, object] = {}  # family -> tokenizer; training once per process keeps saving fast


def _bundled_wordpiece(front=(), back=()) -> dict[str, int]:
    """The bundled uncased WordPiece vocabulary, with tokens put before and after it (MPNet's specials)."""
    from bertscope.model.model_files import bundled_model_dir

    words = (bundled_model_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return {word: index for index, word in enumerate([*front, *words, *back])}


def _unigram(tokenizer_class):
    """A Unigram vocabulary trained through the class's own normalizer and pre-tokenizer.

    The transformers 5 classes rebuild their pipeline from their arguments when they load
    tokenizer.json, keeping only its vocabulary, so the vocabulary must be trained through that
    same pipeline (lowercased for ALBERT, cased for DeBERTa) for saving and loading to agree.
    """
    import json

    from tokenizers import Tokenizer, trainers

    pipeline = Tokenizer.from_str(tokenizer_class(**_SPECIAL_NAMES).backend_tokenizer.to_str())
    trainer = trainers.UnigramTrainer(
        vocab_size=600,
        special_tokens=list(SPECIALS),
        unk_token="[UNK]",
        initial_alphabet=_ALPHABET,
        show_progress=False,
    )
    pipeline.train_from_iterator(SENTENCES, trainer)
    trained = json.loads(pipeline.to_str())["model"]["vocab"][len(SPECIALS) :]
    # The trainer ends its list with the characters it keeps only as a fallback, each 1e-4 below the
    # one before, in an order (like the last bits of all scores) that varies between processes with
    # its hash maps. One score for that tail, rounding and sorting give the same ids in every process.
    scores = [score for _, score in trained]
    tail = len(scores) - 1
    while tail > 0 and scores[tail - 1] - scores[tail] < 2e-4:
        tail -= 1
    pieces = sorted(
        ((piece, round(scores[-1] if index >= tail else score, 6)) for index, (piece, score) in enumerate(trained)),
        key=lambda item: (-item[1], item[0]),
    )
    return tokenizer_class(vocab=[(special, 0.0) for special in SPECIALS] + pieces, **_SPECIAL_NAMES)


def _byte_level_bpe():
    """A byte-level BPE shaped like answerdotai/ModernBERT-base's: no prefix space, [CLS] ... [SEP], a [MASK]
    that takes the space before it, no token type ids.

    Words split beforehand reach it without a leading space, so it also learns from each word alone,
    as a large vocabulary has both "keys" and "Ġkeys".
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    mask = AddedToken("[MASK]", lstrip=True, special=True)
    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=[*SPECIALS[:-1], mask],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([*SENTENCES, *(word for sentence in SENTENCES for word in sentence.split())], trainer)
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_input_names=["input_ids", "attention_mask"],
        **{**_SPECIAL_NAMES, "mask_token": mask},
    )


def family_tokenizer(family: str):
    """The (cached) tokenizer of `family`; callers must not change it."""
    if family not in _TOKENIZERS:
        import transformers

        if family == "distilbert":
            tokenizer = transformers.DistilBertTokenizerFast(vocab=_bundled_wordpiece())
        elif family == "mpnet":
            # microsoft/mpnet-base's layout: <s> <pad> </s> <unk>, the BERT vocabulary, then <mask>.
            tokenizer = transformers.MPNetTokenizerFast(
                vocab=_bundled_wordpiece(front=("<s>", "<pad>", "</s>", "<unk>"), back=("<mask>",)),
                unk_token="<unk>",
            )
        elif family == "albert":
            tokenizer = _unigram(transformers.AlbertTokenizerFast)
        elif family == "deberta-v2":
            tokenizer = _unigram(transformers.DebertaV2TokenizerFast)
        elif family == "modernbert":
            tokenizer = _byte_level_bpe()
        else:
            raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
        _TOKENIZERS[family] = tokenizer
    return _TOKENIZERS[family]


def _config(family: str, tokenizer, head: str, **overrides):
    """A tiny config of `family` whose vocabulary and special-token ids are the tokenizer's."""
    import transformers

    ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    bos_eos = dict(bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    bert_like = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    settings = {
        "distilbert": dict(dim=32, n_layers=3, n_heads=4, hidden_dim=64, max_position_embeddings=128),
        # One layer group run three times: ALBERT's weight sharing.
        "albert": dict(bert_like, embedding_size=16, num_hidden_groups=1, inner_group_num=1, **bos_eos),
        # DeBERTa-v3's attention: disentangled c2p/p2c with log-bucketed relative positions, no absolute ones.
        "deberta-v2": dict(
            bert_like,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_buckets=8,
            max_relative_positions=32,
            share_att_key=True,
            norm_rel_ebd="layer_norm",
            position_biased_input=False,
            type_vocab_size=0,
        ),
        # Layers 0 and 3 attend globally, 1 and 2 within a window of 8 (4 tokens either side).
        "modernbert": dict(
            bert_like,
            num_hidden_layers=4,
            local_attention=8,
            global_attn_every_n_layers=3,
            cls_token_id=tokenizer.cls_token_id,
            sep_token_id=tokenizer.sep_token_id,
            **bos_eos,
        ),
        # MPNet numbers positions from pad_token_id + 1, so 130 positions hold 128 tokens. Its relative
        # buckets stay at 32: MPNetEncoder.compute_position_bias ignores the config and always asks for 32.
        "mpnet": dict(bert_like, max_position_embeddings=130, **bos_eos),
    }[family]
    if head in ("ForSequenceClassification", "ForTokenClassification"):
        settings["num_labels"] = 3
    config_class = getattr(transformers, f"{_PREFIX[family]}Config")
    return config_class(**{**ids, **settings, **overrides})


def save_tiny_family(directory: Path, family: str, head: str = "Model", seed: int = 0, **config_overrides) -> Path:
    """Save a seeded random `family` model with `head` ("Model", "ForMaskedLM", "ForSequenceClassification",
    "ForTokenClassification", "ForQuestionAnswering")
    and its tokenizer into `directory`; config_overrides go to the family's config class."""
    import torch
    import transformers

    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; expected one of {HEADS}")
    tokenizer = family_tokenizer(family)
    config = _config(family, tokenizer, head, **config_overrides)
    torch.manual_seed(seed)
    model = getattr(transformers, f"{_PREFIX[family]}{head}")(config)
    model.save_pretrained(directory)
    offset = config.pad_token_id + 1 if family == "mpnet" else 0
    tokenizer.model_max_length = config.max_position_embeddings - offset
    tokenizer.save_pretrained(directory)
    return Path(directory)
