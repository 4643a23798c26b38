"""A Rich table of heads that track syntax (Clark et al. 2019 §4), for `bertscope syntax` and the overview.

Takes the plain rows of `SyntaxResult.rows` (no torch): per relation and direction, the
best head and its accuracy beside the best fixed-offset baseline, rare relations flagged.
"""

from __future__ import annotations

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

ARROWS = {"dependent_to_head": "dep→head", "head_to_dependent": "head→dep"}


SHORT_ARROWS = {"dependent_to_head": "→h", "head_to_dependent": "→d"}


def syntax_table(rows: list[dict], *, min_count: int, short: bool = False) -> Table:
    """One line per relation and direction; a best head that beats its baseline in bold, a rare relation dimmed with `*`.

    `short`: for a narrow pane (the explorer's overview): no count, offset or gain columns.
    """
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    justify: JustifyMethod
    if short:
        for name, justify in (("relation", "left"), ("", "left"), ("head", "right"), ("acc", "right"), ("base", "right")):
            table.add_column(name, justify=justify)
        for row in rows:
            few = row["count"] < min_count
            cells = (
                (f"{row['best']['layer']}:{row['best']['head']}", f"{row['best']['accuracy']:.0%}", f"{row['baseline']['accuracy']:.0%}")
                if row["count"]
                else ("–", "–", "–")
            )
            table.add_row(row["relation"] + ("*" if few else ""), SHORT_ARROWS[row["direction"]], *cells, style="dim" if few else "")
        return table
    for name, justify in (
        ("relation", "left"),
        ("direction", "left"),
        ("count", "right"),
        ("best head", "right"),
        ("accuracy", "right"),
        ("baseline", "right"),
        ("offset", "right"),
        ("gain", "right"),
    ):
        table.add_column(name, justify=justify)
    for row in rows:
        best, baseline = row["best"], row["baseline"]
        few = row["count"] < min_count
        gain = best["accuracy"] - baseline["accuracy"]
        style = "dim" if few else ("bold" if gain > 0 else "")
        table.add_row(
            row["relation"] + (" *" if few else ""),
            ARROWS[row["direction"]],
            f"{row['count']:,}",
            f"{best['layer']}:{best['head']}" if row["count"] else "–",
            f"{best['accuracy']:.1%}" if row["count"] else "–",
            f"{baseline['accuracy']:.1%}" if row["count"] else "–",
            f"{baseline['offset']:+d}" if row["count"] else "–",
            Text(f"{gain:+.1%}" if row["count"] else "–", style="green" if gain > 0 and not few else ""),
            style=style,
        )
    return table
