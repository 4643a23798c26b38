"""Context mixing: how much of token j ends up in token i, layer by layer.

Attention weights say where a head looks, not how much of another token ends up in a token's
representation. Six measures, in one frame (analyses.mixing.results.DEFINITIONS says each
as the outputs do); all of them read one forward pass of the input, under any head mask:

- `attention`: the mean over heads of the weights; `norms`: Σ_h ‖α^h_ij f_h(x_j)‖ (Kobayashi et
  al. 2020, model.norms), from the same pass;
- `rollout` (Abnar & Zuidema 2020): the product of Â_l = ½·mean_h A_l + ½·I (analyses.attribution
  reads one row of it);
- `flow` (Abnar & Zuidema 2020): the maximum flow from input token j to token i of layer l through
  the layered graph with Â_l as capacities, each (l, i, j) its own max-flow problem, solved exactly
  on capacities quantised to 2^-30 (scipy's Dinic: integer capacities), which puts each flow within
  T·L·2^-30 of the real-valued one. L·T² problems, many to a solver call as disjoint copies of
  their graphs (`attention_flow`): a 32-token sentence on 6 layers takes a couple of seconds; the
  first step says how long a longer one will take, and the work stops between calls once cancelled;
- `value-zeroing` (Mohebbi et al. 2023) and `alti` (Ferrando et al. 2022), from one decomposition.
  A layer's attention block adds to token i, beside the residual x_i and the bias b_O,
  g_ij = Σ_h α^h_ij f_h(x_j) for each token j, with f_h(x_j) = v^h_j W_O^h and v_j = x_j W_V + b_V
  (the values as the model computed them, read off the value projection). So its residual sum is
  s_i = x_i + Σ_j g_ij + b_O, and zeroing v_j in every head changes it to s_i − g_ij and nothing
  else: the weights come from queries and keys, which stay. Value zeroing then runs the rest of
  the layer (LayerNorm, feed-forward, LayerNorm: position-wise, `Family.after_attention`) on all
  T² rows s_i − g_ij at once, with s_i beside them, and scores 1 − cos. This is the paper's
  definition computed without running attention T times: what the T variants share is not
  recomputed. ALTI takes T_i(x_j) = L_i(g_ij + [i = j] x_i), L_i the block's LayerNorm
  linearised at token i's own σ_i (as nn.LayerNorm computes it: √(biased variance + ε)), and y_i
  = LayerNorm(s_i), so that Σ_j T_i(x_j) + L_i(b_O) + β = y_i exactly; its score is
  max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁) (the authors' code: bias of W_V in each token's term, b_O and
  β in y_i alone). Pre-LN blocks (ModernBERT) have no LayerNorm after them: there y_i = s_i and
  T_i(x_j) = g_ij + [i = j] x_i, exact with no linearisation (each token's values come through its
  own input norm, which reads that token alone).

Under a head mask the pass reports each head's weights as it contributed them (zero: none;
uniform: the uniform ones), so every measure is the masked model's. A layer whose every head is
off mixes nothing: its rows are the identity's.

Any per-layer measure is rolled out by the product of its row-normalised layers (as Mohebbi et al.
and Ferrando et al. do): `rolled[l] = C_l ⋯ C_0`.

Over a corpus (`mixing_agreement`) the default is the measures that cost a bare forward or two
(mixing_results.CORPUS_DEFAULT: attention, norms, ALTI, rollout). Value zeroing (about 13 bare
forwards) and flow (growing as T⁴: about 70 bare forwards over English web text) run when named,
and their time on the first batch, scaled by each one's work in the first chunk's batches
(`costly_work`), is said before the rest of the corpus runs (`CostEstimate`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.attention.headstats import PunctuationIds, punctuation_ids
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.mixing.results import (
    CORPUS_DEFAULT,
    COSTLY,
    METHODS,
    PER_LAYER,
    CostEstimate,
    Mixing,
    MixingAgreement,
    padded_token_classes,
)
from bertscope.analyses.streaming import CHUNK, CorpusBatches, item_lengths
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.corpus import Sentence
from bertscope.model.device import float64_device, upload
from bertscope.model.lagged import LaggedReads
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding

if TYPE_CHECKING:
    from bertscope.model.session import Session

__all__ = [
    "CORPUS_DEFAULT",
    "METHODS",
    "CostEstimate",
    "Mixing",
    "MixingAgreement",
    "batch_mixings",
    "check_methods",
    "context_mixing",
    "mixing_agreement",
    "mixings",
]

ROWS_PER_CHUNK = 8192  # (i, j) rows through the rest of a layer at a time: value zeroing's T² rows, ALTI's T²·D terms
MIXING_SQUARE = 16384  # B·T² of a corpus batch: its B·T²·D attention terms (25 MB at MiniLM's 384) and B·L·H·T² weights
MAPS_SQUARE = 65536  # B·T² of a corpus batch without value zeroing or ALTI: its [L, B, T, T] float64 maps (3 MB at 6 layers)
FLOW_SCALE = 2**30  # capacities in units of 2^-30: integers for scipy's max-flow, each flow within T·L·2^-30 of the real one
FLOW_ESTIMATE_S = 10.0  # flows expected to take longer than this are said so before they start
FLOW_EDGES_PER_CALL = 2**16  # max-flow problems solved together in one call, as disjoint copies: edges of one call
FLOW_CALL_EDGES = 3000  # scipy's work around one max-flow call, in edges of its solver's (0.5 ms against 160 ns an edge)
FLOW_TIMING_S = 1.0  # a corpus run's first batch times flow over its inputs until this long has passed, or the batch ends


def check_methods(methods: Iterable[str]) -> tuple[str, ...]:
    """The methods named, each one of METHODS, in METHODS' order."""
    chosen = list(methods)
    unknown = [method for method in chosen if method not in METHODS]
    if unknown or not chosen:
        what = f"unknown context-mixing method {unknown[0]!r}" if unknown else "no context-mixing method named"
        raise InputError(f"{what}; use one of: {', '.join(METHODS)}", setting="method")
    return tuple(method for method in METHODS if method in chosen)


