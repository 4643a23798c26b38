"""Shared fixtures: tiny seeded random encoders saved to disk and loaded through the real loader.

The tokenizer is the bundled model's real uncased WordPiece vocabulary, so tokenisation
and word alignment are the real thing while the networks stay small and fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--doc-examples",
        action="store_true",
        default=False,
        help="also run every example of the documentation and the README (minutes, on the bundled model)",
    )


@pytest.fixture(autouse=True)
def auto_is_the_cpu(request, monkeypatch):
    """`--device auto` takes the CPU in every test but tests/test_cuda.py, on a machine with a GPU too.

    These tests hold the command line's and the explorer's numbers to results computed on the CPU,
    with tolerances of float32 arithmetic on the CPU; tests/test_cuda.py holds the GPU to the CPU
    with its own. Subprocesses (torchrun, a fresh interpreter) see no GPU either.
    """
    if request.node.path.name == "test_cuda.py":
        return
    import torch

    if torch.cuda.is_available():
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(autouse=True)
def cache_of_the_run(tmp_path_factory, monkeypatch):
    """bertscope's cache directory is the test run's own (never the user's ~/.cache/bertscope): features and probes
    cached by one test are found by the next, and the CPU kernels are measured once a run."""
    if "BERTSCOPE_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("BERTSCOPE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "bertscope-cache"))


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


def save_tiny(directory: Path, model_class_name: str, seed: int = 0, config_class_name: str = "BertConfig", **overrides):
    """Save a seeded random model of `model_class_name` with the bundled tokenizer."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    from bertscope.core.model.model_files import bundled_model_dir

    torch.manual_seed(seed)
    config = getattr(transformers, config_class_name)(**{**TINY, **overrides})
    model = getattr(transformers, model_class_name)(config)
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny-bert"), "BertModel")


@pytest.fixture(scope="session")
def tiny_mlm_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny-bert-mlm"), "BertForMaskedLM", seed=1)


@pytest.fixture(scope="session")
def tiny_session(tiny_bert_dir):
    from bertscope.core.model.session import Session

    return Session.open(str(tiny_bert_dir), device="cpu")


@pytest.fixture(scope="session")
def tiny_mlm_session(tiny_mlm_dir):
    from bertscope.core.model.session import Session

    return Session.open(str(tiny_mlm_dir), device="cpu")


@pytest.fixture(scope="session")
def bundled_session():
    from bertscope.core.model.session import Session

    return Session.open(device="cpu")


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
