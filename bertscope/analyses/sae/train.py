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

The activations stream from the corpus (analyses.sae.activations: each pass stops at the hidden state) into a
bounded shuffle buffer, so memory is flat in the corpus; a small corpus is read again for each epoch. A seeded
share of the sentences is held out and never trained on: the figures reported (FVU, L0, dead features, and what
splicing the reconstruction into the model costs) are theirs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.sae.activations import LayerTap, TokenBatch, check_layer, numbered, token_batches
from bertscope.analyses.sae.autoencoder import ReconstructionTally, TopKSAE
from bertscope.analyses.sae.files import SAEConfig
from bertscope.analyses.sae.results import MAX_EPOCHS, TARGET_TOKENS, SAESettings, SAETraining
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.corpus import Sentence
from bertscope.data.files import check_new_directory

if TYPE_CHECKING:
    from bertscope.model.session import Session

SHUFFLE_FLOATS = 1 << 24  # the shuffle buffer's size: 64 MB of float32, whatever the corpus
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


class ShuffleBuffer:
    """Activation rows, shuffled across batches in a buffer of fixed size: rows come out when it is full, half of
    it at a time in random order, the rest at the end of an epoch."""

    def __init__(self, capacity: int, generator: torch.Generator) -> None:
        self.capacity, self.generator = capacity, generator
        self.parts: list[Tensor] = []
        self.rows = 0

    def add(self, rows: Tensor) -> Iterator[Tensor]:
        """Take `rows`; give back rows in random order while the buffer is over its capacity."""
        self.parts.append(rows)
        self.rows += len(rows)
        if self.rows >= self.capacity:
            held = self._mixed()
            keep = len(held) // 2
            self.parts, self.rows = [held[:keep]], keep
            yield held[keep:]

    def drain(self) -> Iterator[Tensor]:
        if self.rows:
            held = self._mixed()
            self.parts, self.rows = [], 0
            yield held

    def _mixed(self) -> Tensor:
        held = torch.cat(self.parts)
        order = torch.randperm(len(held), generator=self.generator).to(held.device)
        return held[order]


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
        """The decoder bias at the geometric median of the first activations seen."""
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

    def step(self, x: Tensor) -> None:
        """One optimiser step on `x` `[b, d_in]`: the reconstruction's FVU on the batch, plus the AuxK loss."""
        if not self.started:
            self.start(x)
        sae = self.sae
        pre = sae.preactivations(x)
        values, indices = sae.select(pre)
        reconstruction = sae.decode_selected(values, indices)
        error = x - reconstruction
        variance = (x - x.mean(0)).pow(2).sum().clamp(min=1e-12)
        fvu = error.pow(2).sum() / variance
        loss = fvu
        dead = self.dead()
        dead_count = int(dead.sum())
        if dead_count and self.settings.aux_coefficient > 0:
            k_aux = min(self.k_aux, dead_count)
            aux_values, aux_indices = pre.masked_fill(~dead, -math.inf).topk(k_aux, dim=-1)
            aux_reconstruction = sae.decode_selected(aux_values.relu(), aux_indices, bias=False)  # it reconstructs the error
            residual = error.detach()
            aux = (aux_reconstruction - residual).pow(2).sum() / residual.pow(2).sum().clamp(min=1e-12)
            loss = loss + self.settings.aux_coefficient * min(dead_count / self.k_aux, 1.0) * aux  # less weight when few are dead
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        sae.project_decoder_gradient()
        self.optimizer.step()
        sae.normalize_decoder()
        with torch.no_grad():
            fired = torch.zeros_like(self.since_fired).index_fill(0, indices[values > 0], 1).bool()
            self.since_fired += len(x)
            self.since_fired[fired] = 0
            l0 = (values > 0).sum(-1).float().mean()
        self.steps += 1
        self.tokens += len(x)
        self._remember({"fvu": float(fvu.detach()), "l0": float(l0), "dead": dead_count / sae.d_sae})

    def _remember(self, figures: dict[str, float]) -> None:
        """Running figures: an average over about the last 50 steps."""
        weight = max(1 / self.steps, 0.02)
        for name, value in figures.items():
            self.running[name] = value if name not in self.running else (1 - weight) * self.running[name] + weight * value


