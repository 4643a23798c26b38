"""bertscope: a terminal explorer for BERT-family encoders, and the Python API beneath it.

    import bertscope
    model = bertscope.load()
    stats = bertscope.patterns(model, data="corpus.txt")

The API's functions are in `bertscope.api` and reachable from here. Importing this package
stays cheap (no torch) so `bertscope --help` and the explorer's first frame appear at once:
the names below are looked up on first use.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "BertscopeError",
    "BertscopeNote",
    "Cancelled",
    "attribute",
    "cloze",
    "compare",
    "corpus",
    "erase",
    "fill",
    "geometry",
    "importance",
    "load",
    "measure",
    "mixing",
    "mixing_agreement",
    "objective",
    "patch",
    "patterns",
    "probe",
    "probe_sentences",
    "prune",
    "pruning_curve",
    "sae_directions",
    "sae_features",
    "sae_heads",
    "steps",  # an analysis as a stream of progress records (for live displays): steps(patterns, model, ...)
    "switched",  # SAE features switched off or clamped in every pass of a block: with switched(model, sae=DIR, features=[12]):
    "syntax",
    "task_sentences",
    "train_sae",
    "treebank",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from bertscope import api

        return getattr(api, name)
    raise AttributeError(f"module 'bertscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
