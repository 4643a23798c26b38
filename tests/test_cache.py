"""The cache directory: what it holds, and clearing it without touching anything else."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertscope.analyses.probing.features import FeatureOptions, extract_features, finish_writes
from bertscope.base.errors import InputError
from bertscope.cli import main
from bertscope.data.cache import cache_usage, clear_cache
from bertscope.data.corpus import Sentence
from tests.helpers.cli import assert_one_line_error

SENTENCES = [Sentence(text="A dog barked .", words=("A", "dog", "barked", "."))]


def features(session, cache_dir):
    return list(extract_features(session, SENTENCES, FeatureOptions(level="word"), cache_dir=cache_dir))[-1].result


@pytest.fixture
def filled(tiny_session, tmp_path):
    """A cache with one real feature set, a probe, a temporary left by a crash, and a file of the user's."""
    features(tiny_session, tmp_path)
    finish_writes()
    (tmp_path / "probe-0123abcd.npz").write_bytes(b"x" * 100)
    (tmp_path / ".features-0123.npy.k2j3.tmp").write_bytes(b"x" * 10)
    (tmp_path / "notes.txt").write_text("mine")
    return tmp_path


def test_usage_counts_only_bertscope_files(filled):
    usage = cache_usage(filled)
    ours = [p for p in filled.iterdir() if p.name != "notes.txt"]
    assert (usage.feature_entries, usage.probes, usage.files) == (1, 1, 4)
    assert usage.bytes == sum(p.stat().st_size for p in ours)


def test_clear_removes_entries_and_the_next_run_computes_afresh(tiny_session, filled):
    before = clear_cache(filled)
    assert before.files == 4
    assert [p.name for p in filled.iterdir()] == ["notes.txt"]
    assert cache_usage(filled).files == 0
    assert not features(tiny_session, filled).from_cache


def test_a_missing_directory_is_empty_and_a_file_is_refused(tmp_path):
    assert cache_usage(tmp_path / "none").files == 0
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="is a file"):
        cache_usage(tmp_path / "file")


def test_cli_reports_and_clears(filled):
    runner = CliRunner()
    shown = runner.invoke(main, ["cache", "--cache-dir", str(filled), "--json"], catch_exceptions=False)
    assert shown.exit_code == 0
    payload = json.loads(shown.stdout)
    assert payload["feature_entries"] == 1 and payload["probes"] == 1 and payload["files"] == 4 and not payload["cleared"]
    cleared = runner.invoke(main, ["cache", "--cache-dir", str(filled), "--clear"], catch_exceptions=False)
    assert cleared.exit_code == 0 and "removed" in cleared.stdout and "1 feature set, 1 probe" in cleared.stdout
    assert "nothing to remove" in runner.invoke(main, ["cache", "--cache-dir", str(filled), "--clear"]).stdout
    assert (filled / "notes.txt").exists()


def test_cli_default_directory_from_the_environment(filled, monkeypatch):
    monkeypatch.setenv("BERTSCOPE_CACHE_DIR", str(filled))
    result = CliRunner().invoke(main, ["cache"], catch_exceptions=False)
    assert result.stdout.startswith(f"{filled}: ") and "(1 feature set, 1 probe)" in result.stdout


def test_cli_refuses_a_file_as_the_cache(tmp_path):
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(main, ["cache", "--cache-dir", str(tmp_path / "file")], catch_exceptions=False)
    assert_one_line_error(result, "is a file")
