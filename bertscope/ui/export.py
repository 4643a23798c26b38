"""Saving what the explorer shows: the view as a figure (SVG, PDF or PNG, text kept as text) and its numbers as CSV or JSON.

The figure is drawn from the view's own arrays (bertscope.figures), not a picture of the
terminal: the whole matrix with its labels, a colour bar naming its scale. Exports never
overwrite an earlier file and are written atomically, so a full disk leaves either a whole
file or none; the drawing runs in a worker thread, so the explorer keeps answering.
"""

from __future__ import annotations

import csv
import io
import json
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from bertscope.base.errors import BertscopeError, InputError
from bertscope.data.files import atomic_write
from bertscope.figures.save import save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from textual.app import App

_WRITING = threading.Lock()  # two exports at once (`e` twice in a second) must not both take the same free stem
FIGURE_FORMATS = ("svg", "pdf", "png")
"""What `e` writes the figure as (`bertscope explore --figure-format`): vectors with text kept as text, or an image."""


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
    figure: Figure,
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    layer: int,
    head: int | None,
    view: str,
    when: datetime | None = None,
    cells: str = "weights",
    figure_format: str = "svg",
) -> tuple[Path, Path]:
    """Write the view's figure as `<stem>.svg` (or .pdf, .png) and its matrix as `<stem>.csv` under one free stem;
    both or neither are kept.

    `cells`: what the matrix holds (the explorer's `n`); other than weights, the stem ends in it (`-norms`, `-alti`)."""
    directory = Path(directory).expanduser()
    stem = export_stem(layer, head, view, when) + ("" if cells == "weights" else f"-{cells}")
    return _export_pair(directory, stem, figure, figure_format, ".csv", lambda path: write_matrix_csv(path, matrix, row_labels, col_labels))


def export_screen(
    directory: str | Path, name: str, *, figure: Figure, data: str, suffix: str, when: datetime | None = None, figure_format: str = "svg"
) -> tuple[Path, Path]:
    """Write a screen's figure as `bertscope-<name>-<time>.svg` (or .pdf, .png) and its data beside it (`suffix` .csv
    or .json).

    Both share one free stem, so an earlier export is never overwritten; both or neither are kept.
    """
    directory = Path(directory).expanduser()
    stamp = (when or datetime.now()).strftime("%Y%m%d-%H%M%S")
    suffix = _dotted(suffix)
    return _export_pair(
        directory, f"bertscope-{name}-{stamp}", figure, figure_format, suffix, lambda path: _write_bytes(path, data.encode("utf-8"))
    )


def _export_pair(
    directory: Path, stem: str, figure: Figure, figure_format: str, suffix: str, write_data: Callable[[Path], Path]
) -> tuple[Path, Path]:
    """The figure and the data under the first free one of `stem`, `stem-2`, ...; both or neither are kept."""
    if figure_format not in FIGURE_FORMATS:
        raise InputError(f"cannot write a figure as {figure_format!r}; choose one of {', '.join(FIGURE_FORMATS)}", setting="figure_format")
    with _WRITING:
        stem = _free_stem(directory, stem, (f".{figure_format}", suffix))
        figure_path = save_figure(figure, directory / f"{stem}.{figure_format}")
        try:
            data_path = write_data(directory / f"{stem}{suffix}")
        except BaseException:
            figure_path.unlink(missing_ok=True)
            raise
    return figure_path, data_path


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
    figure_format: str  # what `e` writes the figure as: svg, pdf or png (ui.app)


def save_screen(app: App[object], name: str, data: str | None, suffix: str, draw: Callable[[], Figure]) -> None:
    """`e` on a screen: draw its figure and write it with its data into the app's export dir, in a worker thread,
    and say where (or why not)."""
    if data is None:
        app.notify("nothing to export yet: wait for the result", severity="warning")
        return
    exporting = cast(_Exporting, app)
    directory, figure_format = exporting.export_dir, exporting.figure_format
    save_in_worker(app, lambda: export_screen(directory, name, figure=draw(), data=data, suffix=suffix, figure_format=figure_format))


def save_in_worker(app: App[object], save: Callable[[], tuple[Path, Path]]) -> None:
    """Run `save` (draw a figure, write it and its data) off the UI thread; say where it wrote, or in one line why not."""

    def work() -> None:
        try:
            paths = save()
        except BertscopeError as error:
            app.call_from_thread(app.notify, str(error), severity="error", timeout=10)
        except Exception as error:  # a figure that cannot be drawn must not end the explorer
            app.call_from_thread(
                app.notify, f"the figure could not be drawn: {type(error).__name__}: {error}", severity="error", timeout=10
            )
        else:
            app.call_from_thread(app.notify, f"saved {paths[0]}\nand {paths[1]}", title="exported", timeout=8)

    app.run_worker(work, name="export", thread=True, group="export", exit_on_error=False)
