"""Activation patching: which heads, layers and positions carry a behaviour (Vig et al. 2020; Meng et al. 2022).

Run a clean and a corrupted input of the same length, copy one component's activation from
one run into the other, and measure how much of the difference in a metric m moves with
it. Denoising copies clean activations into the corrupted run (what restores the
behaviour); noising copies corrupted ones into the clean run (what breaks it). Both report
a share of m(clean) - m(corrupt): 1 when the component carries all of it, 0 when none.

Components, in a bidirectional post-LayerNorm encoder:
- a head's output: its slice of the context entering the attention output projection,
  at every position or at one;
- a layer's attention write and feed-forward write: the outputs of the two blocks' output
  projections, before the residual sum and LayerNorm;
- the residual stream: the hidden state entering layer k (k = L: the model's output) at one
  position, Meng et al.'s causal-tracing grid.

Every patched run is a row of a batch that starts from the unpatched run's hidden state at
the patched layer: the layers below are never run again, and patches of the same layer
share one batched pass over the layers above it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import torch
from torch import Tensor, nn

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.mlm import answer_id, mask_positions, with_mask_token
from bertscope.analyses.patching_results import DIRECTIONS, METRICS, SWEEPS, PatchingResult, PatchMetric
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.model.results import Encoding

if TYPE_CHECKING:
    from bertscope.analyses.probing.decision import DecisionProbe
    from bertscope.model.session import Session

T = TypeVar("T")

PATCHED_TOKENS = 4096  # padded tokens of the patched runs batched together (benchmarks/patching.py measured this)
SAME = 1e-6  # metrics closer than this: the inputs do not differ in the behaviour, and no effect can be normalised


@dataclass
class _Activations:
    """One unpatched run: hidden states `[L+1, T, D]` and, per layer, what its components wrote."""

    hidden: Tensor
    contexts: list[Tensor] = field(default_factory=list)  # [T, H*d]: the heads' outputs, side by side
    attention_writes: list[Tensor] = field(default_factory=list)  # [T, D]
    feed_forward_writes: list[Tensor] = field(default_factory=list)  # [T, D]


@dataclass
class _Group:
    """Patched runs that start from the same hidden-state index: rows of one batch."""

    start: int
    rows: int
    store: Callable[[np.ndarray], None]  # receives the rows' metric values, in order
    residual: Tensor | None = None  # [R, T] bool: positions of the starting state taken from the source
    replacements: list[tuple[nn.Module, bool, Tensor, Tensor]] = field(default_factory=list)
    # (module, its input (True) or output, mask [R, T, W], source [T, W])


@dataclass(frozen=True)
class _Metric:
    score: Callable[[Tensor], Tensor]  # hidden states at `layer`, `[R, T, D]` -> m per row `[R]`
    layer: int  # the hidden-state index m reads
    description: str


def patch(
    session: Session,
    clean: str,
    corrupt: str,
    *,
    clean_pair: str | None = None,
    corrupt_pair: str | None = None,
    metric: PatchMetric = PatchMetric(),
    sweeps: Sequence[str] = SWEEPS,
    direction: str = "denoise",
    per_position: bool = False,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[PatchingResult]]:
    """Patch every component of the chosen sweeps between `clean` and `corrupt`; a generator of progress.

    `metric`: what is measured (`PatchMetric`). `per_position` also patches each head at each position. `job`:
    the probe metric's feature cache, and the cancel.
    """
    _check_choice(metric.name, METRICS, "metric")
    _check_choice(direction, DIRECTIONS, "direction")
    for sweep in sweeps:
        _check_choice(sweep, SWEEPS, "sweep")
    tokenizer = session.tokenizer
    clean_encoding = session.encode(with_mask_token(tokenizer, clean), clean_pair)
    corrupt_encoding = session.encode(with_mask_token(tokenizer, corrupt), corrupt_pair)
    differing = _differing_positions(clean_encoding, corrupt_encoding)
    if "heads" in sweeps and session.kept_heads is not None:
        raise InputError("this model has heads sliced out of its weights; patch heads of the unpruned model", setting="sweep")
    clean_run, corrupt_run = _activations(session, clean_encoding), _activations(session, corrupt_encoding)
    probe = None
    if metric.name == "probe":
        from bertscope.analyses.probing.decision import decision_probe

        probe = yield from relay(
            decision_probe(
                session,
                _required(metric.task, "task", "a probe metric needs a probing task"),
                data=metric.data,
                layer=metric.probe_layer,
                cache_dir=job.cache_dir,
                cancel=job.cancel,
            )
        )
        if probe is None:
            return  # cancelled
    measure = _metric(session, metric, clean_encoding, clean_run, corrupt_run, probe)
    with torch.inference_mode():
        clean_metric = float(measure.score(clean_run.hidden[measure.layer][None])[0])
        corrupt_metric = float(measure.score(corrupt_run.hidden[measure.layer][None])[0])
    if abs(clean_metric - corrupt_metric) < SAME:
        raise InputError(
            f"the clean and corrupted inputs score the same on {measure.description} ({clean_metric:.4g}): "
            "there is no difference for a component to carry; choose inputs or answers that differ",
            setting="metric",
        )
    base, source = (corrupt_run, clean_run) if direction == "denoise" else (clean_run, corrupt_run)
    effects: dict[str, np.ndarray] = {}
    groups = _groups(session, sweeps, per_position, base, source, len(clean_encoding), effects)
    total = sum(group.rows for group in groups)
    done = 0
    rows_per_batch = max(1, PATCHED_TOKENS // len(clean_encoding))
    for group in groups:
        values = []
        for first in range(0, group.rows, rows_per_batch):
            if job.cancelled:
                return
            rows = slice(first, min(first + rows_per_batch, group.rows))
            hidden = _patched_hidden(session, base, source, group, rows, measure.layer)
            with torch.inference_mode():
                values.append(measure.score(hidden).double().cpu().numpy())
            done += rows.stop - rows.start
            yield Progress("patching", done, total)
        group.store(np.concatenate(values))
    spread = clean_metric - corrupt_metric
    for name, raw in effects.items():
        effects[name] = ((raw - corrupt_metric) if direction == "denoise" else (clean_metric - raw)) / spread
    yield Progress(
        "patching",
        total,
        total,
        PatchingResult(
            metric=metric.name,
            metric_description=measure.description,
            direction=direction,
            tokens=clean_encoding.tokens,
            corrupt_tokens=corrupt_encoding.tokens,
            differing=differing,
            clean_metric=clean_metric,
            corrupt_metric=corrupt_metric,
            heads=effects.get("heads"),
            head_positions=effects.get("head_positions"),
            layers=effects.get("layers"),
            positions=effects.get("positions"),
            notes=tuple(_notes(probe, clean_encoding, corrupt_encoding)),
            clean_text=clean if clean_pair is None else f"{clean} / {clean_pair}",
            corrupt_text=corrupt if corrupt_pair is None else f"{corrupt} / {corrupt_pair}",
        ),
    )


def _check_choice(value: str, choices: Sequence[str], setting: str) -> None:
    if value not in choices:
        raise InputError(f"unknown {setting} {value!r}; use one of: {', '.join(choices)}", setting=setting)


def _required(value: T | None, setting: str, message: str) -> T:
    if value is None:
        raise InputError(message, setting=setting)
    return value


def _differing_positions(clean: Encoding, corrupt: Encoding) -> tuple[int, ...]:
    """Where the two inputs' tokens differ; they must have the same number of tokens."""
    if len(clean) != len(corrupt):
        first = next((i for i, (a, b) in enumerate(zip(clean.tokens, corrupt.tokens)) if a != b), min(len(clean), len(corrupt)))
        raise InputError(
            f"the clean and corrupted inputs have {len(clean)} and {len(corrupt)} tokens; patching needs the same number. "
            f"They part at position {first}: clean {' '.join(clean.tokens[first : first + 4])!r} "
            f"vs corrupted {' '.join(corrupt.tokens[first : first + 4])!r}",
            setting="corrupt",
        )
    differing = tuple(int(i) for i in np.flatnonzero(clean.input_ids != corrupt.input_ids))
    if not differing:
        raise InputError("the clean and corrupted inputs are the same tokens; change the corrupted one", setting="corrupt")
    return differing


