"""bertscope's theme files as Textual themes, and the heatmap colours of the active one."""

from __future__ import annotations

from typing import Any, cast

from textual.theme import Theme

from bertscope.theming import Colormap, ThemeSpec, available_themes, load_theme


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
