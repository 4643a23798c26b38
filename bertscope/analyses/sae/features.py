"""Reading a trained SAE's features on a corpus: what each fires on, how often, how strongly, and which label it matches.

The corpus streams through the model to the SAE's hidden state (analyses.sae.activations) and everything is
reduced a batch at a time, so memory is flat in the corpus: firing counts, a histogram per feature over fixed
log-spaced bins, each feature's top N tokens kept by merging the batch's top N into the running ones (with the
tokens of only the sentences they name), and, for a CoNLL-U corpus, counts of each feature firing on each label
(UPOS, dependency relation, a word's first or inner piece) from which precision and recall follow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.sae.activations import TokenBatch, numbered, token_batches
from bertscope.analyses.sae.autoencoder import ReconstructionTally, TopKSAE
from bertscope.analyses.sae.files import SAEConfig, check_fits
from bertscope.analyses.sae.results import LABEL_SCHEMES, FeatureContext, LabelMatch, SAEFeatures
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.data.corpus import Sentence

if TYPE_CHECKING:
    from bertscope.model.session import Session

BIN_EDGES = np.geomspace(1e-3, 1e3, 31)  # 30 log-spaced bins of activations, shared by every feature
DEFAULT_TOP = 10


def open_sae(session: Session, directory: str | Path) -> tuple[TopKSAE, SAEConfig, tuple[str, ...]]:
    """An SAE directory read back for this model: its module (on the model's device), its config, and a note where
    it was trained on another model of the same width."""
    sae, config = TopKSAE.load(directory)
    check_fits(config, session.hidden_size, session.num_layers, directory=directory)
    notes: tuple[str, ...] = ()
    if config.fingerprint and config.fingerprint != session.fingerprint:
        notes = (f"the SAE was trained on {config.model_name or 'another model'}, not on {session.source} (another fingerprint)",)
    return sae.to(session.device).eval(), config, notes


class LabelCounts:
    """Per scheme, each feature's firings on each label and each label's tokens, with the labels numbered as met."""

    def __init__(self, d_sae: int, device: torch.device) -> None:
        self.d_sae, self.device = d_sae, device
        self.names: dict[str, dict[str, int]] = {scheme: {} for scheme in LABEL_SCHEMES}
        self.together = {scheme: torch.zeros((d_sae, 0), dtype=torch.long, device=device) for scheme in LABEL_SCHEMES}
        self.totals = {scheme: torch.zeros(0, dtype=torch.long, device=device) for scheme in LABEL_SCHEMES}
        self.labelled = torch.zeros(d_sae, dtype=torch.long, device=device)  # firings on tokens of a word

    def token_labels(self, batch: TokenBatch) -> dict[str, np.ndarray]:
        """Each chosen token's label number per scheme (-1 for a token of no word)."""
        assert batch.words is not None and batch.first is not None
        sentences = [sentence for _, sentence in batch.items]
        columns = {"upos": lambda s: s.upos, "deprel": lambda s: s.deprels}
        found: dict[str, np.ndarray] = {}
        for scheme in LABEL_SCHEMES:
            names = self.names[scheme]
            ids = np.full(len(batch.words), -1, dtype=np.int64)
            for index, (row, word) in enumerate(zip(batch.rows.tolist(), batch.words.tolist(), strict=True)):
                if word < 0:
                    continue
                if scheme == "piece":
                    label = "first" if batch.first[index] else "inner"
                else:
                    column = columns[scheme](sentences[row])
                    if column is None:
                        continue
                    label = column[word]
                ids[index] = names.setdefault(label, len(names))
            found[scheme] = ids
        return found

    def add(self, batch: TokenBatch, tokens: torch.Tensor, features: torch.Tensor) -> None:
        """Count the firings (`tokens[i]` fired `features[i]`) on each label, and the labels' tokens."""
        labels = self.token_labels(batch)
        on_word = torch.from_numpy(labels["piece"] >= 0).to(self.device)
        self.labelled += torch.bincount(features[on_word[tokens]], minlength=self.d_sae)
        for scheme, ids in labels.items():
            count = len(self.names[scheme])
            if count > self.together[scheme].shape[1]:  # labels met for the first time
                grow = count - self.together[scheme].shape[1]
                self.together[scheme] = torch.cat([self.together[scheme], self.together[scheme].new_zeros((self.d_sae, grow))], 1)
                self.totals[scheme] = torch.cat([self.totals[scheme], self.totals[scheme].new_zeros(grow)])
            label_ids = torch.from_numpy(ids).to(self.device)
            present = label_ids >= 0
            self.totals[scheme] += torch.bincount(label_ids[present], minlength=count)
            fired = label_ids[tokens]
            keep = fired >= 0
            flat = features[keep] * count + fired[keep]
            self.together[scheme] += torch.bincount(flat, minlength=self.d_sae * count).view(self.d_sae, count)

    def matches(self) -> tuple[tuple[dict[str, LabelMatch], ...], tuple[LabelMatch | None, ...]]:
        """Per feature, its best label per scheme (highest F1) and the best of those."""
        labelled = self.labelled.cpu().numpy().astype(np.float64)
        per_scheme: dict[str, list[LabelMatch | None]] = {}
        for scheme in LABEL_SCHEMES:
            together = self.together[scheme].cpu().numpy().astype(np.float64)
            totals = self.totals[scheme].cpu().numpy().astype(np.float64)
            names = list(self.names[scheme])
            if not names:
                per_scheme[scheme] = [None] * self.d_sae
                continue
            precision = together / np.maximum(labelled[:, None], 1)
            recall = together / np.maximum(totals[None, :], 1)
            f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
            best = f1.argmax(1)
            rows = np.arange(self.d_sae)
            shares = totals / max(totals.sum(), 1)
            per_scheme[scheme] = [
                LabelMatch(scheme, names[label], float(precision[f, label]), float(recall[f, label]), float(shares[label]))
                if together[f, label] > 0
                else None
                for f, label in zip(rows, best, strict=True)
            ]
        labels: list[dict[str, LabelMatch]] = [{} for _ in range(self.d_sae)]
        for scheme, matches in per_scheme.items():
            for found, match in zip(labels, matches, strict=True):
                if match is not None:
                    found[scheme] = match
        best_of = tuple(max(found.values(), key=lambda match: match.f1) if found else None for found in labels)
        return tuple(labels), best_of


def sae_features(
    session: Session,
    directory: str | Path,
    sentences: Iterable[Sentence],
    *,
    top: int = DEFAULT_TOP,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[SAEFeatures]]:
    """Read the SAE in `directory` on `sentences`: its FVU, L0 and dead share there, and per feature its density,
    top `top` tokens in context, histogram and (CoNLL-U) best-matching labels. Yields progress per batch, the last
    item carrying the result."""
    if top < 1:
        raise InputError(f"top must be 1 or more, not {top}", setting="top")
    sae, config, notes = open_sae(session, directory)
    device, d_sae = session.device, sae.d_sae
    edges = torch.as_tensor(BIN_EDGES[1:-1], dtype=torch.float32, device=device)
    bins = len(BIN_EDGES) - 1
    fired = torch.zeros(d_sae, dtype=torch.long, device=device)
    histogram = torch.zeros(d_sae * bins, dtype=torch.long, device=device)
    best_values = torch.full((d_sae, top), -math.inf, device=device)
    best_sentence = torch.full((d_sae, top), -1, dtype=torch.long, device=device)
    best_position = torch.full((d_sae, top), -1, dtype=torch.long, device=device)
    kept_tokens: dict[int, tuple[str, ...]] = {}  # the tokens of the sentences a top entry names
    tally = ReconstructionTally(sae.d_in, device)
    labels: LabelCounts | None = None
    read = truncated = 0
    for batch in token_batches(
        session, numbered(sentences, job.seed, 0.0, held=None), config.layer, include_special=config.include_special, job=job
    ):
        x = batch.states
        if labels is None and batch.words is not None:
            labels = LabelCounts(d_sae, device)
        with torch.no_grad():
            values, indices = sae.select(sae.preactivations(x))
            reconstruction = sae.decode_selected(values, indices)
            tally.add(x, values, reconstruction)
            active = values > 0
            rows = torch.arange(len(x), device=device)[:, None].expand_as(indices)[active]
            features, strengths = indices[active], values[active]
            fired += torch.bincount(features, minlength=d_sae)
            histogram += torch.bincount(features * bins + torch.bucketize(strengths, edges), minlength=d_sae * bins)
            # the batch's strongest tokens of each feature, merged into the running top
            dense = sae.dense(values, indices).masked_fill(~sae.dense(active.float(), indices).bool(), -math.inf)
            batch_best = dense.topk(min(top, len(x)), dim=0)
            sentence_of = torch.from_numpy(batch.sentences).to(device)
            position_of = torch.from_numpy(batch.positions).to(device)
            merged = torch.cat([best_values, batch_best.values.T], 1).topk(top, dim=1)
            best_values = merged.values
            best_sentence = torch.cat([best_sentence, sentence_of[batch_best.indices.T]], 1).gather(1, merged.indices)
            best_position = torch.cat([best_position, position_of[batch_best.indices.T]], 1).gather(1, merged.indices)
            if labels is not None:
                labels.add(batch, rows, features)
        _keep_top_sentences(kept_tokens, batch, best_sentence[best_values > -math.inf], session)
        read += len(batch.items)
        truncated += int((batch.inputs["attention_mask"].sum(1) >= session.max_length).sum())
        yield Progress("reading features", read)
    if read == 0:
        raise InputError("no sentences to read the features on; the corpus is empty", setting="data")
    tokens = tally.tokens
    counts = fired.cpu().numpy()
    values_host, sentences_host, positions_host = (t.cpu().numpy() for t in (best_values, best_sentence, best_position))
    tops = tuple(
        tuple(
            FeatureContext(float(value), int(sentence), int(position), kept_tokens[int(sentence)])
            for value, sentence, position in zip(values_host[f], sentences_host[f], positions_host[f], strict=True)
            if value > -math.inf
        )
        for f in range(d_sae)
    )
    matched = best = pure = None
    if labels is not None:
        matched, best = labels.matches()
        pure = sum(1 for f, found in enumerate(matched) if any(match.pure(int(counts[f])) for match in found.values()))
    result = SAEFeatures(
        directory=str(directory),
        model=session.source,
        layer=config.layer,
        d_sae=d_sae,
        k=sae.k,
        sentences=read,
        tokens=tokens,
        fvu=tally.fvu,
        l0=tally.l0,
        dead_share=float((counts == 0).mean()),
        density=counts / max(tokens, 1),
        top=tops,
        bin_edges=BIN_EDGES.copy(),
        histogram=histogram.view(d_sae, bins).cpu().numpy(),
        labels=matched,
        best=best,
        pure=pure,
        truncated=truncated,
        notes=notes,
    )
    yield Progress("reading features", read, read, result=result)


def _keep_top_sentences(kept: dict[int, tuple[str, ...]], batch: TokenBatch, named: torch.Tensor, session: Session) -> None:
    """Keep the tokens of the sentences the running top names (this batch's, newly), and drop the others'."""
    wanted = set(named.unique().cpu().tolist())
    numbers = [number for number, _ in batch.items]
    new = [row for row, number in enumerate(numbers) if number in wanted and number not in kept]
    if new:
        every = batch.tokens(session.tokenizer)
        for row in new:
            kept[numbers[row]] = tuple(every[row])
    for number in [number for number in kept if number not in wanted]:
        del kept[number]