def fit(
    epoch_batches: Callable[[int], Iterable[Tensor]],
    d_in: int,
    settings: SAESettings,
    *,
    device: torch.device | str = "cpu",
    seed: int = 0,
    cancel: Any = None,
    on_epoch: Callable[[int, int], None] | None = None,
) -> Iterator[Progress[Trainer]]:
    """Train an SAE on `epoch_batches(epoch)` (activation rows `[n, d_in]`, any number a batch), epoch after epoch;
    yield progress after each batch, the last item carrying the trainer with its SAE.

    The first epoch counts the tokens, which fixes the number of epochs where `settings.epochs` is None and the
    learning rate's decay. `on_epoch(epoch, tokens)` is told each epoch's end. An epoch with no tokens is refused."""
    settings.check()
    device = torch.device(device)
    trainer = Trainer(d_in, settings, device=device, seed=seed)
    buffer = ShuffleBuffer(max(8 * settings.batch_tokens, SHUFFLE_FLOATS // d_in), trainer.generator)
    epochs = settings.epochs
    per_epoch: int | None = None
    epoch = 0
    while epochs is None or epoch < epochs:
        tokens = 0
        for rows in epoch_batches(epoch):
            if cancel is not None and cancel.is_set():
                return
            rows = rows.to(device=device, dtype=torch.float32)
            tokens += len(rows)
            for mixed in buffer.add(rows):
                _steps(trainer, mixed, settings.batch_tokens)
            yield Progress(
                _stage(trainer, epoch, epochs), trainer.tokens, None if per_epoch is None or epochs is None else per_epoch * epochs
            )
        if cancel is not None and cancel.is_set():
            return
        for mixed in buffer.drain():
            _steps(trainer, mixed, settings.batch_tokens)
        if tokens == 0:
            raise InputError("no tokens to train on: the training sentences came out empty", setting="data")
        if per_epoch is None:
            per_epoch = tokens
            epochs = epochs or min(max(math.ceil(TARGET_TOKENS / tokens), 1), MAX_EPOCHS)
            trainer.total_steps = epochs * math.ceil(tokens / settings.batch_tokens)
        trainer.history.append({"epoch": epoch + 1, **{name: round(value, 6) for name, value in trainer.running.items()}})
        if on_epoch is not None:
            on_epoch(epoch, tokens)
        epoch += 1
    yield Progress(_stage(trainer, epoch - 1, epochs), trainer.tokens, trainer.tokens, result=trainer)


def _steps(trainer: Trainer, rows: Tensor, size: int) -> None:
    """Optimiser steps on `rows` in batches of `size` (a last batch under half of it joins the one before)."""
    count = max(round(len(rows) / size), 1)
    for part in rows.tensor_split(count):
        trainer.step(part)


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

    def epoch_batches(epoch: int) -> Iterator[Tensor]:
        train = numbered(sentences(), job.seed, settings.held_out, held=False)
        seen = 0
        for batch in token_batches(session, train, layer, include_special=settings.include_special, job=job):
            seen += len(batch.items)
            if epoch == 0:
                counts["truncated"] += _cut(session, batch)
            yield batch.states
        if epoch == 0:
            counts["sentences"] = seen
            if seen == 0:
                raise InputError("no sentences to train on: the corpus is empty, or so small that all of it was held out", setting="data")

    trainer = yield from relay(fit(epoch_batches, session.hidden_size, settings, device=session.device, seed=job.seed, cancel=job.cancel))
    if trainer is None:
        return
    notes = []
    figures = yield from relay(
        evaluate(
            session,
            trainer.sae,
            numbered(sentences(), job.seed, settings.held_out, held=True),
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
        training = numbered(sentences(), job.seed, settings.held_out, held=False)
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
