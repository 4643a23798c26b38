"""A griffe extension for the API reference: an analysis returns its result, not the stream it is made from.

`bertscope.api.analysis` turns a function returning `Iterator[Progress[R]]` into one returning `R`
(its `__signature__` says so at run time); griffe reads the source, so the reference would show the
stream's return type. This gives each `@analysis(...)` function the type it returns when called.
"""

from __future__ import annotations

from typing import Any

import griffe


class AnalysisReturns(griffe.Extension):
    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        if not any(str(decorator.value).startswith("analysis(") for decorator in func.decorators):
            return
        returns = func.returns
        if isinstance(returns, griffe.ExprSubscript) and str(returns).startswith("Iterator[Progress["):
            progress = returns.slice
            if isinstance(progress, griffe.ExprSubscript):
                func.returns = progress.slice
