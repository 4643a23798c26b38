"""Tiny seeded random encoders saved with the bundled model's real tokenizer, config-only folders, a command in a new interpreter."""

from __future__ import annotations

import json
from pathlib import Path

TINY = dict(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    type_vocab_size=2,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)

# Universal Dependencies' 17 part-of-speech tags: the labels of a tiny POS tagger (`save_tiny(..., id2label=...)`).
UPOS_TAGS = [
    "ADJ",
    "ADP",
    "ADV",
    "AUX",
    "CCONJ",
    "DET",
    "INTJ",
    "NOUN",
    "NUM",
    "PART",
    "PRON",
    "PROPN",
    "PUNCT",
    "SCONJ",
    "SYM",
    "VERB",
    "X",
]


def save_tiny(directory: Path, model_class_name: str, seed: int = 0, config_class_name: str = "BertConfig", **overrides):
    """Save a seeded random model of `model_class_name` with the bundled tokenizer."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    from bertscope.model.model_files import bundled_model_dir

    torch.manual_seed(seed)
    config = getattr(transformers, config_class_name)(**{**TINY, **overrides})
    model = getattr(transformers, model_class_name)(config)
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(directory)
    return directory


def command_in_a_new_process(arguments: list[str], module: str = "transformers") -> tuple[list[str], str]:
    """`bertscope ARGUMENTS` in a fresh interpreter: ([its exit status, whether it imported `module`], its stderr)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from bertscope.cli import main\n"
        "try:\n"
        f"    main({arguments!r})\n"
        "except SystemExit as stop:\n"
        f"    print(stop.code, {module!r} in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    return done.stdout.split(), done.stderr


def write_config(directory: Path, **config) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def save_tiny_ner(directory: Path, seed: int = 3):
    """A seeded random `BertForTokenClassification` with IOB2 person and location labels, saved with its tokenizer."""
    labels = dict(enumerate(NER_LABELS))
    return save_tiny(
        directory,
        "BertForTokenClassification",
        seed=seed,
        num_labels=len(labels),
        id2label=labels,
        label2id={name: index for index, name in labels.items()},
    )
