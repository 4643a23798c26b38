"""Shared fixtures: tiny seeded random encoders saved to disk and loaded through the real loader.

The tokenizer is the bundled model's real uncased WordPiece vocabulary, so tokenisation
and word alignment are the real thing while the networks stay small and fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

if "PYTEST_XDIST_WORKER" in os.environ:  # one of several test processes (pyproject's `-n auto`): one thread each,
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # for torch and the commands they start, as cores are shared
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

from tests.helpers.models import save_tiny  # noqa: E402  (after the thread count, which torch reads on import)


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


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny-bert"), "BertModel")


@pytest.fixture(scope="session")
def tiny_mlm_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny-bert-mlm"), "BertForMaskedLM", seed=1)


@pytest.fixture(scope="session")
def tiny_session(tiny_bert_dir):
    from bertscope.model.session import Session

    return Session.open(str(tiny_bert_dir), device="cpu")


@pytest.fixture(scope="session")
def tiny_mlm_session(tiny_mlm_dir):
    from bertscope.model.session import Session

    return Session.open(str(tiny_mlm_dir), device="cpu")


@pytest.fixture(scope="session")
def bundled_session():
    from bertscope.model.session import Session

    return Session.open(device="cpu")


@pytest.fixture
def run():
    """`bertscope ARGS` through click's runner in this process: its result (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from bertscope.cli import main

    def invoke(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return invoke
