"""Which heads write an SAE feature: each part of the model's direct contribution to the feature's pre-activation.

An SAE at hidden state L ≥ 1 reads x_L, and feature f's pre-activation is (x_L − b_dec) · W_enc[:, f] + b_enc[f]. The
residual stream makes x_L a sum of what was written into it: the embeddings x_0, each head's output (its context
through its slice of the attention output projection, W_O^h), each attention block's bias b_O, each feed-forward
block's output, and where the family is post-LN (BERT, RoBERTa, ELECTRA, DistilBERT, ALBERT, DeBERTa, MPNet) the
LayerNorms after each block, which scale and centre the sum. Each norm is linearised at the token's own σ (the one the
pass computed: √(biased variance + ε)), as Kobayashi et al. 2021 do: LN(Σ parts) = Σ γ⊙(part − mean(part))/σ + β,
exact for the pass at hand. So every part's share is W_enc[:, f] carried down through the norms above it, read
against what the part wrote: the readout is pulled back, not each part carried up (one vector per token and layer,
no part kept). Pre-LN blocks (ModernBERT) need no linearisation, save the final norm of its last hidden state.

"Direct": a head's write also changes what later heads and feed-forward blocks read; that share is theirs here (the
parts of those blocks), as in direct logit attribution. Averaged over the tokens where the feature fires (is among
the k selected with a positive value): what writes the feature when it is there, not what pushes it down elsewhere.

What each pass writes is taken by hooks (`Family.attention_output`'s input is the heads' context after any head gate,
`feed_forward_output`'s output, the norms' inputs, hidden state 0), on the thread that runs the job.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.sae.activations import numbered, token_batches
from bertscope.analyses.sae.features import open_sae
from bertscope.analyses.sae.reading_results import LINEARISATION_POST_LN, LINEARISATION_PRE_LN, SAEHeads, check_feature, check_heads_layer
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.data.corpus import Sentence

if TYPE_CHECKING:
    from bertscope.model.session import Session


@dataclass
class _LayerTape:
    """What one layer's pass wrote, `[B·T, ...]`: the heads' context (after any gate), the feed-forward output, and the
    inputs of its norms (None where the family has none there)."""

    context: Tensor | None = None
    feed_forward: Tensor | None = None
    attention_norm_input: Tensor | None = None
    output_norm_input: Tensor | None = None


class _Recorder:
    """Hooks that keep, for each layer below L, what `_LayerTape` holds, hidden state 0, and a final norm's input; only
    for passes of the thread that made it."""

    def __init__(self, session: Session, layer: int) -> None:
        family, model = session.family, session.model
        self.layers = family.layers(model)[:layer]
        self.owner = threading.get_ident()
        self.tapes = [_LayerTape() for _ in self.layers]
        self.embeddings: Tensor | None = None
        self.final_input: Tensor | None = None
        self.final_norm = _final_norm(session, layer)
        self.sites: list[tuple[nn.Module, Any]] = [(family.embedding_output(model), self._keep_embeddings)]
        self.final_site: list[tuple[nn.Module, Any]] = []  # a pre-hook: the stop at hidden state L is the norm's own hook
        for index, module in enumerate(self.layers):
            self.sites.append((family.attention_output(module), self._keeper(index, "context", argument=True)))
            self.sites.append((family.feed_forward_output(module), self._keeper(index, "feed_forward", argument=False)))
            for name, norm in (("attention_norm_input", family.attention_norm(module)), ("output_norm_input", family.output_norm(module))):
                if norm is not None:
                    self.sites.append((norm, self._keeper(index, name, argument=True)))
        if self.final_norm is not None:
            self.final_site.append((self.final_norm, self._keep_final))

    def _mine(self) -> bool:
        return threading.get_ident() == self.owner

    @staticmethod
    def _flat(tensor: Tensor) -> Tensor:
        return tensor.detach().flatten(0, -2)  # [B·T, width], width 0 where a layer has no head left (pruned)

    def _keeper(self, index: int, name: str, *, argument: bool) -> Any:
        def keep(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if self._mine():
                taken = args[0] if argument else (output if isinstance(output, Tensor) else output[0])
                setattr(self.tapes[index], name, self._flat(taken))

        return keep

    def _keep_embeddings(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self._mine():
            self.embeddings = self._flat(output if isinstance(output, Tensor) else output[0])

    def _keep_final(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if self._mine():
            self.final_input = self._flat(args[0])

    @contextlib.contextmanager
    def attached(self) -> Iterator[_Recorder]:
        handles = [module.register_forward_hook(hook) for module, hook in self.sites]
        handles += [module.register_forward_pre_hook(hook) for module, hook in self.final_site]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()


def _final_norm(session: Session, layer: int) -> nn.Module | None:
    """The norm hidden state `layer` is read after, beyond the layer below (a pre-LN model's final norm), or None;
    refuse a hidden state that is anything else than its layer's output (DeBERTa-v2's convolution beside layer 0)."""
    family, model = session.family, session.model
    layers = family.layers(model)
    for index in range(1, layer + 1):
        module = family.hidden_state_module(model, index)
        if module is layers[index - 1]:
            continue
        if index == layer and module is family.lens_norm(model):
            return family.hidden_state_module(model, index)  # the norm as a module (mypy narrows `module` to lens_norm's type)
        raise InputError(
            f"hidden state {index} of this {family.name} model is not its layer's output alone (a convolution over "
            "neighbouring tokens is added to it), so no head's direct share of it can be read; give an SAE on a model "
            "without it (conv_kernel_size 0, as DeBERTa-v3)",
            setting="sae",
        )
    return None


def _layer_norm(module: nn.Module, readout: Tensor) -> tuple[Tensor, Tensor | None, float]:
    """γ, β and ε of a LayerNorm over the readout's width, in its dtype; refused where the norm is of another kind."""
    width = readout.shape[-1]
    if not isinstance(module, nn.LayerNorm) or tuple(module.normalized_shape) != (width,):
        what = type(module).__name__
        raise InputError(f"this model's norm {what} is not a LayerNorm over the hidden size; its heads cannot be read", setting="sae")
    gamma = readout.new_ones(width) if module.weight is None else module.weight.detach().to(readout.dtype)
    beta = None if module.bias is None else module.bias.detach().to(readout.dtype)
    return gamma, beta, float(module.eps)


