"""Writing a figure to a file: the format from its suffix, text kept as text, the file whole or not at all.

`check_figure_path` needs neither matplotlib nor the model, so a command refuses a path it
cannot write before anything slow starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bertscope.base.errors import InputError
from bertscope.data.files import atomic_write, check_writable

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = {".svg": "svg", ".pdf": "pdf", ".png": "png"}
"""The suffixes a figure can be written as, and matplotlib's name of each format."""
PNG_DPI = 200  # a PNG sharp enough for slides; SVG and PDF are vectors


def figure_format(path: str | Path) -> str:
    """The format `path` asks for by its suffix; any other suffix is refused, saying which work."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        given = f"suffix {suffix}" if suffix else "no suffix"
        raise InputError(f"cannot write a figure to {path}: {given}; give a file ending in .svg, .pdf or .png", setting="figure")
    return FORMATS[suffix]


def check_figure_path(path: str | Path) -> Path:
    """Fail early, before a model loads, if a figure cannot be written to `path` (its suffix, its directory, a file
    already there)."""
    figure_format(path)
    try:
        target = check_writable(path)
    except InputError as error:
        raise InputError(str(error), setting="figure") from None
    if target.exists() or target.is_symlink():
        raise _exists(target)
    return target


def save_figure(figure: Figure, path: str | Path) -> Path:
    """Write `figure` to `path` as SVG, PDF or PNG (by the suffix), text kept as text, atomically.

    A figure never replaces a file: the one rule of the command line's `--figure PATH`, refused where PATH exists,
    and the explorer's `e`, which picks a free name first. A failure while drawing or writing leaves no file behind.
    """
    from matplotlib import rc_context

    kind = figure_format(path)
    target = check_figure_path(path)
    # Text stays text: SVG <text> elements and PDF TrueType (Type 42) fonts, which editors, journals and search read.
    try:
        with rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}), atomic_write(target, "wb", replace=False) as handle:
            figure.savefig(handle, format=kind, dpi=PNG_DPI, bbox_inches="tight", pad_inches=0.05, metadata=_metadata(kind))
    except FileExistsError:  # made while the figure was drawn
        raise _exists(target) from None
    except OSError as error:  # a full disk, a directory removed meanwhile: said in one line, nothing left behind
        raise InputError(f"cannot write {target}: {error.strerror or error}", setting="figure") from None
    return target


def _exists(target: Path) -> InputError:
    return InputError(f"cannot write a figure to {target}: a file of that name exists; remove it or give another name", setting="figure")


def _metadata(kind: str) -> dict[str, str | None]:
    """Who made the file; SVG and PDF dates left out, so the same figure writes the same bytes."""
    creator = "bertscope (matplotlib)"
    if kind == "png":
        return {"Software": creator}
    return {"Creator": creator, "Date": None} if kind == "svg" else {"Creator": creator, "CreationDate": None}
