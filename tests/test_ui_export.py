"""Exporting the view: never overwriting an earlier export, and CSV that reads back exactly."""

import csv
import os
from datetime import datetime

import numpy as np
import pytest

from bertscope.base.errors import InputError
from bertscope.figures.heatmaps import attention_heatmap
from bertscope.ui import export
from bertscope.ui.export import export_stem, export_view, unique_path, write_matrix_csv

WHEN = datetime(2026, 11, 21, 11, 30, 5)
TOKENS = ["[CLS]", "the", "café", '"quoted", comma', "[SEP]"]
SVG = '<svg xmlns="http://www.w3.org/2000/svg"><text>café</text></svg>'


def attention(size=None, seed=0):
    size = len(TOKENS) if size is None else size
    weights = np.random.default_rng(seed).random((size, size))
    return weights / weights.sum(axis=1, keepdims=True)


def figure(size=None):
    size = len(TOKENS) if size is None else size
    return attention_heatmap(attention(size), TOKENS[:size], layer=0, head=0)


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def test_export_stems_name_the_view_and_time():
    assert export_stem(2, 3, "head", WHEN) == "bertscope-L2H3-20261121-113005"
    assert export_stem(2, None, "average", WHEN) == "bertscope-L2-avg-20261121-113005"
    assert export_stem(2, 3, "average", WHEN) == "bertscope-L2-avg-20261121-113005"
    assert export_stem(0, 0, "head").startswith("bertscope-L0H0-")


def test_unique_path_never_overwrites(tmp_path):
    first = unique_path(tmp_path, "view", ".svg")
    assert first == tmp_path / "view.svg"
    first.write_text("one")
    second = unique_path(tmp_path, "view", "svg")
    assert second == tmp_path / "view-2.svg"
    second.write_text("two")
    assert unique_path(tmp_path, "view", ".svg") == tmp_path / "view-3.svg"
    assert unique_path(tmp_path, "view", ".csv") == tmp_path / "view.csv"
    assert first.read_text() == "one" and second.read_text() == "two"


def test_the_csv_reads_back_to_the_same_labels_and_numbers(tmp_path):
    matrix = attention()
    path = write_matrix_csv(tmp_path / "head.csv", matrix, TOKENS, TOKENS)
    rows = read_csv(path)
    assert rows[0] == ["from \\ to", *TOKENS]
    assert [row[0] for row in rows[1:]] == TOKENS
    values = np.array([[float(value) for value in row[1:]] for row in rows[1:]])
    np.testing.assert_allclose(values, matrix, atol=5e-7)
    assert all(len(value.split(".")[1]) == 6 for value in rows[1][1:])


def test_the_csv_matches_the_attention_command_layout(tmp_path):
    path = write_matrix_csv(tmp_path / "m.csv", np.array([[1.0, 0.0], [0.25, 0.75]]), ["a", "b"], ["x", "y"])
    assert path.read_bytes() == b"from \\ to,x,y\na,1.000000,0.000000\nb,0.250000,0.750000\n"


def test_a_matrix_that_does_not_match_its_labels_is_refused(tmp_path):
    with pytest.raises(ValueError, match="does not match"):
        write_matrix_csv(tmp_path / "m.csv", np.zeros((2, 3)), ["a", "b"], ["x", "y"])
    assert list(tmp_path.iterdir()) == []


def test_data_is_written_as_utf8(tmp_path):
    path = export._write_bytes(tmp_path / "view.svg", SVG.encode("utf-8"))
    assert path.read_bytes().decode("utf-8") == SVG


def test_export_view_writes_both_files_under_one_fresh_stem(tmp_path):
    (tmp_path / "bertscope-L2H3-20261121-113005.csv").write_text("earlier export")
    kwargs = dict(figure=figure(), matrix=attention(), row_labels=TOKENS, col_labels=TOKENS, layer=2, head=3, view="head", when=WHEN)
    svg_path, csv_path = export_view(tmp_path, **kwargs)
    assert svg_path == tmp_path / "bertscope-L2H3-20261121-113005-2.svg"
    assert csv_path == tmp_path / "bertscope-L2H3-20261121-113005-2.csv"
    assert (tmp_path / "bertscope-L2H3-20261121-113005.csv").read_text() == "earlier export"
    assert "<text" in svg_path.read_text(encoding="utf-8") and "café" in svg_path.read_text(encoding="utf-8")  # the tokens as text
    assert read_csv(csv_path)[0] == ["from \\ to", *TOKENS]
    again = export_view(tmp_path, **kwargs)
    assert again == (tmp_path / "bertscope-L2H3-20261121-113005-3.svg", tmp_path / "bertscope-L2H3-20261121-113005-3.csv")


def test_average_view_export(tmp_path):
    matrix = attention(3)
    svg_path, csv_path = export_view(
        tmp_path,
        figure=figure(3),
        matrix=matrix,
        row_labels=TOKENS[:3],
        col_labels=TOKENS[:3],
        layer=1,
        head=None,
        view="average",
        when=WHEN,
    )
    assert svg_path.name == "bertscope-L1-avg-20261121-113005.svg"
    assert csv_path.name == "bertscope-L1-avg-20261121-113005.csv"


def test_a_failed_csv_leaves_no_half_export(tmp_path, monkeypatch):
    real_write = export._write_bytes

    def full_disk(path, data):
        if str(path).endswith(".csv"):
            raise InputError(f"cannot write {path}: No space left on device")
        return real_write(path, data)

    monkeypatch.setattr(export, "_write_bytes", full_disk)
    with pytest.raises(InputError, match="No space left"):
        export_view(
            tmp_path, figure=figure(), matrix=attention(), row_labels=TOKENS, col_labels=TOKENS, layer=0, head=0, view="head", when=WHEN
        )
    assert list(tmp_path.iterdir()) == []


def test_a_failure_midway_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "view.svg"
    path.write_text("old")

    class BrokenHandle:
        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(data[:10])
            raise OSError(28, "No space left on device")

    real_atomic_write = export.atomic_write

    def atomic_write(target, mode):
        context = real_atomic_write(target, mode)

        class Wrapped:
            def __enter__(self):
                return BrokenHandle(context.__enter__())

            def __exit__(self, *exc):
                return context.__exit__(*exc)

        return Wrapped()

    monkeypatch.setattr(export, "atomic_write", atomic_write)
    with pytest.raises(InputError, match=r"cannot write .*view.svg: No space left on device"):
        export._write_bytes(path, SVG.encode("utf-8"))
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["view.svg"]


def test_an_unwritable_directory_is_one_clear_line(tmp_path):
    with pytest.raises(InputError, match="does not exist") as caught:
        export_view(
            tmp_path / "nowhere", figure=figure(), matrix=attention(), row_labels=TOKENS, col_labels=TOKENS, layer=0, head=0, view="head"
        )
    assert "\n" not in str(caught.value)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write"):
        export._write_bytes(blocker / "view.svg", SVG.encode("utf-8"))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions and a non-root user")
def test_a_read_only_directory_is_one_clear_line(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(InputError, match="permission"):
            export_view(tmp_path, figure=figure(), matrix=attention(), row_labels=TOKENS, col_labels=TOKENS, layer=0, head=0, view="head")
    finally:
        tmp_path.chmod(0o700)
