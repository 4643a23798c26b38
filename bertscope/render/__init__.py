"""Rich renderables for bertscope's pictures, shared by the CLI and the Textual UI."""

from bertscope.render.heatmap import AttentionHeatmap

__all__ = ["AttentionHeatmap"]
