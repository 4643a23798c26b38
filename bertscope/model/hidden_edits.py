"""A hidden state edited inside the model's own passes, for one thread: what erasure (LEACE) and switched SAE features
share. The hook sits on the module whose output that state is (`Family.hidden_state_module`), in front of the module's
other hooks, and edits only the passes of the thread that set it, so the explorer's other workers run as they are."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from bertscope.base.errors import InputError

if TYPE_CHECKING:
    from bertscope.model.session import Session


@contextlib.contextmanager
def editing_hidden_state(session: Session, layer: int, edit: Callable[[Tensor], Tensor]) -> Iterator[None]:
    """Within the block, hidden state `layer` (0 the embeddings, l + 1 the output of layer l) of every forward pass this
    thread runs is `edit(state)`. The hook is removed when the block ends, also when it raises."""
    if not 0 <= layer <= session.num_layers:
        raise InputError(f"layer {layer} is out of range: hidden-state layers are 0 (embeddings) to {session.num_layers}", setting="layer")
    owner = threading.get_ident()
    module = session.family.hidden_state_module(session.model, layer)

    def edited(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if threading.get_ident() != owner:
            return None
        if isinstance(output, Tensor):
            return edit(output)
        return (edit(output[0]), *output[1:])  # a layer that returns a tuple (DeBERTa, MPNet)

    handle = module.register_forward_hook(edited, prepend=True)
    try:
        yield
    finally:
        handle.remove()