def _notes(probe: DecisionProbe | None, clean: Encoding, corrupt: Encoding) -> list[str]:
    notes = [
        f"{which} input cut to the model's maximum length"
        for which, encoding in (("the clean", clean), ("the corrupted", corrupt))
        if encoding.truncated
    ]
    if probe is not None:
        notes.append(
            f"probe for {probe.task} reads hidden state {probe.layer} ({probe.accuracy_text()}); components above it cannot change it"
        )
    return notes


def _activations(session: Session, encoding: Encoding) -> _Activations:
    """Run the input once, unpatched, keeping what every component wrote."""
    family = session.family
    run = _Activations(hidden=torch.empty(0))
    contexts: dict[int, Tensor] = {}
    attention: dict[int, Tensor] = {}
    feed_forward: dict[int, Tensor] = {}
    handles = []
    for index, layer in enumerate(session.layer_modules):

        def keep_attention(module: nn.Module, args: tuple[Any, ...], output: Tensor, index: int = index) -> None:
            contexts[index], attention[index] = args[0][0], output[0]

        def keep_feed_forward(module: nn.Module, args: tuple[Any, ...], output: Tensor, index: int = index) -> None:
            feed_forward[index] = output[0]

        handles.append(family.attention_output(layer).register_forward_hook(keep_attention))
        handles.append(family.feed_forward_output(layer).register_forward_hook(keep_feed_forward))
    inputs = session.tensors(encoding)
    try:
        with torch.inference_mode():
            outputs = session.run(inputs, hidden_states=True, encoder_only=True)
    finally:
        for handle in handles:
            handle.remove()
    run.hidden = torch.stack(outputs.hidden_states)[:, 0]
    count = session.num_layers
    run.contexts = [contexts[i] for i in range(count)]
    run.attention_writes = [attention[i] for i in range(count)]
    run.feed_forward_writes = [feed_forward[i] for i in range(count)]
    return run


