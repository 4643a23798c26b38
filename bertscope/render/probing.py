"""Rich view of a probing report: a table and a per-layer chart (no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.bar import Bar
from rich.console import Group
from rich.table import Table
from rich.text import Text

from bertscope.render.fit import Narrowing

if TYPE_CHECKING:
    from bertscope.analyses.probing.results import ProbeReport


# The description length's columns, short: a table with every baseline and both codes is wide.
SHORT = {"online_bits": "bits", "compression": "compr.", "control_online_bits": "control bits", "control_compression": "control compr."}


# Narrower still, for 80 columns, with a legend: the baselines' columns.
NARROW = {
    "random_init_accuracy": "rand",
    "random_init_spearman": "rand",
    "control_accuracy": "ctrl",
    "selectivity": "sel",
    "root_accuracy": "root",
    "control_online_bits": "c.bits",
    "control_compression": "c.compr",
}
FIT_WIDTH = 9  # "converged"; "iteration limit" wraps


def probe_report(report: ProbeReport, model: str, source: str) -> Group:
    """Per layer (0 = embeddings) the main score as a bar, the other columns as numbers.

    Where the table is too wide for the width (80 columns), its headers are shorter, with a legend.
    """
    metric = report.metric
    rows = report.table()  # flat: a layer's description length as columns
    extra = [name for name in rows[0] if name not in ("layer", metric, "l2", "uniform_bits")]  # one uniform code: said below
    wide = _table(report, rows, {name: SHORT.get(name, name.replace("_", " ")) for name in extra})
    narrow_names = {name: NARROW.get(name, SHORT.get(name, name.replace("_", " "))) for name in extra}
    legend = [f"{short}: {name.replace('_', ' ')}" for name, short in narrow_names.items() if name in NARROW]
    narrow = _table(report, rows, narrow_names, fit_width=FIT_WIDTH)
    table = Narrowing(wide, Group(narrow, Text(" · ".join(legend), style="dim")) if legend else narrow)
    cog = "n/a" if report.center_of_gravity != report.center_of_gravity else f"{report.center_of_gravity:.2f}"
    baselines = ", ".join(f"{name.replace('_', ' ')} {value:.3f}" for name, value in report.baselines.items())
    shown = ("train", "dev", "test", "classes", "unit")  # what was left out is said in the notes
    counts = ", ".join(f"{name} {report.counts[name]}" for name in shown if name in report.counts)
    code = []
    if report.mdl:  # the description length's choices, in a line
        code.append(
            Text(
                f"description length (Voita & Titov): bits of the online code; compr. = the uniform code's "
                f"{rows[0]['uniform_bits']:,.0f} bits for {report.mdl['examples']:,} {report.mdl['unit']} / bits; "
                f"{len(report.mdl['block_ends'])} blocks, {report.mdl['order']}",
                style="dim",
            )
        )
    return Group(
        Text.assemble((f"{report.task}", "bold"), f" · {model} · {source}"),
        Text(f"{counts}", style="dim"),
        table,
        Text(f"best layer {report.best_layer} (*), centre of gravity {cog} (Tenney et al.); baselines: {baselines or 'none'}"),
        *code,
        Text("layer 0 is the embeddings; layer l+1 the output of transformer layer l", style="dim"),
    )


def _table(report: ProbeReport, rows: list[dict], headers: dict[str, str], fit_width: int | None = None) -> Table:
    """The per-layer table, its extra columns (`rows`' names) headed by `headers`."""
    metric = report.metric
    table = Table(box=None, padding=(0, 1), title_justify="left")
    table.add_column("layer", justify="right", style="dim")
    table.add_column(metric, width=22, no_wrap=True)
    table.add_column("", justify="right")
    for name, header in headers.items():
        table.add_column(header, justify="right", max_width=fit_width if name == "fit" else None)
    low = min(0.0, min(entry[metric] for entry in report.layers))
    for entry in rows:
        best = entry["layer"] == report.best_layer
        table.add_row(
            str(entry["layer"]) + (" *" if best else ""),
            Bar(1.0 - low, 0, entry[metric] - low, width=22, color="magenta"),
            Text(f"{entry[metric]:.3f}", style="bold" if best else ""),
            *(_cell(name, entry[name]) for name in headers),
        )
    return table


def _cell(name: str, value: object) -> str:
    """A number of the table: bits as whole numbers, the rest to three decimals."""
    if isinstance(value, float):
        return f"{value:,.0f}" if name.endswith("bits") else f"{value:.3f}"
    return str(value)
