"""Rich view of an erasure (amnesic probing) result: guardedness per layer and the measure (no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from bertscope.analyses.erasure_results import ErasureResult


def erasure_report(result: ErasureResult, model: str, source: str) -> Group:
    """The probe's accuracy before and after per layer from the erased one up, then the measure's three values."""
    guarded = Table(box=None, padding=(0, 1))
    for name in ("layer", "before", "after", "above majority"):
        guarded.add_column(name, justify="right")
    for row in result.guardedness:
        above = row["accuracy_after"] - result.majority
        guarded.add_row(
            str(row["layer"]) + (" (erased)" if row["layer"] == result.layer else ""),
            f"{row['accuracy_before']:.3f}",
            f"{row['accuracy_after']:.3f}",
            Text(f"{above:+.3f}", style="bold" if above > 0.02 else "dim"),
        )
    m = result.measure
    behaviour = Table(box=None, padding=(0, 1))
    for name in ("as it is", "erased", f"{result.rank} random directions"):
        behaviour.add_column(name, justify="right")
    behaviour.add_row(f"{m['none']:.4f}", f"{m['erased']:.4f}", f"{m['control']:.4f}")
    counts = result.counts
    return Group(
        Text.assemble((result.task, "bold"), f" erased at layer {result.layer} · {model} · {source}"),
        Text(f"train {counts['train']}, test {counts['test']} {counts['unit']}, {counts['classes']} classes", style="dim"),
        Text(
            f"LEACE removed rank {result.rank}, {result.variance_share:.1%} of the layer's variance "
            f"(the random control: {result.settings.get('control_variance_share', float('nan')):.1%}); majority class {result.majority:.3f}"
        ),
        Text("linear guardedness: a fresh probe for the task, before and after", style="bold"),
        guarded,
        Text(f"what the model loses: {m['name']} ({m['metric']})", style="bold"),
        behaviour,
        Text("layer 0 is the embeddings; layer l+1 the output of transformer layer l", style="dim"),
    )