def context_mixing(
    session: Session,
    text: str | Encoding,
    pair: str | None = None,
    *,
    method: str = "value-zeroing",
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[Mixing]]:
    """One measure over one input: progress, the last record carrying the `Mixing`."""
    (method,) = check_methods([method])
    found = yield from relay(mixings(session, text, pair, methods=(method,), conditions=conditions, job=job))
    if found is not None:
        yield Progress("done", 1, 1, found[method])


def mixings(
    session: Session,
    text: str | Encoding,
    pair: str | None = None,
    *,
    methods: Sequence[str] = METHODS,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[dict[str, Mixing]]]:
    """Several measures over one input from one forward pass (the explorer's entry): the last record carries
    `{method: Mixing}`."""
    encoding = text if isinstance(text, Encoding) else session.encode(text, pair)
    found = yield from relay(batch_mixings(session, [encoding], methods=methods, conditions=conditions, job=job))
    if found is not None:
        yield Progress("done", 1, 1, found[0])


def batch_mixings(
    session: Session,
    encodings: Sequence[Encoding],
    *,
    methods: Sequence[str] = METHODS,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[list[dict[str, Mixing]]]]:
    """Several measures over a batch of inputs from one padded forward pass, under `conditions` (None: the model as it
    is): the last record carries each input's `{method: Mixing}` (`_measure_batch`)."""
    chosen = check_methods(methods)
    head_mask, ablation = _mask_of(session, conditions)
    found = yield from relay(_measure_batch(session, encodings, chosen, head_mask, ablation, job.cancel))
    if found is None:
        return
    measured, _ = found
    read = {
        method: (None if per_layer is None else per_layer.cpu().numpy(), rolled.cpu().numpy())
        for method, (per_layer, rolled) in measured.items()
    }
    common: dict[str, Any] = dict(mask=head_mask, ablation=ablation, notes=_notes(session, head_mask, chosen))
    results = []
    for index, encoding in enumerate(encodings):
        inside = (slice(None), index, slice(len(encoding)), slice(len(encoding)))  # [L, T, T] of this input
        results.append(
            {
                method: Mixing(
                    method=method,
                    encoding=encoding,
                    rolled=rolled[inside],
                    per_layer=None if per_layer is None else per_layer[inside],
                    **common,
                )
                for method, (per_layer, rolled) in read.items()
            }
        )
    yield Progress("done", 1, 1, results)


Measured = dict[str, tuple[Tensor | None, Tensor]]  # method: (per-layer maps or None, rolled out), each [L, B, T, T] float64
Timings = dict[str, tuple[float, list[int]]]  # costly method: (seconds, the lengths of the inputs timed)


def _mask_of(session: Session, conditions: Conditions | None) -> tuple[HeadMask, Ablation]:
    """The head mask and ablation the passes run under (the model as it is without `conditions`)."""
    return (session.mask(None), "zero") if conditions is None else (conditions.mask, conditions.ablation)


