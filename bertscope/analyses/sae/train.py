"""Training a TopK sparse autoencoder on one hidden state of a corpus (Gao et al. 2024), in plain torch.

What Gao et al. found a TopK SAE needs, and what is done here:
- width 4 × the hidden size and k = 32 by default; decoder rows of unit norm, the gradient's part along each row
  removed before a step and the norm put back after it; the encoder started as the decoder's transpose and the
  decoder bias at the geometric median of the first activations seen;
- the AuxK loss: the residual x − x̂ reconstructed by the k_aux = d_in / 2 most active dead latents (dead: not
  fired for `dead_after` tokens), weighted 1/32, so dead latents find something to do;
- Adam (β 0.9, 0.999; ε 6.25e-10) on batches of 256 tokens, its learning rate falling with the width as Gao et
  al.'s scaling law has it, 1.2e-3 / √(d_sae / 2¹⁴) (six times their constant, which suits their batches of
  131,072 tokens; see LR_AT_16K), and decayed linearly to 0 over the last fifth of the steps.

The activations stream from the corpus (analyses.sae.activations: each pass stops at the hidden state) a block of
sentences at a time, so memory is flat in the corpus; a small corpus is read again for each epoch. A block's
tokens are shuffled by keys hashed from the seed, the epoch and each token's place in the corpus (`token_keys`),
so which tokens share a step does not depend on the batching or on the process: under torchrun each rank runs its
share of a block's sentences, and the ranks' rows of a step, their losses' sums and gradients added, make one
process's step (`ShuffledBlock`, `Trainer.step`). A seeded share of the sentences is held out and never trained
on: the figures reported (FVU, L0, dead features, and what splicing the reconstruction into the model costs) are
theirs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.geometry.representations import row_keys
from bertscope.analyses.sae.activations import LayerTap, Numbered, TokenBatch, check_layer, numbered, token_batches
from bertscope.analyses.sae.autoencoder import ReconstructionTally, TopKSAE
from bertscope.analyses.sae.files import SAEConfig
from bertscope.analyses.sae.results import MAX_EPOCHS, TARGET_TOKENS, SAESettings, SAETraining
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.corpus import Sentence, chunked
from bertscope.data.files import check_new_directory

if TYPE_CHECKING:
    from bertscope.model.session import Session

SHUFFLE_FLOATS = 1 << 24  # a shuffling block's size: 64 MB of float32 for sentences of BLOCK_SENTENCE_TOKENS tokens
BLOCK_SENTENCE_TOKENS = 32  # the tokens of a sentence a block's sentence count is sized for
DECAY_SHARE = 0.2  # the learning rate falls linearly to 0 over this last share of the steps


def geometric_median(points: Tensor, iterations: int = 50, tolerance: float = 1e-6) -> Tensor:
    """The point of least summed distance to `points` `[n, d]` (Weiszfeld's iterations, from the mean)."""
    guess = points.mean(0)
    for _ in range(iterations):
        weights = 1 / (points - guess).norm(dim=1).clamp(min=1e-8)
        moved: Tensor = (weights[:, None] * points).sum(0) / weights.sum()
        if (moved - guess).norm() <= tolerance * guess.norm().clamp(min=1):
            return moved
        guess = moved
    return guess


def token_keys(seed: int, epoch: int, sentences: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Each token's shuffling key in an epoch: a seeded hash of (its sentence's number, its place in the sentence),
    so the order depends on the seed, the epoch and the corpus alone, never on the batching or the rank."""
    return row_keys(seed * 1_000_003 + epoch, sentences, positions)


@dataclass(frozen=True)
class ShuffledBlock:
    """One block of tokens cut into optimiser steps by their keys: the union over the ranks of the block's tokens,
    sorted by key and split in batches of about `batch_tokens`. `parts[b]` this rank's rows of batch b (none, some
    or all of them), `sizes[b]` the batch's tokens over all ranks and `variance[b]` its Σ‖x − x̄‖², x̄ the batch's
    mean: what a step needs to take one process's step on the union batch."""

    parts: list[Tensor]
    sizes: list[int]
    variance: list[float]

    @property
    def tokens(self) -> int:
        return sum(self.sizes)

    @classmethod
    def of(cls, rows: Tensor, keys: np.ndarray, batch_tokens: int) -> ShuffledBlock:
        """Cut this rank's `rows` (keys `keys`) of a block; under torchrun the ranks exchange keys and the batches'
        sums (one meeting per block)."""
        every = np.concatenate(distributed.gather(keys)) if distributed.started() else keys
        total = len(every)
        if total == 0:
            return cls([], [], [])
        count = max(round(total / batch_tokens), 1)
        order = np.sort(every)
        places = np.searchsorted(order, keys)  # each row's place in the union's order
        bounds = np.array([len(part) for part in np.array_split(np.arange(total), count)]).cumsum()
        batch_of = np.searchsorted(bounds, places, side="right")
        ranked = np.argsort(places, kind="stable")
        batch_sorted = torch.as_tensor(batch_of[ranked])
        rows = rows[torch.as_tensor(ranked).to(rows.device)]
        local = torch.bincount(batch_sorted, minlength=count).tolist()
        parts = list(rows.split(local))
        sums = torch.zeros(count, rows.shape[1] + 1, dtype=torch.float64, device=rows.device)
        sums[:, :-1].index_add_(0, batch_sorted.to(rows.device), rows.double())
        sums[:, -1].index_add_(0, batch_sorted.to(rows.device), rows.double().pow(2).sum(1))
        summed = distributed.sum_across({"sums": sums})["sums"]
        sizes = [len(part) for part in np.array_split(np.arange(total), count)]
        variance = [float(summed[batch, -1] - summed[batch, :-1].pow(2).sum() / sizes[batch]) for batch in range(count)]
        return cls(parts, sizes, variance)