def _pull_back(readout: Tensor, norm: tuple[Tensor, Tensor | None, float], inputs: Tensor) -> tuple[Tensor, Tensor]:
    """The readout `[n, D]` on the norm's input rather than its output, linearised at each row's σ (`inputs` `[n, D]`):
    v with LN(z)·w = z·v + β·w for each part z of the input; and β·w, the norm's own share."""
    gamma, beta, eps = norm
    sigma = torch.sqrt(inputs.var(-1, unbiased=False, keepdim=True) + eps)
    scaled = gamma * readout / sigma
    shift = (readout @ beta) if beta is not None else readout.new_zeros(len(readout))
    return scaled - scaled.mean(-1, keepdim=True), shift


class _Sums:
    """Running float64 sums over the firing tokens of each part's contribution."""

    def __init__(self, layers: int, heads: int, device: torch.device) -> None:
        zeros = lambda *shape: torch.zeros(shape, dtype=torch.float64, device=device)  # noqa: E731
        self.heads, self.attention_bias, self.feed_forward = zeros(layers, heads), zeros(layers), zeros(layers)
        self.embeddings, self.norm_shift, self.preactivation, self.activation = zeros(), zeros(), zeros(), zeros()


def _contributions(session: Session, recorder: _Recorder, tokens: Tensor, readout: Tensor, sums: _Sums) -> None:
    """Add the direct contributions at the flat positions `tokens` for the readout W_enc[:, f] `[D]`."""
    family, heads = session.family, session.num_heads
    width = readout.shape[0]
    w = readout.double().expand(len(tokens), width)
    if recorder.final_norm is not None:
        assert recorder.final_input is not None
        w, shift = _pull_back(w, _layer_norm(recorder.final_norm, w), recorder.final_input[tokens].double())
        sums.norm_shift += shift.sum()
    kept = session.kept_heads
    for index in reversed(range(len(recorder.layers))):
        module, tape = recorder.layers[index], recorder.tapes[index]
        assert tape.context is not None and tape.feed_forward is not None, "the hooks see every layer below the SAE's"
        output_norm = family.output_norm(module)
        if output_norm is not None:
            assert tape.output_norm_input is not None
            w, shift = _pull_back(w, _layer_norm(output_norm, w), tape.output_norm_input[tokens].double())
            sums.norm_shift += shift.sum()
        sums.feed_forward[index] += (tape.feed_forward[tokens].double() * w).sum()
        attention_norm = family.attention_norm(module)
        if attention_norm is not None:
            assert tape.attention_norm_input is not None
            w, shift = _pull_back(w, _layer_norm(attention_norm, w), tape.attention_norm_input[tokens].double())
            sums.norm_shift += shift.sum()
        projection = family.attention_output(module)
        context = tape.context[tokens].double()  # [n, H'·d], H' the layer's heads (fewer in a pruned model)
        present = kept[index] if kept is not None and kept[index] is not None else None
        count = heads if present is None else len(present)
        if count:
            through = (w @ projection.weight.detach().double()) * context  # [n, H'·d]: each head's slice of W_O read by w
            per_head = through.view(len(tokens), count, -1).sum((0, 2))
            if present is None:
                sums.heads[index] += per_head
            else:
                sums.heads[index, present.to(per_head.device)] += per_head
        if projection.bias is not None:
            sums.attention_bias[index] += (w @ projection.bias.detach().double()).sum()
    assert recorder.embeddings is not None
    sums.embeddings += (recorder.embeddings[tokens].double() * w).sum()


