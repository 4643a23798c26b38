"""Saving what the explorer shows: the screen as SVG and its numbers as CSV or JSON.

Exports never overwrite an earlier file and are written atomically, so a full disk leaves
either a whole file or none.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from bertscope.core.data.files import atomic_write
from bertscope.core.errors import BertscopeError, InputError

if TYPE_CHECKING:
    from textual.app import App


def unique_path(directory: str | Path, stem: str, suffix: str) -> Path:
    """`directory/stem.suffix`, or `stem-2.suffix`, `stem-3.suffix`, ... whichever is free."""
    directory = Path(directory)
    return directory / f"{_free_stem(directory, stem, (_dotted(suffix),))}{_dotted(suffix)}"


def export_stem(layer: int, head: int | None, view: str, when: datetime | None = None) -> str:
    """A file name stem that says what was exported and when, e.g. `bertscope-L2H3-20261121-113005`."""
    stamp = (when or datetime.now()).strftime("%Y%m%d-%H%M%S")
    if view == "average":
        return f"bertscope-L{layer}-avg-{stamp}"
    if view != "head" or head is None:
        raise ValueError(f"cannot name an export of view {view!r} with head {head!r}")
    return f"bertscope-L{layer}H{head}-{stamp}"


def write_svg(path: str | Path, svg: str) -> Path:
    """Write an SVG document atomically as UTF-8."""
    return _write_bytes(path, svg.encode("utf-8"))


def write_matrix_csv(path: str | Path, matrix: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str]) -> Path:
    """Write an attention matrix atomically, laid out as `bertscope attention --csv` prints it.

    Header `from \\ to, *col_labels`, then one row per query token: its label and `%.6f` values.
    """
    matrix = np.asarray(matrix)
    if matrix.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"matrix of shape {matrix.shape} does not match {len(row_labels)} x {len(col_labels)} labels")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["from \\ to", *col_labels])
    for label, row in zip(row_labels, matrix):
        writer.writerow([label, *(f"{value:.6f}" for value in row)])
    return _write_bytes(path, buffer.getvalue().encode("utf-8"))


def export_view(
    directory: str | Path,
    *,
    svg: str,
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    layer: int,
    head: int | None,
    view: str,
    when: datetime | None = None,
    norms: bool = False,
) -> tuple[Path, Path]:
    """Write the view as `<stem>.svg` and `<stem>.csv` under one free stem; both or neither are kept.

    `norms`: the matrix holds value-weighted norms, and the stem ends in `-norms` to say so."""
    directory = Path(directory).expanduser()
    stem = export_stem(layer, head, view, when) + ("-norms" if norms else "")
    stem = _free_stem(directory, stem, (".svg", ".csv"))
    svg_path = write_svg(directory / f"{stem}.svg", svg)
    try:
        csv_path = write_matrix_csv(directory / f"{stem}.csv", matrix, row_labels, col_labels)
    except BaseException:
        svg_path.unlink(missing_ok=True)
        raise
    return svg_path, csv_path


def export_screen(directory: str | Path, name: str, *, svg: str, data: str, suffix: str, when: datetime | None = None) -> tuple[Path, Path]:
    """Write a screen as `bertscope-<name>-<time>.svg` and its data beside it (`suffix` .csv or .json).

    Both share one free stem, so an earlier export is never overwritten; both or neither are kept.
    """
    directory = Path(directory).expanduser()
    stamp = (when or datetime.now()).strftime("%Y%m%d-%H%M%S")
    suffix = _dotted(suffix)
    stem = _free_stem(directory, f"bertscope-{name}-{stamp}", (".svg", suffix))
    svg_path = write_svg(directory / f"{stem}.svg", svg)
    try:
        data_path = _write_bytes(directory / f"{stem}{suffix}", data.encode("utf-8"))
    except BaseException:
        svg_path.unlink(missing_ok=True)
        raise
    return svg_path, data_path


def csv_text(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A table as CSV text; floats with six decimals."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([f"{value:.6f}" if isinstance(value, float) else value for value in row])
    return buffer.getvalue()


def json_text(payload: object) -> str:
    """JSON text as the CLI's `--json` prints it (NaN becomes null)."""
    return json.dumps(_finite(payload), indent=2, ensure_ascii=False) + "\n"


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, np.generic):
        return _finite(value.item())
    if isinstance(value, np.ndarray):
        return _finite(value.tolist())
    if isinstance(value, dict):
        return {str(key): _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _free_stem(directory: Path, stem: str, suffixes: Sequence[str]) -> str:
    """The first of `stem`, `stem-2`, ... with no existing file for any of `suffixes`."""
    number = 1
    while True:
        candidate = stem if number == 1 else f"{stem}-{number}"
        if not any(_taken(directory / f"{candidate}{suffix}") for suffix in suffixes):
            return candidate
        number += 1


def _taken(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _dotted(suffix: str) -> str:
    return suffix if not suffix or suffix.startswith(".") else f".{suffix}"


def _write_bytes(path: str | Path, data: bytes) -> Path:
    target = Path(path).expanduser()
    try:
        with atomic_write(target, "wb") as handle:
            handle.write(data)
    except OSError as error:
        raise InputError(f"cannot write {target}: {error.strerror or error}") from None
    return target


class _Exporting(Protocol):
    export_dir: Path  # where `e` writes (ui.app)


def save_screen(app: App[object], name: str, data: str | None, suffix: str) -> tuple[Path, Path] | None:
    """`e` on a screen: write its SVG and data into the app's export dir and say where (or why not)."""
    if data is None:
        app.notify("nothing to export yet: wait for the result", severity="warning")
        return None
    try:
        paths = export_screen(cast(_Exporting, app).export_dir, name, svg=app.export_screenshot(), data=data, suffix=suffix)
    except BertscopeError as error:
        app.notify(str(error), severity="error", timeout=10)
        return None
    app.notify(f"saved {paths[0]}\nand {paths[1]}", title="exported", timeout=8)
    return paths