def _measure_batch(
    session: Session,
    encodings: Sequence[Encoding],
    chosen: tuple[str, ...],
    mask: HeadMask,
    ablation: Ablation,
    cancel: threading.Event | None,
    estimate: Callable[[Timings], CostEstimate] | None = None,
) -> Iterator[Progress[tuple[Measured, Tensor]]]:
    """Every chosen measure of a batch of inputs, as padded `[L, B, T, T]` float64 tensors in which each input's padding
    rows are the identity's and its padding columns zero (`_Padded.within`), so that rows normalised and products rolled
    out over the batch are each input's own; and, beside them, `[B, T]`: which positions are each input's own tokens.
    Everything runs on the model's device (model.device's `float64_device`) and stays there; flow alone is solved
    per input on the host.

    With `estimate`, each costly measure chosen (COSTLY) is timed: value zeroing over the batch, flow over its inputs
    until FLOW_TIMING_S has passed; once all are, a record carries `estimate(timings)` as its `partial`."""
    run = _Pass(session, encodings, mask, ablation, norms="norms" in chosen, values=bool({"value-zeroing", "alti"} & set(chosen)))
    padded = _Padded.of(encodings, run.device)
    maps: dict[str, Tensor] = {}  # each per-layer measure's raw maps, [L, B, T, T]
    if {"attention", "rollout", "flow"} & set(chosen):
        attention = run.head_means()
    if "attention" in chosen:
        maps["attention"] = attention
    if "norms" in chosen:
        maps["norms"] = run.summed_norms()
    timings: Timings = {}  # each costly measure's, timed once
    timed = {method for method in COSTLY if method in chosen} if estimate is not None else set()

    def said() -> list[Progress[Any]]:
        """The estimate's record, when the measure just timed was the last to be."""
        return [Progress("sentences", 0, partial=estimate(timings))] if estimate is not None and set(timings) == timed else []

    lengths = [len(encoding) for encoding in encodings]
    for method, measure in (("value-zeroing", _value_zeroing), ("alti", _alti)):
        if method not in chosen:
            continue
        matrices: list[Tensor] = []
        started = time.perf_counter()
        for layer in range(session.num_layers):
            if cancel is not None and cancel.is_set():
                return
            matrices.append(measure(run, layer))
            yield Progress(method, layer + 1, session.num_layers)
        maps[method] = torch.stack(matrices).to(run.device, torch.float64)
        if method in timed:
            timings[method] = (_finished_seconds(started, run.device), lengths)
            yield from said()
    layers: dict[str, Tensor] = {}  # what is rolled out: the per-layer measures' rows normalised, and rollout's Â
    if maps:
        layers.update(zip(maps, normalised_rows(padded.within(torch.stack(list(maps.values()), dim=1))).unbind(1)))
    if {"rollout", "flow"} & set(chosen):
        residual = _residual_attention(padded.within(attention))
    if "rollout" in chosen:
        layers["rollout"] = residual
    measured: Measured = {}
    if layers:
        rolled = rolled_out(torch.stack(list(layers.values()), dim=1))  # [L, K, B, T, T]: every measure's products at once
        for index, (method, normalised) in enumerate(layers.items()):
            measured[method] = (None if method == "rollout" else normalised, rolled[:, index])
    if "flow" in chosen:
        on_host = residual.cpu().numpy()
        flows = np.zeros_like(on_host)
        started = time.perf_counter()
        for index, length in enumerate(lengths):
            flow = yield from relay(attention_flow(on_host[:, index, :length, :length], cancel))
            if flow is None:
                return
            flows[:, index, :length, :length] = flow
            elapsed = time.perf_counter() - started
            if "flow" in timed and "flow" not in timings and (elapsed >= FLOW_TIMING_S or index == len(lengths) - 1):
                timings["flow"] = (elapsed, lengths[: index + 1])
                yield from said()
        measured["flow"] = (None, padded.within(torch.as_tensor(flows, device=run.device)))
    yield Progress("done", 1, 1, ({method: measured[method] for method in chosen}, padded.real))


def _finished_seconds(started: float, device: torch.device) -> float:
    """Seconds since `started` (perf_counter) once the work queued on `device` is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def costly_work(method: str, lengths: Sequence[int], layers: int) -> float:
    """What a costly measure's time on a batch of inputs of these lengths grows with, in units of its own: value
    zeroing's rows through the rest of a layer (each input's T + 1 variants of its T tokens, padded to the longest:
    every layer alike); flow's max-flow edges of each input on its own, with each solver call's work (FLOW_CALL_EDGES)
    added, and a call's worth for the input's setup (`attention_flow`: about T⁴ over its L·T² problems)."""
    if method == "value-zeroing":
        return float(len(lengths) * max(lengths) * (max(lengths) + 1))
    work = 0
    for length in lengths:
        edges = [length * length * _copy_edges(layer, length) for layer in range(1, layers)]
        work += sum(edges) + FLOW_CALL_EDGES * (1 + sum(-(-count // FLOW_EDGES_PER_CALL) for count in edges))
    return float(work)


def cost_estimate(timings: Timings, batches: Sequence[Sequence[int]], layers: int, whole: bool) -> CostEstimate:
    """Each timed measure's seconds scaled from the inputs it was timed on to the `batches` (their inputs' lengths, as
    planned) by its work in them (costly_work)."""
    seconds = {}
    for method, (spent, timed) in timings.items():
        work = sum(costly_work(method, lengths, layers) for lengths in batches)
        seconds[method] = spent * work / costly_work(method, timed, layers)
    covered = sum(len(lengths) for lengths in batches)
    return CostEstimate(seconds={method: seconds[method] for method in METHODS if method in seconds}, covered=covered, whole=whole)


@dataclass(frozen=True)
class _Padded:
    """Where a padded batch's inputs are, made once a batch on the device its maps are on: `real` `[B, T]`, each input's
    own tokens; `inside` `[B, T, T]`, its own cells (i, j); `outside` `[B, T, T]` float64, the identity on its padding
    rows, zero elsewhere."""

    real: Tensor
    inside: Tensor
    outside: Tensor

    @classmethod
    def of(cls, encodings: Sequence[Encoding], device: torch.device) -> _Padded:
        lengths = upload(np.array([len(encoding) for encoding in encodings], dtype=np.int64), device)
        real = torch.arange(max(len(encoding) for encoding in encodings), device=device) < lengths[:, None]  # padded on the right
        inside = real[:, :, None] & real[:, None, :]
        outside = torch.diag_embed((~real).double())
        return cls(real, inside, outside)

    def within(self, maps: Tensor) -> Tensor:
        """`[..., B, T, T]` float64 maps, each input's kept within its own tokens: its padding columns zero and its
        padding rows the identity's (a padding token then takes nothing and gives nothing)."""
        return torch.where(self.inside, maps, self.outside)


