"""How results look outside the terminal: matplotlib figures for papers, and a result's display in a notebook.

Torch-free and below the analyses, so each result type can draw itself (`result.figure()`)
from its own arrays; matplotlib is imported only when a figure is drawn.
"""

from bertscope.figures.save import check_figure_path, save_figure

__all__ = ["check_figure_path", "save_figure"]
