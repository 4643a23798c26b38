"""SAE features switched off or clamped inside the forward pass, as a head is switched off: the explorer's features
screen, and `bertscope.switched` in a script.

At the SAE's hidden state L the pass runs with h replaced by the SAE's reconstruction with the switched features
changed, plus the SAE's error term (h − x̂(h)):

    h′ = x̂(h) − Σ_f a_f(h)·W_dec[f] + Σ_f c_f·W_dec[f] + (h − x̂(h))  =  h + Σ_f (c_f − a_f(h))·W_dec[f]

where a_f(h) is feature f's TopK activation on h (0 where f is not among the k that fire) and c_f is 0 for a
feature switched off, its value for one clamped. The reconstruction's other features and the error term cancel,
so a pass with nothing switched, or at a token where a switched-off feature does not fire, is exactly the model's;
the hook computes the right-hand side, which is that identity without the float noise of x̂ + (h − x̂). The
features are not encoded again after the change (as SAELens's and Gao et al.'s interventions do).

The hook sits where the SAE read its training data and where erasure edits (`activations.LayerTap`'s module,
`Family.hidden_state_module`: the state the model reports at that index, on every family), put first among the
module's hooks, in the thread that set it only. It applies at every position of the pass, the special tokens
([CLS], [SEP], <s>, </s>) included, which an SAE trained without them (the default) never read: there its
activations are what its encoder makes of an unfamiliar input, and switching a feature off takes away what it
reads there. Padding positions change too, and nothing reads them (the attention mask leaves them out).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from bertscope.analyses.sae.autoencoder import TopKSAE
from bertscope.base.errors import InputError
from bertscope.model.hidden_edits import editing_hidden_state

if TYPE_CHECKING:
    from bertscope.model.session import Session


@dataclass(frozen=True, eq=False)
class FeatureSwitch:
    """The edit of hidden states that switches `features` (None: off, a value: clamped to it) of `sae`."""

    sae: TopKSAE
    features: Tensor  # [n] long
    targets: Tensor  # [n] the value each one is set to (0: off)
    clamped: Tensor  # [n] bool: set to `targets` everywhere (clamped), else only where it fires (off)

    @classmethod
    def of(cls, sae: TopKSAE, switched: Mapping[int, float | None]) -> FeatureSwitch:
        for feature in switched:
            if not 0 <= feature < sae.d_sae:
                raise InputError(f"feature {feature} is out of range: the SAE has features 0 to {sae.d_sae - 1}", setting="features")
        device = sae.W_dec.device
        features = torch.tensor(sorted(switched), dtype=torch.long, device=device)
        targets = torch.tensor([switched[f] or 0.0 for f in sorted(switched)], dtype=torch.float32, device=device)
        clamped = torch.tensor([switched[f] is not None for f in sorted(switched)], dtype=torch.bool, device=device)
        return cls(sae, features, targets, clamped)

    def activations(self, h: Tensor) -> Tensor:
        """`[..., n]`: each switched feature's TopK activation on `h` `[..., d_in]` (0 where it is not among the k)."""
        values, indices = self.sae.select(self.sae.preactivations(h))
        chosen = indices.unsqueeze(-1) == self.features  # [..., k, n]
        return (values.unsqueeze(-1) * chosen).sum(-2)

    def __call__(self, h: Tensor) -> Tensor:
        """h + Σ_f (c_f − a_f(h))·W_dec[f], in `h`'s dtype (computed in float32)."""
        if not len(self.features):
            return h
        plain = h.float()
        change = self.targets - self.activations(plain)  # [..., n]
        return (plain + change @ self.sae.W_dec[self.features]).to(h.dtype)


@contextlib.contextmanager
def switching(session: Session, sae: TopKSAE, layer: int, switched: Mapping[int, float | None]) -> Iterator[None]:
    """Within the block, every forward pass of `session`'s model run by this thread has the `switched` features of
    `sae` (which reads hidden state `layer`) switched off (None) or clamped (a value); other threads' passes run as
    they are. The hook is removed when the block ends, also when it raises."""
    if sae.d_in != session.hidden_size:
        raise InputError(f"the SAE reads {sae.d_in}-wide hidden states and this model's are {session.hidden_size}", setting="sae")
    with editing_hidden_state(session, layer, FeatureSwitch.of(sae, switched)):
        yield


def token_features(sae: TopKSAE, states: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Each token's `top` most active features on its hidden states `[T, d_in]`: `[T, top]` feature numbers and
    activations, strongest first (activations of 0 where fewer fire)."""
    with torch.no_grad():
        x = torch.as_tensor(np.asarray(states, dtype=np.float32), device=sae.W_dec.device)
        values, indices = sae.select(sae.preactivations(x))
        best = values.topk(min(top, sae.k), dim=-1)
        return indices.gather(-1, best.indices).cpu().numpy(), best.values.cpu().numpy()