def _metric(
    session: Session, metric: PatchMetric, encoding: Encoding, clean: _Activations, corrupt: _Activations, probe: DecisionProbe | None
) -> _Metric:
    """m as a function of the hidden states it reads, with the two answers or classes it compares."""
    kind, answers, classes = metric.name, metric.answers, metric.classes
    last = session.num_layers
    if kind == "preserve":
        target = clean.hidden[last].float()
        return _Metric(
            lambda hidden: -((hidden.float() - target) ** 2).sum((1, 2)),
            last,
            "minus the squared distance of the final hidden states to the clean run's",
        )
    if kind == "embedding":  # the embedding objective's measure: one input, no padding, every token pooled
        pooling = session.pooling

        def embedded(hidden: Tensor) -> Tensor:
            return torch.nn.functional.normalize(pooling(hidden, torch.ones(hidden.shape[:2], device=hidden.device)), dim=-1)

        reference = embedded(clean.hidden[last][None])
        return _Metric(
            lambda hidden: (embedded(hidden) * reference).sum(-1), last, f"cosine to the clean run's embedding ({pooling.source})"
        )
    if kind == "mlm":
        from bertscope.analyses.mlm import require_mlm_head

        require_mlm_head(session)
        positions = mask_positions(session.tokenizer, encoding)
        if not len(positions):
            raise InputError("the mlm metric reads the MLM head at a [MASK]; write one in both texts", setting="metric")
        position = int(positions[0])

        def logits(hidden: Tensor) -> Tensor:
            return session.mlm_head_logits(hidden[:, position])

        ids = _answer_ids(session, answers) if answers else _top_two(logits, clean, corrupt, last)
        names = session.tokenizer.convert_ids_to_tokens(list(ids))
        return _difference(logits, ids, last, f"logit({names[0]}) - logit({names[1]}) at the [MASK] (position {position})")
    if kind == "class":
        if not session.is_classifier:
            raise InputError(
                f"{session.info.architecture} is not a sequence classifier; use the mlm, probe or preserve metric", setting="metric"
            )
        id2label = cast(dict[int, str], session.model.config.id2label)  # a loaded classifier's, keyed by int (transformers)
        labels = [id2label.get(i, str(i)) for i in range(len(id2label))]  # len(id2label): the config's num_labels
        ids = _class_ids(classes, labels) if classes else _top_two(session.class_logits, clean, corrupt, last)
        return _difference(session.class_logits, ids, last, f"logit({labels[ids[0]]}) - logit({labels[ids[1]]}) of the classifier")
    if kind == "label":
        return _label_metric(session, metric, encoding, clean, corrupt)
    if kind == "answer":
        return _answer_metric(session, encoding, clean, corrupt)
    assert probe is not None  # the probe metric comes with its probe
    special = torch.as_tensor(encoding.special, device=session.device)

    def probe_logits(hidden: Tensor) -> Tensor:
        return probe.logits(hidden, special)

    ids = _class_ids(classes, probe.classes) if classes else _top_two(probe_logits, clean, corrupt, probe.layer)
    description = f"logit({probe.classes[ids[0]]}) - logit({probe.classes[ids[1]]}) of the {probe.task} probe at hidden state {probe.layer}"
    return _difference(probe_logits, ids, probe.layer, description)


