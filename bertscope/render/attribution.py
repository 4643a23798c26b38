"""Attributions drawn with Rich: the sentence's tokens shaded by score, a table, a title (no torch).

Signed scores shade on a diverging scale (orange raises the explained score, purple lowers
it: ColorBrewer's PuOr, safe for colour-blind readers), unsigned ones on orange alone. The
scale is the largest magnitude among the real tokens, so a large score on [CLS] or [SEP]
(attention rollout's usual case) does not wash out the words; those tokens are clamped.
Without colours, the strength shows as a shade glyph after each token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from rich.bar import Bar
from rich.color import Color
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from bertscope.analyses.attribution_results import METHOD_NAMES, SCORE_SYMBOLS, SIGNED, TASK_KINDS, task_decision
from bertscope.model.labels import token_labels

if TYPE_CHECKING:
    from bertscope.analyses.attribution_results import Attribution
    from bertscope.base.theming import ThemeSpec

POSITIVE = (230, 97, 1)  # PuOr orange
NEGATIVE = (94, 60, 153)  # PuOr purple
GLYPHS = " ░▒▓█"


def scale_of(scores: np.ndarray, special: np.ndarray) -> float:
    real = np.abs(scores[~special]) if (~special).any() else np.abs(scores)
    return float(real.max()) if len(real) and real.max() > 0 else 1.0


def _hex(value: str) -> tuple[int, int, int]:
    return int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16)


def token_style(value: float, background: str, foreground: str) -> Style:
    """The style of a token whose score is `value` in [-1, 1] of the scale."""
    base = _hex(background)
    target = POSITIVE if value >= 0 else NEGATIVE
    t = min(abs(value), 1.0) * 0.9
    rgb = tuple(round(b + (c - b) * t) for b, c in zip(base, target))
    return Style(bgcolor=Color.from_rgb(*rgb), color=Color.from_rgb(*_hex(foreground)) if t < 0.5 else Color.from_rgb(255, 255, 255))


def shaded_sentence(
    tokens: Sequence[str],
    scores: np.ndarray,
    special: np.ndarray,
    *,
    background: str = "#000000",
    foreground: str = "#e6e3f0",
    glyphs: bool = False,
) -> Text:
    """The tokens in order, each shaded by its score; word pieces join their word (in every family: model.labels)."""
    scale = scale_of(scores, special)
    text = Text(no_wrap=False, overflow="fold")
    for index, (token, score) in enumerate(zip(token_labels(tokens, special), scores)):
        value = float(score) / scale
        piece = token.removeprefix("##")
        if index and not token.startswith("##"):
            text.append(" ")
        if glyphs:
            level = GLYPHS[min(int(round(min(abs(value), 1.0) * (len(GLYPHS) - 1))), len(GLYPHS) - 1)]
            text.append(piece, style="bold" if abs(value) >= 0.5 else "")
            text.append(("-" if value < 0 else "") + level, style="dim")
        else:
            text.append(piece, style=token_style(value, background, foreground))
    return text


def _trained_on(target: dict) -> str:
    """`, trained on 2,000` where the probe says (the probing pane and `bertscope probe` show the same probe)."""
    train = target.get("sentences", {}).get("train")
    return f", trained on {train:,}" if train else ""


def describe(result: Attribution) -> str:
    """One line: method, what is explained, and the score of the decision."""
    target = result.target
    f = SCORE_SYMBOLS[result.score]
    if target["kind"] == "mlm":
        what = f"{f}({target['label']}) at the [MASK] at {target['position']}"
    elif target["kind"] in TASK_KINDS:
        what = task_decision(target, f)
    elif target["kind"] == "class":
        what = f"{f}(class {target['label']})"
    else:
        what = (
            f"{f}({target['label']}) of the {target['task']} probe on layer {target['layer']} "
            f"({target['pooling']} pooling, test accuracy {target['test_accuracy']:.3f}{_trained_on(target)})"
        )
    line = f"{METHOD_NAMES[result.method]} of {what} = {result.output:.4g}"
    if result.method == "integrated-gradients":
        error = "n/a" if result.completeness_error != result.completeness_error else f"{result.completeness_error:.2%}"
        line += f"; baseline {result.baseline_output:.4g}, completeness error {error} ({result.steps} steps)"
    if result.mask is not None and len(result.mask):
        line += f"; heads off {result.mask.spec()} ({result.ablation})"
    return line


SHORT_METHODS = {
    "gradient": "saliency",
    "gradient-x-input": "grad×input",
    "integrated-gradients": "IG",
    "attention-rollout": "rollout",
    "attention-flow": "flow",
    "norms": "‖αf‖ rolled",
    "value-zeroing": "value zeroing rolled",
    "alti": "ALTI rolled",
}


def short_describe(result: Attribution) -> str:
    """`describe` for one line of a narrow terminal: the facts, fewest words first."""
    target = result.target
    f = SCORE_SYMBOLS[result.score]
    if target["kind"] == "mlm":
        what = f"{f}({target['label']}) at [MASK] {target['position']}"
    elif target["kind"] in TASK_KINDS:
        what = task_decision(target, f, short=True)
    elif target["kind"] == "class":
        what = f"{f}({target['label']})"
    else:
        what = f"{target['task']} probe L{target['layer']} (acc {target['test_accuracy']:.3f}): {f}({target['label']})"
    line = f"{SHORT_METHODS[result.method]} · {what} = {result.output:.3g}"
    if result.method == "integrated-gradients":
        error = "n/a" if result.completeness_error != result.completeness_error else f"{result.completeness_error:.1%}"
        line += f" · error {error} ({result.steps} steps)"
    if result.mask is not None and len(result.mask):
        line += f" · {len(result.mask)} head(s) off"
    return line


def attribution_table(result: Attribution, bar_width: int = 20) -> Table:
    scores = result.scores
    scale = scale_of(scores, result.encoding.special)
    signed = result.method in SIGNED
    table = Table(box=None, padding=(0, 1))
    table.add_column("pos", justify="right", style="dim")
    table.add_column("token")
    table.add_column("score", justify="right")
    table.add_column("", width=bar_width, no_wrap=True)
    for index, (token, score) in enumerate(zip(token_labels(result.tokens, result.encoding.special), scores)):
        value = max(min(float(score) / scale, 1.0), -1.0)
        if signed:
            begin, end = (1.0, 1.0 + value) if value >= 0 else (1.0 + value, 1.0)
            bar = Bar(2.0, begin, end, width=bar_width, color="dark_orange3" if value >= 0 else "purple")
        else:
            bar = Bar(1.0, 0.0, value, width=bar_width, color="dark_orange3")
        table.add_row(str(index), token, f"{float(score):.4f}", bar)
    return table


def attribution_report(result: Attribution, model: str, theme: ThemeSpec | None = None, notes: bool = True) -> Group:
    background = theme.background if theme is not None else "#000000"
    foreground = theme.foreground if theme is not None else "#e6e3f0"
    parts: list[RenderableType] = [
        Text.assemble((describe(result), "bold"), f"  ·  {model}"),
        shaded_sentence(result.tokens, result.scores, result.encoding.special, background=background, foreground=foreground),
        attribution_table(result),
    ]
    if result.method in SIGNED:
        parts.append(Text("orange raises the score, purple lowers it; bars are scaled to the largest word", style="dim"))
    if notes:
        parts.extend(Text(f"note: {note}", style="yellow") for note in result.notes)
    return Group(*parts)