def normalised_rows(matrix: Tensor) -> Tensor:
    """Rows scaled to sum to 1; a row with nothing in it (every head of its layer switched off) becomes the identity's:
    the token then takes nothing from the others."""
    totals = matrix.sum(-1, keepdim=True)
    identity = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    return torch.where(totals > 0, matrix / totals, identity)  # where a total is 0 its NaNs are not taken


def rolled_out(per_layer: Tensor) -> Tensor:
    """`[L, ..., T, T]`: the product C_l ⋯ C_0 of row-normalised per-layer matrices, from the input to each layer's
    output (every matrix of a layer multiplied in one batched product)."""
    flat = per_layer.reshape(len(per_layer), -1, *per_layer.shape[-2:])  # [L, N, T, T]
    rolled = [flat[0]]
    for matrices in flat[1:]:
        rolled.append(torch.bmm(matrices, rolled[-1]))
    return torch.stack(rolled).view(per_layer.shape)


def _notes(session: Session, mask: HeadMask, chosen: tuple[str, ...]) -> tuple[str, ...]:
    """What the outputs say beside their numbers: layers that mix nothing under the mask, ALTI on a pre-LN model."""
    notes = []
    layers = range(session.num_layers)
    off = [layer for layer in layers if all(mask.is_masked(layer, head) for head in range(session.num_heads))]
    if off and set(chosen) - {"rollout", "flow"}:
        notes.append(
            f"every head of layer{'s' if len(off) > 1 else ''} {', '.join(map(str, off))} is switched off, so no token takes "
            "anything from another there: its rows are the identity's"
        )
    if "alti" in chosen and session.family.attention_norm(session.layer_modules[0]) is None:
        notes.append(
            f"{session.family.name} is pre-LN: ALTI's terms are the attention's per-token outputs and the residual, with no "
            "LayerNorm after the block to linearise"
        )
    return tuple(notes)


# --- the pass every measure reads ----------------------------------------------------------------