def _label_metric(session: Session, metric: PatchMetric, encoding: Encoding, clean: _Activations, corrupt: _Activations) -> _Metric:
    """A token classifier's logit difference of two labels at one word's first piece (transformers' convention)."""
    from bertscope.analyses.attribution import chosen_word

    if not session.is_token_classifier:
        raise InputError(
            f"{session.info.architecture} is not a token classifier (…ForTokenClassification); use the preserve or embedding metric",
            setting="metric",
        )
    word = metric.word
    if word is None:  # the first word the inputs differ at
        word = next((encoding.word_ids[p] for p in _differing_words(encoding, clean, corrupt) if encoding.word_ids[p] is not None), None)
    index, position, text = chosen_word(encoding, word)
    last = session.num_layers

    def logits(hidden: Tensor) -> Tensor:
        return session.token_logits(hidden)[:, position]

    labels = session.label_names
    ids = _class_ids(metric.classes, labels) if metric.classes else _top_two(logits, clean, corrupt, last)
    return _difference(
        logits, ids, last, f"logit({labels[ids[0]]}) - logit({labels[ids[1]]}) at word {index} ({text}, position {position})"
    )


def _differing_words(encoding: Encoding, clean: _Activations, corrupt: _Activations) -> list[int]:
    """Positions of the first segment where the two runs' inputs differ (their embeddings do), in order."""
    changed = (clean.hidden[0] != corrupt.hidden[0]).any(-1).cpu().numpy()
    return [int(p) for p in np.flatnonzero(changed) if not encoding.special[p] and not encoding.segment_ids[p]]


def _answer_metric(session: Session, encoding: Encoding, clean: _Activations, corrupt: _Activations) -> _Metric:
    """A QA model's start + end logit of the clean answer span minus that of the corrupted run's answer (the clean
    runner-up span where both runs answer the same)."""
    from bertscope.analyses.attribution import answer_spans

    if not session.is_question_answerer:
        raise InputError(
            f"{session.info.architecture} is not a question-answering model (…ForQuestionAnswering); use the preserve metric",
            setting="metric",
        )
    last = session.num_layers

    def start_end(hidden: Tensor) -> Tensor:
        return session.token_logits(hidden).transpose(1, 2)  # [R, 2, T]

    with torch.inference_mode():
        clean_spans = answer_spans(start_end(clean.hidden[last][None])[0], encoding, 2)
        corrupt_span = answer_spans(start_end(corrupt.hidden[last][None])[0], encoding)[0]
    first = clean_spans[0]
    second = corrupt_span if corrupt_span != first else clean_spans[-1]
    (a, b), (c, d) = first, second

    def score(hidden: Tensor) -> Tensor:
        logits = start_end(hidden)
        return (logits[:, 0, a] + logits[:, 1, b]) - (logits[:, 0, c] + logits[:, 1, d])

    def words(span: tuple[int, int]) -> str:
        return session.tokenizer.convert_tokens_to_string(list(encoding.tokens[span[0] : span[1] + 1]))

    description = (
        f"start + end logit of the clean answer {words(first)!r} (tokens {a}-{b}) - of {words(second)!r} (tokens {c}-{d}), "
        f"{'the corrupted run' if second == corrupt_span else 'the clean runner-up'}'s answer"
    )
    return _Metric(score, last, description)


def _difference(logits: Callable[[Tensor], Tensor], ids: tuple[int, int], layer: int, description: str) -> _Metric:
    def score(hidden: Tensor) -> Tensor:
        values = logits(hidden)
        return values[:, ids[0]] - values[:, ids[1]]

    return _Metric(score, layer, description)


def _top_two(logits: Callable[[Tensor], Tensor], clean: _Activations, corrupt: _Activations, layer: int) -> tuple[int, int]:
    """The clean input's top choice against the corrupted input's (or the clean runner-up, when they agree)."""
    with torch.inference_mode():
        clean_order = torch.argsort(logits(clean.hidden[layer][None])[0], descending=True)
        corrupt_top = int(torch.argmax(logits(corrupt.hidden[layer][None])[0]))
    first = int(clean_order[0])
    return (first, corrupt_top) if corrupt_top != first else (first, int(clean_order[1]))


def _answer_ids(session: Session, answers: Sequence[str]) -> tuple[int, int]:
    if len(answers) != 2:
        raise InputError(f"give two answers to compare (e.g. is,are), not {len(answers)}", setting="answers")
    ids = []
    for answer in answers:
        index = answer_id(session.tokenizer, answer)
        if index is None:
            raise InputError(f"answer {answer!r} is not one token of this model's vocabulary; give one-token words", setting="answers")
        ids.append(index)
    return ids[0], ids[1]


