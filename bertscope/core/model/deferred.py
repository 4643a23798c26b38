"""A model known from its files, loaded only when a pass needs its weights.

A `probe` whose features are all in the cache needs only what names the cache entries (the
model's fingerprint and maximum length), the shape of its hidden states and a device to
fit on. Loading the model imports transformers and reads the weights: on a warm cache that
was more than the probes' fitting itself (EWT UPOS on MiniLM: 3.9 s of loading before 3.1 s
of fitting, issue 19). `DeferredSession` tells those things from the files and loads the
`Session` the first time a pass is wanted (`ready`).

If the files tell the maximum length wrongly (a tokenizer that sets its limit in code), the
cache entries are not found under it, the model is loaded and its own key is looked up:
a wrong guess costs the load that would have happened anyway, never a wrong entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bertscope.core.model.masks import HeadMask
from bertscope.core.model.model_files import ModelFiles, fingerprint, read_config, tokenizer_limit, usable_length

if TYPE_CHECKING:
    import torch

    from bertscope.core.model.session import Session


class DeferredSession:
    """Stands in for a `Session` where only the files are needed; `ready()` gives the loaded one."""

    def __init__(self, files: ModelFiles, device: str, load: Callable[[], Session], *, name: str | None = None,
                 fingerprint_prefix: str = "") -> None:
        from bertscope.core import distributed
        from bertscope.core.model.device import resolve_device

        config = read_config(files.directory)
        self.files, self._device, self._load = files, device, load
        # Under torchrun this joins the process group, as loading would: the ranks meet to share their features.
        self.device: torch.device = resolve_device(distributed.start(device))
        self.source = name or files.source
        self.fingerprint = fingerprint_prefix + fingerprint(files.directory, files.weights)
        counts = [config.get(key) for key in ("num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings")]
        # Counts a config leaves to transformers' defaults are asked of the loaded model instead.
        self._counts = counts if all(isinstance(count, int) and count > 0 for count in counts) else None
        self.max_length = None if self._counts is None else usable_length(counts[3], files.family, tokenizer_limit(files.directory))
        self._session: Session | None = None

    @property
    def num_layers(self) -> int:
        return self.ready().num_layers if self._counts is None else self._counts[0]

    @property
    def num_heads(self) -> int:
        return self.ready().num_heads if self._counts is None else self._counts[1]

    @property
    def hidden_size(self) -> int:
        return self.ready().hidden_size if self._counts is None else self._counts[2]

    def mask(self, spec: str | None = None) -> HeadMask:
        """`Session.mask`: a mask spec (`0:3,2:*`) parsed against the model's layers and heads."""
        return HeadMask.parse(spec, self.num_layers, self.num_heads)

    def ready(self) -> Session:
        """The model, loaded on the first call."""
        if self._session is None:
            self._session = self._load()
        return self._session

    def random_copy(self, seed: int = 0) -> DeferredSession:
        """`Session.random_copy`, made only if its features are not cached."""
        return DeferredSession(self.files, self._device, lambda: self.ready().random_copy(seed),
                               name=f"{self.source} (random init, seed {seed})", fingerprint_prefix=f"random{seed}-")