class _Pass:
    """One forward pass of a batch of inputs (padded on the right) under the mask: hidden states, each head's weights
    (as it contributed them), the norms when asked, and each layer's values read off its value projection. A padding
    key has weight 0 (the model's mask), so it moves nothing into any token; padding rows are computed and dropped."""

    def __init__(
        self, session: Session, encodings: Sequence[Encoding], mask: HeadMask, ablation: Ablation, *, norms: bool, values: bool
    ) -> None:
        self.session = session
        self.device = float64_device(session.device)  # where the measures' float64 arithmetic runs
        family = session.family
        modules = session.layer_modules
        self.values: dict[int, Tensor] = {}
        kept_norms: dict[int, Tensor] = {}
        handles = []

        def keep(index: int, part: slice | None) -> Any:
            def hook(_module: torch.nn.Module, _args: tuple[Any, ...], output: Tensor) -> None:
                self.values[index] = (output if part is None else output[..., part]).detach()

            return hook

        with session.lock, torch.inference_mode():
            try:
                if values:
                    for index, layer in enumerate(modules):
                        module, part = family.values(layer)
                        handles.append(module.register_forward_hook(keep(index, part)))
                outputs = session.run(
                    session.padded_tensors(encodings),
                    gates=session.gate_tensor(mask),
                    ablation=ablation,
                    attentions=True,
                    hidden_states=True,
                    encoder_only=True,
                    on_norms=(lambda layer, maps: kept_norms.__setitem__(layer, maps)) if norms else None,
                )
            finally:
                for handle in handles:
                    handle.remove()
        self.hidden = list(outputs.hidden_states)  # L + 1 of [B, T, D]
        self.weights = list(outputs.attentions)  # L of [B, H, T, T], heads in their original numbers
        self.norms = [kept_norms[layer] for layer in range(len(modules))] if norms else None

    def head_means(self) -> Tensor:
        """`[L, B, T, T]`: each layer's weights averaged over its heads, in float64."""
        return torch.stack(self.weights).to(self.device, torch.float64).mean(2)

    def summed_norms(self) -> Tensor:
        """`[L, B, T, T]`: each layer's value-weighted norms added over its heads, in float64."""
        assert self.norms is not None, "the pass was run without norms"
        return torch.stack(self.norms).to(self.device, torch.float64).sum(2)

    def decomposition(self, layer: int) -> tuple[Tensor, Tensor, Tensor]:
        """(g `[B·T, T, D]`, x `[B·T, D]`, s `[B·T, D]`), a row for each token i of each input: token j's part g_ij of
        the attention block's output at token i, the residual entering the layer, and the block's residual sum
        s_i = x_i + Σ_j g_ij + b_O (module docstring)."""
        session = self.session
        module = session.layer_modules[layer]
        projection = session.family.attention_output(module)
        weight = projection.weight.detach().float()  # [D, H·d], the heads side by side
        values = self.values[layer].float()  # [B, T, H·d]
        weights = self.weights[layer].float()  # [B, H, T, T]
        kept = session.kept_heads[layer] if session.kept_heads is not None else None
        if kept is not None:  # a pruned layer: its remaining heads, in the order its weights hold them
            weights = weights.index_select(1, kept.to(weights.device))
        heads = weights.shape[1]
        batch, length, width = values.shape
        if heads == 0:
            moved = values.new_zeros((batch, length, length, weight.shape[0]))
        else:
            split = width // heads
            per_head = torch.einsum("bthd,ohd->bhto", values.view(batch, length, heads, split), weight.view(-1, heads, split))
            moved = torch.einsum("bhij,bhjo->bijo", weights, per_head)  # [B, T, T, D]
        entering = self.hidden[layer].float().reshape(batch * length, -1)
        bias = projection.bias.detach().float() if projection.bias is not None else weight.new_zeros(weight.shape[0])
        moved = moved.reshape(batch * length, length, -1)
        return moved, entering, entering + moved.sum(1) + bias


def _chunks(rows: int, length: int) -> Iterator[slice]:
    """`rows` query rows (token i of each input) a chunk at a time, so that a chunk's (i, j) rows stay under
    ROWS_PER_CHUNK."""
    step = max(1, ROWS_PER_CHUNK // max(length, 1))
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))


def _value_zeroing(run: _Pass, layer: int) -> Tensor:
    """`[B, T, T]`: 1 − cos between token i's layer output and the same with token j's values zeroed, as ½‖â − b̂‖² of
    the unit vectors (the same number, without 1 − cos's cancellation in float32)."""
    session = run.session
    moved, _, summed = run.decomposition(layer)
    rows, length = moved.shape[:2]
    dtype = session.loaded.dtype
    scores = []
    with session.lock, torch.inference_mode():
        for chunk in _chunks(rows, length):
            block = summed[chunk]  # [t, D]
            variants = torch.cat([block[:, None], block[:, None] - moved[chunk]], dim=1)  # [t, 1 + T, D]: as it is, then ¬j
            out = session.family.after_attention(session.model, layer, variants.to(dtype)).float()
            unit = out / out.norm(dim=-1, keepdim=True).clamp(min=1e-30)
            changed = 0.5 * (unit[:, 1:] - unit[:, :1]).square().sum(-1)
            scores.append(torch.where(moved[chunk].abs().amax(-1) > 0, changed, 0.0))  # nothing moved: no change, not noise
    return torch.cat(scores).view(-1, length, length)


def _alti(run: _Pass, layer: int) -> Tensor:
    """`[B, T, T]`: ALTI's max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁) (module docstring)."""
    session = run.session
    moved, entering, summed = run.decomposition(layer)
    rows, length = moved.shape[:2]
    norm = session.family.attention_norm(session.layer_modules[layer])
    scores = []
    with session.lock, torch.inference_mode():
        if norm is None:
            output = summed
        else:
            output = norm(summed.to(session.loaded.dtype)).float()
            gain = cast(Tensor, norm.weight).detach().float()
            epsilon = float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-12)))
            spread = (summed.var(-1, unbiased=False) + epsilon).sqrt()  # σ_i as the LayerNorm computes it
        for chunk in _chunks(rows, length):
            terms = moved[chunk]  # [t, T, D], changed in place: each chunk's own
            index = torch.arange(chunk.start, chunk.stop, device=terms.device)
            terms[index - chunk.start, index % length] += entering[chunk]  # the residual: token i's own term
            if norm is not None:
                terms.sub_(terms.mean(-1, keepdim=True)).mul_(gain / spread[chunk, None, None])
            target = output[chunk, None]  # [t, 1, D]
            distance = terms.sub_(target).abs_().sum(-1)  # ‖y_i − T_i(x_j)‖₁
            scores.append((target.abs().sum(-1) - distance).clamp(min=0))
    return torch.cat(scores).view(-1, length, length)