class Trainer:
    """One SAE and its optimiser, stepped on batches of activations; running figures of the last steps."""

    def __init__(self, d_in: int, settings: SAESettings, *, device: torch.device, seed: int) -> None:
        self.settings = settings
        self.generator = torch.Generator().manual_seed(seed)
        d_sae = settings.width_for(d_in)
        self.sae = TopKSAE(d_in, d_sae, settings.k, generator=self.generator).to(device)
        self.lr = settings.lr_for(d_sae)
        self.optimizer = torch.optim.Adam(self.sae.parameters(), lr=self.lr, betas=(0.9, 0.999), eps=6.25e-10)
        self.since_fired = torch.zeros(d_sae, dtype=torch.long, device=device)
        self.k_aux = max(d_in // 2, 1)
        self.started = False
        self.steps = 0
        self.tokens = 0
        self.total_steps: int | None = None  # known once an epoch has been counted
        self.running: dict[str, float] = {}
        self.history: list[dict[str, float]] = []  # the running figures at each epoch's end

    def start(self, sample: Tensor) -> None:
        """The decoder bias at the geometric median of the first activations seen (the first batch, of every rank)."""
        if distributed.started():
            sample = torch.cat([part.to(sample.device) for part in distributed.gather(sample.cpu())])
        with torch.no_grad():
            chosen = sample[torch.randperm(len(sample), generator=self.generator)[:8192].to(sample.device)]
            self.sae.b_dec.copy_(geometric_median(chosen.double()).float())
        self.started = True

    def learning_rate(self) -> float:
        if self.total_steps is None:
            return self.lr
        decay_from = self.total_steps * (1 - DECAY_SHARE)
        if self.steps < decay_from:
            return self.lr
        return self.lr * max(self.total_steps - self.steps, 0) / max(self.total_steps - decay_from, 1)

    def dead(self) -> Tensor:
        return self.since_fired >= self.settings.dead_after

    def step(self, x: Tensor, size: int | None = None, variance: float | None = None) -> None:
        """One optimiser step on the batch whose rows here are `x` `[b, d_in]`: the reconstruction's FVU on the batch,
        plus the AuxK loss. Under torchrun the batch is the union of the ranks' rows, `size` of them, with Σ‖x − x̄‖²
        `variance`; each rank's loss is its rows' share of the union's, and the gradients are added across ranks
        before the step, so every rank takes one process's step on the union batch."""
        if not self.started:
            self.start(x)
        sae = self.sae
        size = len(x) if size is None else size
        if variance is None:
            variance = float((x.double() - x.double().mean(0)).pow(2).sum())
        pre = sae.preactivations(x)
        values, indices = sae.select(pre)
        reconstruction = sae.decode_selected(values, indices)
        error = x - reconstruction
        squared_error = error.pow(2).sum()
        fvu = squared_error / max(variance, 1e-12)
        loss = fvu
        dead = self.dead()
        dead_count = int(dead.sum())
        if dead_count and self.settings.aux_coefficient > 0:
            k_aux = min(self.k_aux, dead_count)
            aux_values, aux_indices = pre.masked_fill(~dead, -math.inf).topk(k_aux, dim=-1)
            aux_reconstruction = sae.decode_selected(aux_values.relu(), aux_indices, bias=False)  # it reconstructs the error
            residual = error.detach()
            residual_squares = _added(residual.pow(2).sum().reshape(1))
            aux = (aux_reconstruction - residual).pow(2).sum() / residual_squares[0].clamp(min=1e-12)
            loss = loss + self.settings.aux_coefficient * min(dead_count / self.k_aux, 1.0) * aux  # less weight when few are dead
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        with torch.no_grad():
            fired = torch.zeros(sae.d_sae, device=x.device).index_fill(0, indices[values > 0], 1)
            tally = torch.stack([squared_error.detach(), (values > 0).sum().float()])
            if distributed.started():
                fired, tally = self._add_across_ranks(fired, tally)
        sae.project_decoder_gradient()
        self.optimizer.step()
        sae.normalize_decoder()
        with torch.no_grad():
            self.since_fired += size
            self.since_fired[fired > 0] = 0
        self.steps += 1
        self.tokens += size
        figures = tally.tolist()
        self._remember({"fvu": figures[0] / max(variance, 1e-12), "l0": figures[1] / max(size, 1), "dead": dead_count / sae.d_sae})

    def _add_across_ranks(self, fired: Tensor, tally: Tensor) -> tuple[Tensor, Tensor]:
        """The gradients, the features fired and the batch's tallies, added over the ranks in one reduction."""
        parameters = list(self.sae.parameters())
        flat = _added(torch.cat([*(parameter.grad.reshape(-1) for parameter in parameters), fired, tally]))  # type: ignore[union-attr]
        offset = 0
        for parameter in parameters:
            grad = parameter.grad
            assert grad is not None
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
        return flat[offset : offset + len(fired)], flat[offset + len(fired) :]

    def _remember(self, figures: dict[str, float]) -> None:
        """Running figures: an average over about the last 50 steps."""
        weight = max(1 / self.steps, 0.02)
        for name, value in figures.items():
            self.running[name] = value if name not in self.running else (1 - weight) * self.running[name] + weight * value


def _added(tensor: Tensor) -> Tensor:
    """`tensor` added over the torchrun ranks (itself in one process): a step's reduction, inside a block the ranks
    met at (`ShuffledBlock.of`), so none of them is still reading its sentences."""
    if distributed.started():
        distributed.add_now(tensor)
    return tensor


Block = Iterable[tuple[Tensor, np.ndarray]]  # a block's activation rows `[n, d_in]` on this rank, with their keys


def fit(
    epoch_blocks: Callable[[int], Iterable[Block]],
    d_in: int,
    settings: SAESettings,
    *,
    device: torch.device | str = "cpu",
    seed: int = 0,
    cancel: Any = None,
) -> Iterator[Progress[Trainer]]:
    """Train an SAE on `epoch_blocks(epoch)`, epoch after epoch; yield progress as it goes, the last item carrying
    the trainer with its SAE.

    A block is a bounded run of the corpus's tokens (rows `[n, d_in]` in any number of parts, each with its
    `token_keys`): its tokens are shuffled by key and cut into steps of about `settings.batch_tokens` tokens
    (`ShuffledBlock`), so memory is one block's, and a step's batch is the same whatever the parts, and under
    torchrun whichever rank holds which rows. The first epoch counts the tokens, which fixes the number of epochs
    where `settings.epochs` is None and the learning rate's decay. An epoch with no tokens is refused."""
    settings.check()
    device = torch.device(device)
    trainer = Trainer(d_in, settings, device=device, seed=seed)
    epochs = settings.epochs
    per_epoch: int | None = None
    epoch = 0
    while epochs is None or epoch < epochs:
        steps_before = trainer.steps
        tokens = 0
        for block in epoch_blocks(epoch):
            rows: list[Tensor] = []
            keys: list[np.ndarray] = []
            for part, part_keys in block:
                if cancel is not None and cancel.is_set():
                    return
                rows.append(part.to(device=device, dtype=torch.float32))
                keys.append(part_keys)
                yield Progress(_stage(trainer, epoch, epochs), trainer.tokens, _total(per_epoch, epochs))
            held = torch.cat(rows) if rows else torch.zeros(0, d_in, device=device)
            shuffled = ShuffledBlock.of(held, np.concatenate(keys) if keys else np.zeros(0, dtype=np.uint64), settings.batch_tokens)
            del rows, held
            tokens += shuffled.tokens
            for part, size, variance in zip(shuffled.parts, shuffled.sizes, shuffled.variance, strict=True):
                if cancel is not None and cancel.is_set():
                    return
                trainer.step(part, size, variance)
                yield Progress(_stage(trainer, epoch, epochs), trainer.tokens, _total(per_epoch, epochs))
        if tokens == 0:
            raise InputError("no tokens to train on: the training sentences came out empty", setting="data")
        if per_epoch is None:
            per_epoch = tokens
            epochs = epochs or min(max(math.ceil(TARGET_TOKENS / tokens), 1), MAX_EPOCHS)
            trainer.total_steps = epochs * (trainer.steps - steps_before)
        trainer.history.append({"epoch": epoch + 1, **{name: round(value, 6) for name, value in trainer.running.items()}})
        epoch += 1
    yield Progress(_stage(trainer, epoch - 1, epochs), trainer.tokens, trainer.tokens, result=trainer)


def _total(per_epoch: int | None, epochs: int | None) -> int | None:
    return None if per_epoch is None or epochs is None else per_epoch * epochs


def in_blocks(x: Tensor, block_rows: int, *, seed: int = 0) -> Callable[[int], Iterator[Block]]:
    """Activations at hand `[n, d_in]` as `fit`'s blocks of `block_rows` rows, row i keyed as sentence i's only token."""

    def blocks(epoch: int) -> Iterator[Block]:
        for start in range(0, len(x), block_rows):
            numbers = np.arange(start, min(start + block_rows, len(x)))
            yield [(x[start : start + block_rows], token_keys(seed, epoch, numbers, np.zeros_like(numbers)))]

    return blocks


def _stage(trainer: Trainer, epoch: int, epochs: int | None) -> str:
    running = trainer.running
    of = f"/{epochs}" if epochs is not None else ""
    if not running:
        return f"epoch {epoch + 1}{of}"
    return f"epoch {epoch + 1}{of} · FVU {running['fvu']:.3f} · L0 {running['l0']:.1f} · dead {running['dead']:.1%}"


# --- on a model ----------------------------------------------------------------------------------------------


DEFAULT_SETTINGS = SAESettings()
SentenceSource = Callable[[], Iterable[Sentence]]  # the corpus, read afresh for each epoch


def train_sae(
    session: Session,
    sentences: SentenceSource,
    *,
    layer: int,
    out: str | Path,
    settings: SAESettings = DEFAULT_SETTINGS,
    data_name: str = "",
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[SAETraining]]:
    """Train a TopK SAE on hidden state `layer` of the corpus `sentences()` and write it to the new directory `out`.

    A seeded `settings.held_out` share of the sentences (`job.seed`) is never trained on; the figures are measured
    on them (`evaluate`). The directory is written whole at the end, or not at all (a failure, a cancel)."""
    started = time.perf_counter()
    check_layer(session, layer)
    settings.check()
    target = check_new_directory(out)
    counts = {"sentences": 0, "truncated": 0}

    block_sentences = max(SHUFFLE_FLOATS // (session.hidden_size * BLOCK_SENTENCE_TOKENS), 1)

    def epoch_blocks(epoch: int) -> Iterator[Block]:
        """The training sentences a block at a time (this rank's share of each block under torchrun)."""
        train = numbered(sentences(), job.seed, settings.held_out, held=False)
        seen = 0
        for block in chunked(train, block_sentences):
            yield _block_rows(distributed.shard(block), epoch, counts if epoch == 0 else None)
            seen += len(block)
        if epoch == 0:
            counts["sentences"] = seen
            if seen == 0:
                raise InputError("no sentences to train on: the corpus is empty, or so small that all of it was held out", setting="data")

    def _block_rows(block: Iterable[Numbered], epoch: int, counting: dict[str, int] | None) -> Iterator[tuple[Tensor, np.ndarray]]:
        for batch in token_batches(session, block, layer, include_special=settings.include_special, job=job):
            if counting is not None:
                counting["truncated"] += _cut(session, batch)
            yield batch.states, token_keys(job.seed, epoch, batch.sentences, batch.positions)

    trainer = yield from relay(fit(epoch_blocks, session.hidden_size, settings, device=session.device, seed=job.seed, cancel=job.cancel))
    if trainer is None:
        return
    counts["truncated"] = distributed.sum_across({"truncated": counts["truncated"]})["truncated"]
    notes = []
    figures = yield from relay(
        evaluate(
            session,
            trainer.sae,
            distributed.shard(numbered(sentences(), job.seed, settings.held_out, held=True)),
            layer,
            include_special=settings.include_special,
            job=job,
        )
    )
    if figures is not None and figures.tokens == 0:
        notes.append(
            f"no sentence of the {counts['sentences']:,} was held out (a {settings.held_out:.0%} share of a small corpus); "
            "the figures are on the training sentences"
        )
        training = distributed.shard(numbered(sentences(), job.seed, settings.held_out, held=False))
        figures = yield from relay(evaluate(session, trainer.sae, training, layer, include_special=settings.include_special, job=job))
    if figures is None:
        return
    d_sae = trainer.sae.d_sae
    epochs = len(trainer.history)
    chosen = {**asdict(settings), "width": d_sae, "epochs": epochs, "lr": trainer.lr, "seed": job.seed}
    result = SAETraining(
        directory=str(target),
        model=session.source,
        layer=layer,
        d_in=session.hidden_size,
        d_sae=d_sae,
        k=settings.k,
        epochs=epochs,
        steps=trainer.steps,
        tokens_trained=trainer.tokens,
        sentences=counts["sentences"],
        tokens=trainer.tokens // max(epochs, 1),
        held_out_sentences=figures.sentences,
        held_out_tokens=figures.tokens,
        fvu=figures.fvu,
        l0=figures.l0,
        dead_share=figures.dead_share,
        preserve=figures.preserve,
        mlm_loss_recovered=figures.mlm_recovered,
        mlm_losses=figures.mlm_losses,
        history=tuple(trainer.history),
        settings=chosen,
        truncated=counts["truncated"],
        seconds=time.perf_counter() - started,
        notes=tuple(notes),
    )
    config = SAEConfig(
        d_in=session.hidden_size,
        d_sae=d_sae,
        k=settings.k,
        layer=layer,
        model_name=session.source,
        fingerprint=session.fingerprint,
        include_special=settings.include_special,
        dtype="float32",
        context_size=session.max_length,
        training={
            "data": data_name,
            "sentences": result.sentences,
            "tokens": result.tokens,
            "held_out_sentences": result.held_out_sentences,
            "held_out_tokens": result.held_out_tokens,
            "seed": job.seed,
            "settings": chosen,
            "held_out": result.figures(),
        },
    )
    if distributed.is_main():
        trainer.sae.save(target, config)
    yield Progress("written", 1, 1, result=result)


def _cut(session: Session, batch: TokenBatch) -> int:
    """Sentences of the batch that filled the model's maximum length (and so were likely cut)."""
    return int((batch.inputs["attention_mask"].sum(1) >= session.max_length).sum())


@dataclass(frozen=True)
class Figures:
    """How an SAE does on some sentences (see `SAETraining`)."""

    sentences: int
    tokens: int
    fvu: float
    l0: float
    dead_share: float
    preserve: float
    mlm_recovered: float | None
    mlm_losses: dict[str, float] | None


def evaluate(
    session: Session,
    sae: TopKSAE,
    sentences: Iterable[tuple[int, Sentence]],
    layer: int,
    *,
    include_special: bool = False,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[Figures]]:
    """The SAE's figures on `sentences`: FVU, L0 and dead share at `layer`, and spliced into the model, the last
    hidden state's cosine to the plain pass and (with an MLM head) the share of the MLM loss recovered."""
    tap = LayerTap(session, layer)
    device = session.device
    d_in = session.hidden_size
    sums = {"cosine": 0.0, "real": 0.0}
    tally = ReconstructionTally(d_in, device)
    fired = torch.zeros(sae.d_sae, dtype=torch.bool, device=device)
    losses = {"clean": 0.0, "spliced": 0.0, "zero": 0.0}
    sentences_seen = 0
    with_head = session.mlm_head is not None
    sae = sae.to(device).eval()
    for batch in token_batches(session, sentences, layer, include_special=include_special, stop=False, job=job):
        x = batch.states
        with torch.no_grad():
            values, indices = sae.select(sae.preactivations(x))
            reconstruction = sae.decode_selected(values, indices)
        tally.add(x, values, reconstruction)
        fired[indices[values > 0]] = True
        sentences_seen += len(batch.items)
        clean = batch.output.last_hidden_state
        spliced = _last_hidden(session, tap, batch, reconstruction)
        real = batch.inputs["attention_mask"].bool()
        sums["cosine"] += float(F.cosine_similarity(spliced[real].float(), clean[real].float(), dim=-1).double().sum())
        sums["real"] += float(real.sum())
        if with_head:
            zeroed = _last_hidden(session, tap, batch, torch.zeros_like(reconstruction))
            targets = batch.inputs["input_ids"].reshape(-1)[batch.flat]
            for name, hidden in (("clean", clean), ("spliced", spliced), ("zero", zeroed)):
                logits = session.mlm_head_logits(hidden.reshape(-1, hidden.shape[-1])[batch.flat])
                losses[name] += float(F.cross_entropy(logits, targets, reduction="sum"))
        yield Progress("measuring held-out sentences", sentences_seen)
    if distributed.started():  # each rank measured its share of the sentences: their sums, added
        added = distributed.sum_across(
            {"error": tally.error, "squares": tally.squares, "active": tally.active, "tokens": tally.tokens, "total": tally.total}
            | {"fired": fired.double(), "sentences": sentences_seen, **sums, **{f"loss_{name}": value for name, value in losses.items()}}
        )
        tally.error, tally.squares, tally.active, tally.tokens, tally.total = (
            added[name] for name in ("error", "squares", "active", "tokens", "total")
        )
        fired, sentences_seen = added["fired"] > 0, added["sentences"]
        sums = {name: added[name] for name in sums}
        losses = {name: added[f"loss_{name}"] for name in losses}
    tokens = tally.tokens
    recovered = None
    mlm = None
    if with_head and tokens:
        mlm = {name: value / tokens for name, value in losses.items()}
        gap = mlm["zero"] - mlm["clean"]
        recovered = (mlm["zero"] - mlm["spliced"]) / gap if gap > 0 else math.nan
    figures = Figures(
        sentences=sentences_seen,
        tokens=tokens,
        fvu=tally.fvu,
        l0=tally.l0,
        dead_share=float((~fired).float().mean()) if tokens else math.nan,
        preserve=sums["cosine"] / sums["real"] if sums["real"] else math.nan,
        mlm_recovered=recovered,
        mlm_losses=mlm,
    )
    yield Progress("measuring held-out sentences", sentences_seen, sentences_seen, result=figures)


def _last_hidden(session: Session, tap: LayerTap, batch: TokenBatch, replacement: Tensor) -> Tensor:
    """The last hidden state `[B, T, D]` of the batch's pass with hidden state L replaced by `replacement` at the
    batch's chosen tokens."""

    def splice(state: Tensor) -> Tensor:
        replaced = state.clone()
        replaced.view(-1, state.shape[-1])[batch.flat] = replacement.to(state.dtype)
        return replaced

    tap.splice = splice
    try:
        with torch.no_grad(), tap.attached():
            output = tap.run(session, batch.inputs, stop=False)
    finally:
        tap.splice = None
    hidden: Tensor = output.last_hidden_state
    return hidden