def _class_ids(classes: Sequence[str], names: Sequence[str]) -> tuple[int, int]:
    if len(classes) != 2:
        raise InputError(f"give two classes to compare, not {len(classes)}; classes here: {', '.join(names)}", setting="classes")
    lowered = {name.lower(): index for index, name in enumerate(names)}
    ids = []
    for name in classes:
        if name.lower() in lowered:
            ids.append(lowered[name.lower()])
        elif name.isdigit() and int(name) < len(names):
            ids.append(int(name))
        else:
            raise InputError(f"class {name!r} is not one of: {', '.join(names)}", setting="classes")
    return ids[0], ids[1]


def _groups(
    session: Session,
    sweeps: Sequence[str],
    per_position: bool,
    base: _Activations,
    source: _Activations,
    length: int,
    effects: dict[str, np.ndarray],
) -> list[_Group]:
    """The patched runs of every sweep, grouped by the layer they start from."""
    family = session.family
    layers, heads = session.num_layers, session.num_heads
    device = base.hidden.device
    groups: list[_Group] = []
    if "heads" in sweeps:
        effects["heads"] = np.zeros((layers, heads))
        if per_position:
            effects["head_positions"] = np.zeros((layers, heads, length))
        for index, layer in enumerate(session.layer_modules):
            width = source.contexts[index].shape[-1]
            head_dim = width // heads
            spans: list[tuple[int, int | None]] = [(head, None) for head in range(heads)]
            if per_position:
                spans += [(head, position) for head in range(heads) for position in range(length)]
            mask = torch.zeros((len(spans), length, width), dtype=torch.bool, device=device)
            for row, (head, position) in enumerate(spans):
                mask[row, slice(None) if position is None else position, head * head_dim : (head + 1) * head_dim] = True

            def store(values: np.ndarray, index: int = index) -> None:
                effects["heads"][index] = values[:heads]
                if per_position:
                    effects["head_positions"][index] = values[heads:].reshape(heads, length)

            projection = family.attention_output(layer)
            groups.append(_Group(index, len(spans), store, replacements=[(projection, True, mask, source.contexts[index])]))
    if "layers" in sweeps:
        effects["layers"] = np.zeros((layers, 2))
        for index, layer in enumerate(session.layer_modules):
            rows = torch.eye(2, dtype=torch.bool, device=device)[:, :, None, None]  # row 0 attention, row 1 feed-forward
            width = source.attention_writes[index].shape[-1]
            attention_mask = rows[:, 0].expand(2, length, width)
            feed_forward_mask = rows[:, 1].expand(2, length, width)

            def store(values: np.ndarray, index: int = index) -> None:
                effects["layers"][index] = values

            groups.append(
                _Group(
                    index,
                    2,
                    store,
                    replacements=[
                        (family.attention_output(layer), False, attention_mask, source.attention_writes[index]),
                        (family.feed_forward_output(layer), False, feed_forward_mask, source.feed_forward_writes[index]),
                    ],
                )
            )
    if "positions" in sweeps:
        effects["positions"] = np.zeros((layers + 1, length))
        for index in range(layers + 1):

            def store(values: np.ndarray, index: int = index) -> None:
                effects["positions"][index] = values

            groups.append(_Group(index, length, store, residual=torch.eye(length, dtype=torch.bool, device=device)))
    return groups


def _patched_hidden(session: Session, base: _Activations, source: _Activations, group: _Group, rows: slice, read: int) -> Tensor:
    """The hidden states at index `read` of the group's rows `rows`, each run with its own patch."""
    count = rows.stop - rows.start
    start = group.start
    if read < start:
        return base.hidden[read].expand(count, -1, -1)  # nothing below the patch changes
    hidden = base.hidden[start].expand(count, -1, -1)
    if group.residual is not None:
        hidden = torch.where(group.residual[rows, :, None], source.hidden[start][None], hidden)
    if read == start:
        return hidden
    handles = []
    for module, on_input, mask, value in group.replacements:
        chosen = mask[rows]
        if on_input:
            handles.append(
                module.register_forward_pre_hook(
                    lambda module, args, chosen=chosen, value=value: (torch.where(chosen, value[None], args[0]), *args[1:])
                )
            )
        else:
            handles.append(
                module.register_forward_hook(
                    lambda module, args, output, chosen=chosen, value=value: torch.where(chosen, value[None], output)
                )
            )
    try:
        with torch.inference_mode(), session.lock:
            hidden = session.run_layers(hidden, start, read)
    finally:
        for handle in handles:
            handle.remove()
    return hidden