def _residual_attention(means: Tensor) -> Tensor:
    """`[L, ..., T, T]`: rollout's Â_l = ½·(mean over heads of A_l) + ½·I, rows renormalised, from the means over heads."""
    mixed = 0.5 * means
    mixed.diagonal(dim1=-2, dim2=-1).add_(0.5)
    return mixed / mixed.sum(-1, keepdim=True)


# --- attention flow ---------------------------------------------------------------------------------


def attention_flow(residual: np.ndarray, cancel: threading.Event | None = None) -> Iterator[Progress[np.ndarray]]:
    """`[L, T, T]`: for each layer l, the maximum flow from input token j to token i of layer l's output through the
    graph whose edge from token a of hidden state k+1 to token b of hidden state k carries `residual[k][a, b]`, rows
    normalised. The first record says how long the L·T² max-flow problems are expected to take.

    Layer 0's flows are its capacities (one edge joins the two tokens). Above it the problems are solved many at a
    time: disjoint copies of the graph in one max-flow call, a super-source feeding the edges out of each copy's
    source token and each copy's sink token's in-edges draining to a super-sink (the graph's other tokens of the top
    and bottom hidden states carry no flow from that source to that sink). A maximum flow of disjoint parts is a
    maximum flow of each, so each copy's share of the super-source's flow is its own problem's answer, the same
    integer as solving it alone: one scipy call per FLOW_EDGES_PER_CALL edges instead of one per problem (scipy's
    work around each call, not the solver, was most of the cost).
    """
    layers, length, _ = residual.shape
    capacities = np.floor(residual * FLOW_SCALE).astype(np.int32)
    flows = np.zeros((layers, length, length))
    flows[0] = capacities[0]
    pairs = np.stack(np.divmod(np.arange(length * length), length), axis=1)  # (source i, sink j) of every problem
    calls = [  # deepest first, so that the first call's time says how long the rest take
        (layer, chunk)
        for layer in reversed(range(1, layers))
        for chunk in np.array_split(pairs, -(-len(pairs) * _copy_edges(layer, length) // FLOW_EDGES_PER_CALL))
    ]
    edges = [len(chunk) * _copy_edges(layer, length) for layer, chunk in calls]
    stage = "attention flow"
    for done, (layer, chunk) in enumerate(calls):
        if cancel is not None and cancel.is_set():
            return
        started = time.perf_counter()
        flows[layer, chunk[:, 0], chunk[:, 1]] = _copies_flow(capacities, layer, chunk)
        if done == 0:
            expected = (time.perf_counter() - started) * sum(edges) / edges[0]
            stage = f"attention flow (about {expected:.0f} s)" if expected >= 1 else stage
            yield Progress(stage, 1, len(calls), partial={"expected_seconds": expected})
        else:
            yield Progress(stage, done + 1, len(calls))
    yield Progress(stage, len(calls), len(calls), normalised_rows(torch.as_tensor(flows / FLOW_SCALE)).numpy())


def _copy_edges(layer: int, length: int) -> int:
    """The edges of one (source, sink) problem of `layer` ≥ 1: the source's row, full layers between, the sink's column."""
    return 2 * length + (layer - 1) * length * length


def _copies_flow(capacities: np.ndarray, layer: int, chunk: np.ndarray) -> np.ndarray:
    """The maximum flow of each (source i, sink j) in `chunk` `[C, 2]` at `layer` ≥ 1, from one call on C disjoint
    copies of its graph. Node 0 is the super-source, 1 the super-sink, and copy c's token a of hidden state k
    (1 ≤ k ≤ layer) is node 2 + (c·layer + k − 1)·T + a."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import maximum_flow

    length, copies = capacities.shape[-1], len(chunk)
    nodes = 2 + copies * layer * length
    first = 2 + np.arange(copies)[:, None] * (layer * length) + np.arange(length)  # [C, T]: hidden state 1 of each copy

    def state(k: int) -> npt.NDArray[np.int64]:
        return cast(npt.NDArray[np.int64], first + (k - 1) * length)

    tails = [np.zeros(copies * length, dtype=np.int64)]  # the super-source gives what source i gives to hidden state `layer`
    heads = [state(layer).reshape(-1)]
    weights = [capacities[layer][chunk[:, 0]].reshape(-1)]
    for k in range(1, layer):  # token a of hidden state k+1 gives to token b of hidden state k
        tails.append(np.repeat(state(k + 1), length, axis=1).reshape(-1))
        heads.append(np.tile(state(k), (1, length)).reshape(-1))
        weights.append(np.broadcast_to(capacities[k].reshape(-1), (copies, length * length)).reshape(-1))
    tails.append(state(1).reshape(-1))  # hidden state 1 gives to the super-sink what it gives to sink j
    heads.append(np.ones(copies * length, dtype=np.int64))
    weights.append(capacities[0][:, chunk[:, 1]].T.reshape(-1))
    graph = csr_array((np.concatenate(weights), (np.concatenate(tails), np.concatenate(heads))), shape=(nodes, nodes))
    flow = maximum_flow(graph, 0, 1, method="dinic").flow
    start, stop = flow.indptr[0], flow.indptr[1]  # the super-source's edges, each into one copy
    return np.bincount((flow.indices[start:stop] - 2) // (layer * length), weights=flow.data[start:stop], minlength=copies)


# --- over a corpus ------------------------------------------------------------------------------------


def mixing_agreement(
    session: Session,
    sentences: Iterable[Sentence],
    *,
    methods: Sequence[str] = CORPUS_DEFAULT,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[MixingAgreement]]:
    """Every pair of methods' agreement and each method's shares per layer, streamed over a corpus (MixingAgreement).

    Sentences are read and encoded a chunk at a time (streaming.CorpusBatches) and measured a batch at a time, in
    one padded pass (`_measure_batch`; B·T² capped at MIXING_SQUARE with value zeroing or ALTI, so that their B·T²·D
    terms stay small, at MAPS_SQUARE without); each sentence is reduced to sums at once, so memory is flat in the corpus.
    By default the measures that cost about a bare forward or two (CORPUS_DEFAULT); value zeroing and flow, when named,
    are timed on the first batch, and a record then carries a `CostEstimate` for the first chunk's sentences as `partial`.
    """
    chosen = check_methods(methods)
    head_mask, ablation = _mask_of(session, conditions)
    punctuation = punctuation_ids(session.tokenizer)
    count, layers = len(chosen), session.num_layers
    sums: dict[str, Any] = {
        "agreement": np.zeros((count, count)),
        "agreement_counts": np.zeros((count, count)),
        "layer_shares": np.zeros((count, layers, 4)),
        "rolled_shares": np.zeros((count, layers, 4)),
        "sentences": 0,
        "tokens": 0,
        "truncated": 0,
    }
    batches: CorpusBatches[Sentence, list[Encoding]] = CorpusBatches(
        sentences,
        lambda chunk: session.encode_many([sentence.text for sentence in chunk], [sentence.pair for sentence in chunk]),
        lengths=item_lengths,
        job=job,
        max_square=MIXING_SQUARE if {"value-zeroing", "alti"} & set(chosen) else MAPS_SQUARE,
    )
    reads = LaggedReads()  # each batch's sums are added once the next batch's pass is queued (on a GPU)
    for batch in batches:
        encodings = batch.take(batch.encoded)
        estimate = None
        if batch.number == 0:  # the first chunk's batches, to scale the first batch's times to
            lengths = [len(encoding) for encoding in batch.encoded]
            planned = [[lengths[index] for index in indices] for indices in batches.plan(batch.encoded)]
            whole = len(batch.chunk) < CHUNK  # the first chunk was the corpus's last

            def estimate(timings: Timings, planned: list[list[int]] = planned, whole: bool = whole) -> CostEstimate:
                return cost_estimate(timings, planned, layers, whole)

        found = yield from relay(_measure_batch(session, encodings, chosen, head_mask, ablation, job.cancel, estimate))
        if found is None:
            return
        _add_batch(sums, reads, *found, encodings, punctuation)
        yield Progress("sentences", sums["sentences"], partial=_agreement(chosen, sums, head_mask, ablation))
    if batches.cancelled:
        return
    reads.flush()
    sums = distributed.sum_across(sums)
    if sums["sentences"] == 0:
        raise InputError("no sentences to analyse; the corpus is empty", setting="data")
    result = _agreement(chosen, sums, head_mask, ablation)
    yield Progress("sentences", sums["sentences"], result=result)


def _add_batch(
    sums: dict[str, Any], reads: LaggedReads, measured: Measured, real: Tensor, encodings: Sequence[Encoding], punctuation: PunctuationIds
) -> None:
    """A batch's agreement (each sentence's mean over its rows, added) and shares (each sentence's mean, added),
    computed where the maps are and read from there at once (`reads`: one batch late on a GPU)."""
    rolled = torch.stack([rolled for _, rolled in measured.values()])  # [M, L, B, T, T]
    per_layer = {index: maps for index, (maps, _) in enumerate(measured.values()) if maps is not None}  # not flow, rollout
    ids = np.concatenate([encoding.input_ids for encoding in encodings])
    marks = np.split(punctuation(ids), np.cumsum([len(encoding) for encoding in encodings])[:-1])  # each input's
    special = [encoding.special for encoding in encodings]
    classes = upload(padded_token_classes(marks, special, real.shape[1]).astype(np.float64), rolled.device)
    correlations = _spearman_between(rolled[:, -1], real)  # [M, M, B, T]: each pair of methods, each row at the last layer
    rho = correlations.nansum(-1) / correlations.isnan().logical_not().sum(-1)  # [M, M, B]: the mean over rows not constant
    rho.diagonal().fill_(1.0)  # a method agrees with itself, constant rows too
    counted = rho.isnan().logical_not()  # (no correlation is infinite)
    shares = _summed_shares(torch.cat([rolled, torch.stack(list(per_layer.values()))]) if per_layer else rolled, classes, real)
    found = {
        "agreement": rho.nansum(-1),
        "agreement_counts": counted.sum(-1, dtype=torch.float64),
        "shares": shares,  # [M + P, L, 4]: every method's rolled out, then the per-layer methods' own
    }
    shapes = {name: tensor.shape for name, tensor in found.items()}
    rolled_count, layer_methods = len(rolled), list(per_layer)
    sentences, tokens = len(encodings), sum(len(encoding) for encoding in encodings)
    truncated = sum(encoding.truncated > 0 for encoding in encodings)

    def add(flat: np.ndarray) -> None:
        read = _split(flat, shapes)
        sums["agreement"] += read["agreement"]
        sums["agreement_counts"] += read["agreement_counts"]
        sums["rolled_shares"] += read["shares"][:rolled_count]
        sums["layer_shares"][layer_methods] += read["shares"][rolled_count:]
        sums["sentences"] += sentences
        sums["tokens"] += tokens
        sums["truncated"] += truncated

    reads.put(torch.cat([tensor.reshape(-1) for tensor in found.values()]), use=add)  # float64 tensors: one read, not one each


def _spearman_between(matrices: Tensor, real: Tensor) -> Tensor:
    """`[M, M, B, T]` for M padded batches of maps `[M, B, T, T]`: the Spearman correlation of row i of matrix a with
    row i of matrix b, for every pair (a, b) at once (each matrix ranked once), input b's rows ranked over its own
    columns (`real`, `[B, T]`); NaN where either row is constant and on padding rows."""
    ranked = _centred_ranks(matrices, real)
    unit: Tensor = ranked / torch.linalg.vector_norm(ranked, dim=-1, keepdim=True)  # 0 / 0 where a row is constant: NaN
    return (unit[:, None] * unit[None]).sum(-1)


def _centred_ranks(values: Tensor, real: Tensor) -> Tensor:
    """`[..., B, T, T]`: each row's ranks (from 1; ties take their mean rank, as scipy's `rankdata`) over input b's own
    columns, less their mean (n + 1) / 2; 0 in padding columns (ranked after every real one and dropped) and in padding
    rows."""
    columns = real[:, None, :]  # [B, 1, T]
    kept = values.masked_fill(~columns, torch.inf)
    ordered = kept.sort(-1).values
    # a value's equals sit at sorted positions [before, after): their ranks (from 1) average (before + after + 1) / 2
    before = torch.searchsorted(ordered, kept, side="left")
    after = torch.searchsorted(ordered, kept, side="right")
    middle = (columns.sum(-1, keepdim=True, dtype=values.dtype) + 1) / 2  # the mean rank, (n + 1) / 2
    return ((before + after + 1).to(values.dtype) / 2 - middle) * (columns & real[:, :, None])


def _summed_shares(matrices: Tensor, classes: Tensor, real: Tensor) -> Tensor:
    """`[..., 4]`: the shares of mixing_results.SHARES of each input of a padded batch of maps `[..., B, T, T]` (classes
    `[B, T, 3]`), added over the inputs: each one's mean over its own rows (`real`, `[B, T]`)."""
    weights = real / real.sum(-1, keepdim=True, dtype=torch.float64)  # [B, T]: 1 / length on real rows, 0 on padding
    taken = (matrices * weights[:, :, None]).sum(-2)  # [..., B, T]: what each token gives, on average over the rows
    to_classes = (taken[..., None] * classes).sum((-3, -2))  # [..., 3]
    own = (matrices.diagonal(dim1=-2, dim2=-1) * weights).sum((-2, -1))
    return torch.cat([to_classes, own[..., None]], -1)


def _split(flat: np.ndarray, shapes: dict[str, torch.Size]) -> dict[str, np.ndarray]:
    """Tensors read from the device together, flattened one after another, as arrays of their own shapes again."""
    parts = np.split(flat, np.cumsum([shape.numel() for shape in shapes.values()])[:-1])
    return {name: part.reshape(shape) for (name, shape), part in zip(shapes.items(), parts, strict=True)}


def _agreement(methods: tuple[str, ...], sums: dict[str, Any], mask: HeadMask, ablation: Ablation) -> MixingAgreement:
    sentences = max(int(sums["sentences"]), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        agreement = sums["agreement"] / sums["agreement_counts"]
    layer_shares = sums["layer_shares"] / sentences
    for index, method in enumerate(methods):
        if method not in PER_LAYER:
            layer_shares[index] = np.nan
    return MixingAgreement(
        methods=methods,
        sentences=int(sums["sentences"]),
        tokens=int(sums["tokens"]),
        agreement=agreement,
        layer_shares=layer_shares,
        rolled_shares=sums["rolled_shares"] / sentences,
        truncated=int(sums["truncated"]),
        mask=mask,
        ablation=ablation,
    )
