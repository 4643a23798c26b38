"""A model known from its files, loaded only when a pass needs its weights.

A `probe` whose features are all in the cache needs only what names the cache entries (the
model's fingerprint and maximum length), the shape of its hidden states and a device to
fit on. Loading the model imports transformers and reads the weights: on a warm cache that
was more than the probes' fitting itself. `DeferredSession` tells those things from the files and loads the
`Session` the first time a pass is wanted (`ready`). A random-init copy is deferred the same
way: its weights are drawn only if its features are not cached.

The maximum length is told from config.json as loading tells it (the positions, or the
`max_length` asked for). Were the files to tell it wrongly, the cache entries would not be
found under it, the model would be loaded and its own key looked up: a wrong guess costs the
load that would have happened anyway, never a wrong entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bertscope.model.masks import HeadMask
from bertscope.model.model_files import ModelFiles, fingerprint, numerics_key, read_config, usable_length

if TYPE_CHECKING:
    import torch

    from bertscope.model.session import Session

Counts = tuple[int, int, int]  # layers, heads, hidden size


class DeferredSession:
    """Stands in for a `Session` where only what names its cache entries is needed; `ready()` gives the loaded one."""

    def __init__(
        self,
        *,
        source: str,
        fingerprint: str,
        max_length: int | None,
        counts: Counts | None,
        device: torch.device,
        load: Callable[[], Session],
        dtype: str = "float32",
    ) -> None:
        self.source, self.fingerprint, self.max_length, self.device = source, fingerprint, max_length, device
        self.numerics_key = numerics_key(dtype, device.type)  # what names its cache entries beside the fingerprint
        self.dtype = dtype
        self._counts, self._load = counts, load  # counts None: asked of the loaded model
        self._session: Session | None = None

    @classmethod
    def from_files(
        cls, files: ModelFiles, device: str, load: Callable[[], Session], dtype: str = "float32", max_length: int | None = None
    ) -> DeferredSession:
        """The model in `files`, to run on `device` (auto, cpu, cuda…) in `dtype`, its inputs cut at `max_length` (default:
        the model's own limit); `load()` loads it as a `Session`."""
        from bertscope import runtime as distributed
        from bertscope.model.device import resolve_device

        config = read_config(files.directory)
        keys = ("num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings")
        numbers = [number for number in map(config.get, keys) if isinstance(number, int) and number > 0]
        known = len(numbers) == len(keys)  # else transformers' defaults: load to know
        return cls(
            source=files.source,
            fingerprint=fingerprint(files.directory, files.weights),
            max_length=usable_length(numbers[3], files.family, max_length) if known else None,
            counts=(numbers[0], numbers[1], numbers[2]) if known else None,
            # Under torchrun this joins the process group, as loading would: the ranks meet to share their features.
            device=resolve_device(distributed.start(device)),
            load=load,
            dtype=dtype,
        )

    @classmethod
    def random_copy_of(cls, model: Session | DeferredSession, seed: int = 0) -> DeferredSession:
        """`model.random_copy(seed)`, drawn only if a pass needs its weights (its features are not cached)."""
        return cls(
            source=f"{model.source} (random init, seed {seed})",
            fingerprint=f"random{seed}-{model.fingerprint}",
            max_length=model.max_length,
            counts=None if model.max_length is None else (model.num_layers, model.num_heads, model.hidden_size),
            device=model.device,
            load=lambda: model.ready().random_copy(seed),
            dtype=model.dtype,
        )

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