def sae_heads(
    session: Session,
    directory: str | Path,
    sentences: Iterable[Sentence],
    *,
    feature: int,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[SAEHeads]]:
    """Each head's (and the other parts') mean direct contribution to feature `feature`'s pre-activation over the
    tokens of `sentences` where it fires, under `conditions`' head mask. Yields progress per batch, the last item
    carrying the result."""
    sae, config, notes = open_sae(session, directory)
    check_heads_layer(config.layer)
    check_feature(feature, sae.d_sae)
    layer, device = config.layer, session.device
    recorder = _Recorder(session, layer)
    sums = _Sums(layer, session.num_heads, device)
    readout = sae.W_enc.detach()[:, feature]
    sae_bias = float(sae.b_enc.detach()[feature] - sae.b_dec.detach() @ readout)
    family = session.family
    post_ln = any(family.output_norm(module) is not None or family.attention_norm(module) is not None for module in recorder.layers)
    read = tokens = firing = truncated = 0
    with recorder.attached():
        for batch in token_batches(
            session,
            numbered(sentences, job.seed, 0.0, held=None),
            layer,
            include_special=config.include_special,
            conditions=conditions,
            job=job,
        ):
            with torch.no_grad():
                preactivations = sae.preactivations(batch.states)
                values, indices = sae.select(preactivations)
                fires = ((indices == feature) & (values > 0)).any(1)
                chosen = torch.nonzero(fires).flatten()
                if len(chosen):
                    sums.preactivation += preactivations[chosen, feature].double().sum()
                    sums.activation += values[chosen][indices[chosen] == feature].double().sum()
                    _contributions(session, recorder, batch.flat[chosen], readout, sums)
            read += len(batch.items)
            tokens += len(batch.states)
            firing += len(chosen)
            truncated += int((batch.inputs["attention_mask"].sum(1) >= session.max_length).sum())
            yield Progress("reading what writes the feature", read)
    if read == 0:
        raise InputError("no sentences to read the feature on; the corpus is empty", setting="data")
    if not firing:
        raise InputError(
            f"feature {feature} never fired on these {tokens:,} tokens, so nothing writes it here; "
            "pick one that `sae features` shows firing, or give more data",
            setting="feature",
        )
    mean = lambda total: total.cpu().numpy() / firing  # noqa: E731
    result = SAEHeads(
        directory=str(directory),
        model=session.source,
        layer=layer,
        feature=feature,
        d_sae=sae.d_sae,
        sentences=read,
        tokens=tokens,
        firing=firing,
        activation=float(mean(sums.activation)),
        preactivation=float(mean(sums.preactivation)),
        heads=mean(sums.heads),
        embeddings=float(mean(sums.embeddings)),
        attention_bias=mean(sums.attention_bias),
        feed_forward=mean(sums.feed_forward),
        norm_shift=float(mean(sums.norm_shift)),
        sae_bias=sae_bias,
        linearisation=LINEARISATION_POST_LN if post_ln else LINEARISATION_PRE_LN,
        mask="" if conditions is None else conditions.mask.spec(),
        truncated=truncated,
        notes=notes,
    )
    yield Progress("reading what writes the feature", read, read, result=result)
