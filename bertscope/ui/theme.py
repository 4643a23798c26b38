"""bertscope's theme files as Textual themes, and the heatmap colours of the active one."""

from __future__ import annotations

from typing import Any, cast

from textual.color import Color, ColorParseError
from textual.theme import Theme

from bertscope.base.theming import Colormap, ThemeSpec, available_themes, load_theme


def rich_colour(value: str | None, fallback: str) -> str:
    """A theme's colour as `#rrggbb`, which Rich parses and the render layer blends. Textual's own themes, which
    the palette offers too, may name ANSI colours (`ansi_blue`, `ansi_default` in its ansi-dark theme): Rich reads
    no such name, and the terminal's default colour has no value to blend (`fallback`)."""
    if not value:
        return fallback
    try:
        colour = Color.parse(value)
    except ColorParseError:
        return fallback
    if colour.ansi is not None and colour.ansi < 0:  # the terminal's default colour
        return fallback
    return f"#{colour.r:02x}{colour.g:02x}{colour.b:02x}"


def textual_theme(spec: ThemeSpec) -> Theme:
    colours = cast(dict[str, Any], spec.app_colours())  # colour names only, never `dark` or another non-str field
    return Theme(name=spec.name, dark=spec.dark, **colours)


def load_all_themes() -> tuple[dict[str, ThemeSpec], list[str]]:
    """Every theme that loads, and one warning line per theme file that does not."""
    specs, warnings = {}, []
    for name in available_themes():
        try:
            specs[name] = load_theme(name)
        except ValueError as error:
            warnings.append(str(error))
    return specs, warnings


def heatmap_for(theme_name: str, dark: bool, specs: dict[str, ThemeSpec]) -> Colormap:
    """The colour map of a bertscope theme; for Textual's own themes, ours of the same darkness."""
    if theme_name in specs:
        return specs[theme_name].heatmap
    fallback = "dark" if dark else "light"
    return (specs.get(fallback) or next(iter(specs.values()))).heatmap
