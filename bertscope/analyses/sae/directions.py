"""An SAE's features against a probe and an eraser at its hidden state: which features a probe reads, which an erasure
takes away.

Both are fitted as the rest of bertscope fits them, on the same cached features: the word-level features of the
probing command (first piece of each word, every hidden state in one pass, `probing.features`' cache), the linear
probe of `bertscope probe` (`probes.train_probes`: L2 chosen on dev, the job's seed) at the SAE's hidden state, and
the LEACE eraser of `bertscope erase` (`erasure.Eraser.leace`) on the training split there. A probe reads a
standardised state, z = (x − mean) / std, so its class c's direction in the state's own coordinates is
W[:, c] / std (the gradient of the class's logit); an eraser edits a state by x ↦ x − P(x − bias), P = left · right,
so a feature firing at a loses a · P d of its write d. The removed directions are the span of `left`; the share of a
unit decoder row d lying in them is ‖Π d‖ (Π the orthogonal projection onto that span), 0 to 1, and ‖P d‖ is what
the oblique edit itself takes from a write along d (LEACE's edit is a projection in the whitened geometry: it can
take more than d's share from a direction of little variance).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.erasure import Eraser
from bertscope.analyses.probing import probes
from bertscope.analyses.probing.features import FeatureOptions, Features, extract_features
from bertscope.analyses.probing.run import MIN_EXAMPLES, encode_labels, word_labels
from bertscope.analyses.sae.activations import numbered, token_batches
from bertscope.analyses.sae.features import open_sae
from bertscope.analyses.sae.reading_results import CHANCE_DRAWS, SAEDirections
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.probing_tasks import WORD_TASKS
from bertscope.data.splits import Splits
from bertscope.model.allocator import fitting_heap

if TYPE_CHECKING:
    from bertscope.model.session import Session


def check_direction_task(task: str) -> None:
    """A word-level classification task: the SAE's features are tokens', and a probe's classes are directions."""
    if task not in WORD_TASKS:
        raise InputError(
            f"task {task!r} is not a word-level classification task; SAE features are read against {', '.join(WORD_TASKS)} "
            "(a CoNLL-U file)",
            setting="task",
        )


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def best_cosines(decoder: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row of `decoder` `[F, D]`: the largest |cos| to a row of `classes` `[C, D]`, which one, and its sign."""
    cosines = unit_rows(decoder) @ unit_rows(classes).T  # [F, C]
    best = np.abs(cosines).argmax(1)
    chosen = cosines[np.arange(len(decoder)), best]
    return np.abs(chosen), best, np.where(chosen >= 0, 1, -1)


def erased_shares(decoder: np.ndarray, eraser: Eraser) -> tuple[np.ndarray, np.ndarray]:
    """For each unit row d of `decoder` `[F, D]`: ‖Π d‖, Π the orthogonal projection onto the directions the eraser
    removes (the span of `left`: the share of d that lies in them, 0 to 1), and ‖P d‖, P = left · right the eraser's
    own (oblique) edit (what it takes from a write along d, per unit: LEACE's whitened geometry can stretch it)."""
    left, right = eraser.left.double().cpu().numpy(), eraser.right.double().cpu().numpy()
    rows = unit_rows(decoder)
    basis = np.linalg.qr(left)[0][:, : eraser.rank] if eraser.rank else np.zeros((left.shape[0], 0))
    share = np.linalg.norm(rows @ basis, axis=1)
    edit = np.linalg.norm((rows @ right.T) @ left.T, axis=1)
    return np.asarray(share), np.asarray(edit)


@dataclass(frozen=True, eq=False)
class Readers:
    """A word task's probe and eraser at one hidden state, as directions in the state's coordinates: each class's
    `directions` `[C, D]` (W[:, c] / std) and the LEACE `eraser`; how good the probe is and what they were fitted on."""

    classes: tuple[str, ...]
    directions: np.ndarray
    eraser: Eraser
    dev_accuracy: float
    train_words: int
    dev_words: int
    notes: tuple[str, ...] = ()


def fit_readers(
    session: Session, splits: Splits, task: str, layer: int, *, min_examples: int = MIN_EXAMPLES, job: JobOptions = JobOptions()
) -> Iterator[Progress[Readers]]:
    """The probe `bertscope probe` fits for `task` at hidden state `layer` (on train, its L2 chosen on dev, the job's
    seed) and the eraser `bertscope erase` fits there (on train), from the probing feature cache."""
    check_direction_task(task)
    options = FeatureOptions(level="word")  # the probing command's word features: the same cache entries
    features: dict[str, Features] = {}
    for name in ("train", "dev"):
        extracted = yield from relay(extract_features(session, getattr(splits, name), options, cache_dir=job.cache_dir, cancel=job.cancel))
        if extracted is None:
            return  # cancelled
        features[name] = extracted
    labels = encode_labels(
        word_labels(splits.train, features["train"], task), word_labels(splits.dev, features["dev"], task), [], min_examples
    )
    train = np.asarray(labels.rows("train", features["train"].X[:, layer : layer + 1]), dtype=np.float32)
    dev = np.asarray(labels.rows("dev", features["dev"].X[:, layer : layer + 1]), dtype=np.float32)
    count = len(splits.train) + len(splits.dev)
    yield Progress(f"fitting the {task} probe and eraser at hidden state {layer}", count, count)
    with fitting_heap():
        classes, device = len(labels.classes), str(session.device)
        seed, cancel = job.seed, job.cancel
        trained = probes.train_probes(train, labels.train, dev, labels.dev, num_classes=classes, device=device, seed=seed, cancel=cancel)
        eraser = Eraser.leace(train[:, 0], labels.train, classes)
    note = labels.note(min_examples)
    readers = Readers(
        classes=tuple(labels.classes),
        directions=(trained.weights[0] / trained.std[0][:, None]).T.astype(np.float64),
        eraser=eraser,
        dev_accuracy=float(trained.chosen_dev_accuracy[0]),
        train_words=int(len(labels.train)),
        dev_words=int(len(labels.dev)),
        notes=(note,) if note else (),
    )
    yield Progress("fitted", count, count, readers)


def sae_directions(
    session: Session,
    directory: str | Path,
    splits: Splits,
    *,
    task: str,
    min_examples: int = MIN_EXAMPLES,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[SAEDirections]]:
    """Each feature of the SAE in `directory` against the probe and the LEACE eraser for word task `task` at its
    hidden state, fitted on `splits` (train, and dev for the probe's L2); which features fire is read on all of them.
    Yields progress by stage, the last item carrying the result."""
    check_direction_task(task)
    sae, config, notes = open_sae(session, directory)
    layer = config.layer
    readers = yield from relay(fit_readers(session, splits, task, layer, min_examples=min_examples, job=job))
    if readers is None:
        return  # cancelled
    decoder = sae.W_dec.detach().double().cpu().numpy()
    cosine, best, signs = best_cosines(decoder, readers.directions)
    erased, edit = erased_shares(decoder, readers.eraser)
    draws = np.random.default_rng(job.seed).normal(size=(CHANCE_DRAWS, decoder.shape[1]))
    chance_cosine = float(np.quantile(best_cosines(draws, readers.directions)[0], 0.99))
    chance_erased = float(np.quantile(erased_shares(draws, readers.eraser)[0], 0.99))
    fired = torch.zeros(sae.d_sae, dtype=torch.long, device=session.device)
    read = 0
    every = [*splits.train, *splits.dev, *splits.test]
    for batch in token_batches(session, numbered(every, job.seed, 0.0, held=None), layer, include_special=config.include_special, job=job):
        with torch.no_grad():
            values, indices = sae.select(sae.preactivations(batch.states))
            fired += torch.bincount(indices[values > 0], minlength=sae.d_sae)
        read += len(batch.items)
        yield Progress("reading which features fire", read, len(every))
    result = SAEDirections(
        directory=str(directory),
        model=session.source,
        layer=layer,
        task=task,
        d_sae=sae.d_sae,
        classes=readers.classes,
        cosine=cosine,
        best_class=best,
        signs=signs,
        erased=erased,
        edit=edit,
        rank=readers.eraser.rank,
        probe_accuracy=readers.dev_accuracy,
        chance_cosine=chance_cosine,
        chance_erased=chance_erased,
        train_words=readers.train_words,
        dev_words=readers.dev_words,
        alive=(fired > 0).cpu().numpy(),
        notes=(*notes, *readers.notes),
    )
    yield Progress("done", len(every), len(every), result)
