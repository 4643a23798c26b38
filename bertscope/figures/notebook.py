"""A result as a notebook shows it: a one-line repr, an HTML table with the result's figure, a DataFrame.

A result type says what it is in one line (`summary`) and gives its main table (`table`: one
dict of plain values per row); `Shown` makes the rest from these two, so that every result
displays alike and a new one costs two short methods. Dataclasses that inherit it are
declared with `repr=False`, or the generated repr (every array in full) would win.
"""

from __future__ import annotations

import base64
import html
import io
import math
from typing import TYPE_CHECKING, Any

from bertscope.base.errors import BertscopeError, InputError

if TYPE_CHECKING:
    import pandas

HTML_ROWS = 12  # the rows of the table a notebook shows; to_pandas() has them all


class Shown:
    """Short repr, `_repr_html_` (headline, figure, the first rows of the table) and `to_pandas()` for a result."""

    def summary(self) -> str:
        """The headline: sizes and the numbers a reader looks for first, in one line."""
        raise NotImplementedError

    def table(self) -> list[dict[str, Any]]:
        """The result's main table, one dict a row (numbers, strings, booleans; no arrays)."""
        raise NotImplementedError

    def to_pandas(self) -> pandas.DataFrame:
        """The main table as a pandas DataFrame (pandas is needed for this alone)."""
        try:
            import pandas
        except ImportError:
            raise InputError("to_pandas() needs pandas, which is not installed: pip install pandas") from None
        return pandas.DataFrame(self.table())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.summary()})"

    def _repr_html_(self) -> str:
        parts = [f"<p><b>{type(self).__name__}</b>: {html.escape(self.summary())}</p>"]
        figure = self._figure_png()
        if figure:
            parts.append(f'<img alt="{html.escape(type(self).__name__)} figure" src="data:image/png;base64,{figure}"/>')
        parts.append(html_table(self.table()))
        notes = getattr(self, "notes", ())
        parts.extend(f"<p><i>note: {html.escape(note)}</i></p>" for note in notes)
        return "<div>" + "".join(parts) + "</div>"

    def _figure_png(self) -> str:
        """The result's default figure as base64 PNG, or "" for a result that draws none."""
        draw = getattr(self, "figure", None)
        if draw is None:
            return ""
        try:
            figure = draw()
        except BertscopeError:
            return ""  # nothing to draw by default (a forward pass that kept no attention maps)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
        return base64.b64encode(buffer.getvalue()).decode("ascii")


def html_table(rows: list[dict[str, Any]], limit: int = HTML_ROWS) -> str:
    """The first `limit` rows as an HTML table, saying how many more there are."""
    if not rows:
        return "<p>(no rows)</p>"
    columns = list(dict.fromkeys(key for row in rows[:limit] for key in row))
    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell_text(row.get(column)))}</td>" for column in columns) + "</tr>" for row in rows[:limit]
    )
    more = f"<p>… {len(rows) - limit:,} more rows: to_pandas() has them all</p>" if len(rows) > limit else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def cell_text(value: object) -> str:
    """A table cell: floats to four significant digits, nothing for None."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)
