"""bertscope's Python API: every analysis of the command line, for notebooks and scripts.

    import bertscope

    model = bertscope.load()                                  # the bundled all-MiniLM-L6-v2
    out = model.forward("The keys to the cabinet are on the table.", attentions=True)
    out.tokens, out.attentions.shape, out.hidden_states.shape  # [L, H, T, T], [L+1, T, D]
    stats = bertscope.patterns(model, ["The cat sat.", "A dog barked twice."])
    report = bertscope.probe(model, "upos", data="en_ewt-ud-train.conllu")

Results are frozen dataclasses holding numpy arrays, the same objects the CLI prints and
the explorer draws. Each function takes the command's options as keyword arguments, named
as the flags are (the CLI's `--batch-size` is `batch_size=`). A corpus analysis reads
`texts` (a string or strings, annotated `Sentence`s, or a `Corpus` already chosen), or
`data=` (a corpus file), or else the sample data shipped with bertscope. Every analysis
takes `progress` (called with each `Progress` record) and `cancel` (a `threading.Event`:
set it and the function raises `Cancelled`).

Notes a person should see (lines skipped in a file, sentences cut at the model's limit, a
probe that did not converge) take one route: they are part of the result (`result.notes`),
and calling an analysis also issues each as a `BertscopeNote` warning.

Each analysis is written once, as a stream: `bertscope.steps(bertscope.patterns, model, ...)`
takes exactly the arguments of `bertscope.patterns(model, ...)` and returns a generator of
`Progress` records whose last carries the result, and its notes in `notes` (earlier ones,
for patterns, the statistics so far in `partial`), for live displays: the explorer runs
these. A stream issues no warnings.

torch is imported when a function runs, not when this module is imported.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, Protocol, TypeVar

from bertscope import runtime as distributed
from bertscope.analyses.conditions import CacheDir, Conditions, JobOptions
from bertscope.base.errors import BertscopeError, BertscopeNote, Cancelled, InputError  # noqa: F401 - the first and third re-exported (bertscope.__all__)
from bertscope.base.progress import Progress, outcome, relay
from bertscope.data.corpus import ReadReport, Sentence, read_sentences, sample_corpus
from bertscope.data.probing_tasks import TREEBANK_TASKS
from bertscope.model.masks import Ablation, HeadMask

if TYPE_CHECKING:  # the result types; their modules are torch-free, the analyses are not
    from bertscope.analyses.attention.patterns_results import PatternResult
    from bertscope.analyses.attention.syntax_results import SyntaxResult
    from bertscope.analyses.attribution_results import Attribution
    from bertscope.analyses.erasure_results import ErasureResult
    from bertscope.analyses.geometry.results import ComparisonResult, GeometryResult
    from bertscope.analyses.importance.objectives import Objective
    from bertscope.analyses.importance.results import HeadImportance, Measurement, Pruning, PruningCurve
    from bertscope.analyses.mixing.results import Mixing, MixingAgreement
    from bertscope.analyses.mlm_results import ClozeResult, FillResult
    from bertscope.analyses.patching_results import PatchingResult
    from bertscope.analyses.probing.results import ProbeKind, ProbeReport
    from bertscope.analyses.sae.reading_results import SAEDirections, SAEHeads
    from bertscope.analyses.sae.results import LiveFeatures, SAEFeatures, SAETraining
    from bertscope.model.deferred import DeferredSession
    from bertscope.model.results import Encoding
    from bertscope.model.session import Session

T = TypeVar("T")
P = ParamSpec("P")


class AnalysisResult(Protocol):
    """What every analysis returns: a dataclass, with the notes a person should see (warned, or on the last record)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def notes(self) -> tuple[str, ...]: ...


R = TypeVar("R", bound=AnalysisResult)
ProgressCallback = Callable[[Any], None] | None

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def note(message: str) -> None:
    """Tell the caller something about the result, as a `BertscopeNote` warning attributed to the caller's line."""
    level, frame = 2, sys._getframe(1)  # 2: the function that called note
    caller: FrameType | None = frame
    while caller is not None and os.path.abspath(caller.f_code.co_filename).startswith(_PACKAGE):
        level, caller = level + 1, caller.f_back  # past bertscope's own frames, to the line that called it
    warnings.warn(message, BertscopeNote, stacklevel=level)


# --- an analysis, written once -------------------------------------------------------------------------

_STREAMS: dict[Callable[..., Any], Callable[..., Any]] = {}  # each analysis function -> the stream it was made from


def analysis(what: str, *, summed: bool = True) -> Callable[[Callable[P, Iterator[Progress[R]]]], Callable[P, R]]:
    """Make an analysis function from its stream (a function returning a generator of `Progress`).

    The function takes the stream's arguments, drains it (`progress` sees each record, `cancel`
    stops it), issues the result's notes as warnings and returns the result; under torchrun a
    failure on one rank stops all, and rank 0's progress counts the whole corpus (`summed`;
    False for a job whose steps already speak of the whole corpus). `what` names the job in
    the error when it ends without its result.
    """

    def make(stream: Callable[P, Iterator[Progress[R]]]) -> Callable[P, R]:
        signature = inspect.signature(stream)
        if not {"progress", "cancel"} <= set(signature.parameters):
            raise TypeError(f"the analysis {stream.__name__} must take progress= and cancel=")

        @functools.wraps(stream)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            options = signature.bind(*args, **kwargs)
            options.apply_defaults()
            progress, cancel = options.arguments["progress"], options.arguments["cancel"]
            with distributed.failures_shared():
                result = outcome(stream(*args, **kwargs), what, on_step=distributed.whole_corpus(progress, summed=summed), cancel=cancel)
            for message in result.notes:
                note(message)
            return result

        returned = re.fullmatch(r"Iterator\[Progress\[(.*)\]\]", str(signature.return_annotation))
        result_type = returned.group(1) if returned else "Any"  # what the function returns: the stream's result
        run.__annotations__ = {**stream.__annotations__, "return": result_type}
        run.__signature__ = signature.replace(return_annotation=result_type)  # type: ignore[attr-defined]  # typeshed gives functions no __signature__; inspect reads it
        _STREAMS[run] = stream
        return run

    return make


def steps(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Iterator[Progress[T]]:
    """`function`'s analysis as a stream: the same arguments, a generator of `Progress` records.

    The last record's `result` is what `function` returns, and its `notes` the result's notes
    (issued as no warning). Earlier records say the stage and how far it got (`done` of
    `total`), and for patterns and syntax the result so far (`partial`).
    """
    stream = _STREAMS.get(function)
    if stream is None:
        raise TypeError(f"{getattr(function, '__name__', function)!r} is not an analysis of bertscope.api; it has no steps")
    progress = inspect.signature(stream).bind(*args, **kwargs).arguments.get("progress")
    run = stream(*args, **kwargs)  # bad input is refused here, before the first record

    def carried() -> Iterator[Progress[T]]:
        for step in run:
            if step.finished:
                step = replace(step, notes=tuple(step.result.notes))
            if progress is not None:
                progress(step)
            yield step

    return carried()


def _finished(run: Iterable[Progress[T]], finish: Callable[[T], T]) -> Iterator[Progress[T]]:
    """`run`, its result made `finish(result)`."""
    for step in run:
        yield replace(step, result=finish(step.result)) if step.result is not None else step  # the last step, finished


def _noted(run: Iterable[Progress[R]], notes: Callable[[R], Iterable[str]]) -> Iterator[Progress[R]]:
    """`run`, its result's `notes` set to `notes(result)` (what reading the data said, then the analysis)."""
    return _finished(run, lambda result: replace(result, notes=tuple(notes(result))))


class _CutCounted(AnalysisResult, Protocol):
    """A corpus result that counts what was cut to fit the model (tokens or sentences)."""

    @property
    def truncated(self) -> int: ...


C = TypeVar("C", bound=_CutCounted)


def _read_and_cut(run: Iterable[Progress[C]], sentences: Corpus, cut: Callable[[int], str]) -> Iterator[Progress[C]]:
    """`run`, its result's notes what reading `sentences` said and, where the result counts a cut, `cut(count)`."""
    return _noted(run, lambda result: (*sentences.read_notes(), *([cut(result.truncated)] if result.truncated else [])))


# --- the model and the data ------------------------------------------------------------------------------


def load(
    model: str | None = None,
    *,
    device: str = "auto",
    dtype: str = "float32",
    allow_download: bool = False,
    cpu_linear: str | None = None,
    max_length: int | None = None,
) -> Session:
    """A model ready for analysis: None for the bundled all-MiniLM-L6-v2, a directory, or a name in the HF cache.

    `device` is auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps; `dtype` float32,
    float16 or bfloat16. Inputs longer than `max_length` tokens are cut (default: the model's
    own limit, its position embeddings; not the tokenizer file's `model_max_length`, which a
    model saved with another's tokenizer states wrongly). Nothing is downloaded unless `allow_download`. On the CPU the
    linear layers take the faster of torch's BLAS and oneDNN, timed on this machine
    (`cpu_linear`: auto, onednn or blas; default `$BERTSCOPE_CPU_LINEAR`, else auto).
    """
    with warnings.catch_warnings():
        # transformers imports tqdm.auto, which in a notebook without ipywidgets warns on import; bertscope shows no bar of it
        warnings.filterwarnings("ignore", message="IProgress not found")
        from bertscope.model import cpu_linear as linear_kernels
        from bertscope.model.session import Session

    linear_kernels.bound_primitive_cache()  # before the model's first pass: one primitive per batch shape
    device = distributed.start(device)  # under torchrun: join the process group; auto is cuda:LOCAL_RANK or the CPU
    session = Session.open(model, device=device, dtype=dtype, allow_download=allow_download, max_length=max_length)
    session.choose_cpu_linear(cpu_linear)
    return session


@dataclass
class Corpus:
    """Sentences to analyse and where they came from (`source`, as the CLI's JSON names it)."""

    sentences: Iterable[Sentence]
    source: str
    report: ReadReport

    def read_notes(self) -> tuple[str, ...]:
        """What reading skipped, once the sentences have been read."""
        return (self.report.summary(),) if self.report.skipped else ()


Texts = str | Iterable[str | Sentence] | Corpus | None  # a sentence, sentences, or a corpus already chosen


def corpus(
    texts: Texts = None, *, data: str | Path | None = None, format: str = "auto", limit: int | None = None, sample: bool = True
) -> Corpus:
    """The sentences of `texts` or of the file `data` (streamed), or else the sample corpus.

    A `Corpus` already chosen (as the CLI chooses it, before the model loads) is taken as it
    is. With `sample=False` and neither given, an empty corpus (an analysis with its own
    default data).
    """
    if isinstance(texts, Corpus):
        return texts
    report = ReadReport()
    if texts is not None and data is not None:
        raise InputError("give either a text or a corpus file, not both", setting="data")
    if texts is not None:
        texts = [texts] if isinstance(texts, str) else list(texts)[:limit]
        if not texts or not all((text.text if isinstance(text, Sentence) else text).strip() for text in texts):
            raise InputError("the text is empty; give a sentence, or a corpus file", setting="data")
        report.sentences = len(texts)
        location = "TEXT" if len(texts) == 1 else "text {}"
        sentences = [
            text if isinstance(text, Sentence) else Sentence(text=text, location=location.format(i + 1)) for i, text in enumerate(texts)
        ]
        return Corpus(sentences, "TEXT", report)
    if data is None and not sample:
        return Corpus([], "", report)
    if data is None:  # the sample corpus, in its own format whatever `format` says of a file
        data, format = sample_corpus(), "auto"
    return Corpus(read_sentences(data, format, limit=limit, report=report), str(data), report)


def encoded(model: Session, text: str, pair: str | None = None) -> Encoding:
    """The text tokenised for the model, with a note when it had to be cut to fit."""
    encoding = model.encode(text, pair)
    for message in _cut_notes(model, encoding):
        note(message)
    return encoding


def _cut_notes(model: Session, encoding: Encoding) -> tuple[str, ...]:
    if not encoding.truncated:
        return ()
    total = len(encoding) + encoding.truncated
    return (f"the input is {total} tokens; cut {encoding.truncated} to fit the model's maximum of {model.max_length}",)


def head_mask(model: Session | DeferredSession, mask: str | HeadMask | None) -> HeadMask:
    """A mask spec (`0:3,2:*`) or mask, checked against the model."""
    return mask if isinstance(mask, HeadMask) else model.mask(mask)


def _conditions(model: Session | DeferredSession, mask: str | HeadMask | None, ablation: Ablation) -> Conditions:
    """What the passes run under, from the flat keywords a caller types (`mask=`, `ablation=`): the one place they become
    the value the core takes whole (`JobOptions`, the other, is built from `batch_size=`, `seed=`, `cache_dir=`, `cancel=`)."""
    return Conditions(head_mask(model, mask), ablation)


# --- attention over a corpus -------------------------------------------------------------------------------


@analysis("pattern statistics")
def patterns(
    model: Session,
    texts: Texts = None,
    *,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    batch_size: int | None = None,
    norms: bool = False,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[PatternResult]]:
    """Attention statistics and Kovaleva pattern classes of every head, streamed over a corpus.

    `norms=True` also takes the shares to [CLS], [SEP], punctuation, self, previous and next
    of the value-weighted norms ‖α_ij f_h(x_j)‖ (Kobayashi et al. 2020), from the same passes:
    `result.statistics["norm_sep"]` beside `result.statistics["sep"]`. The records' `partial`
    holds the statistics so far.
    """
    from bertscope.analyses.attention.patterns import pattern_statistics

    sentences = corpus(texts, data=data, format=format, limit=limit)
    run = pattern_statistics(
        model,
        distributed.shard(sentences.sentences),
        norms=norms,
        conditions=_conditions(model, mask, ablation),
        job=JobOptions(batch_size=batch_size, cancel=cancel),
    )
    return _read_and_cut(
        run, sentences, lambda count: f"{count:,} tokens were cut from sentences longer than the model's maximum of {model.max_length}"
    )


# --- heads that track syntax -------------------------------------------------------------------------------


def treebank(texts: Iterable[Sentence] | Corpus | None = None, *, data: str | Path | None = None, limit: int | None = None) -> Corpus:
    """A dependency treebank to read: annotated sentences, a CoNLL-U file `data` (streamed), or else the shipped sample treebank.

    A file that is not CoNLL-U, or sentences without dependency heads, are refused at once, before any model runs.
    """
    from bertscope.data.corpus import detect_format

    if isinstance(texts, Corpus):
        return texts
    if texts is not None and data is not None:
        raise InputError("give either annotated sentences or a treebank file, not both", setting="data")
    report = ReadReport()
    if texts is None:
        path = sample_corpus("conllu") if data is None else data
        if detect_format(path) != "conllu":
            raise InputError(f"{path} is not a CoNLL-U treebank; give a .conllu file with dependency heads", setting="data")
        return Corpus(read_sentences(path, "conllu", limit=limit, report=report), str(path), report)
    sentences = [texts] if isinstance(texts, (str, Sentence)) else list(texts)[:limit]
    if not all(isinstance(sentence, Sentence) and sentence.heads is not None for sentence in sentences):
        raise InputError("syntax needs sentences with dependency heads; give a CoNLL-U file as data=", setting="data")
    report.sentences = len(sentences)
    return Corpus(sentences, "sentences", report)


def check_relations(relations: Iterable[str] | None) -> list[str] | None:
    """Relation names as the treebank labels them (Clark et al.'s `dobj` is `obj`), each a UD v2 relation."""
    from bertscope.analyses.attention.syntax_results import UD_RELATIONS, is_known_relation, relation_name

    if relations is None:
        return None
    names = [relation_name(name) for name in relations if name.strip()]
    unknown = [name for name in names if not is_known_relation(name)]
    if unknown or not names:
        raise InputError(
            f"unknown dependency relation {unknown[0]!r}; use UD v2 relations such as "
            f"{', '.join(sorted(UD_RELATIONS)[:6])}, … (subtypes as nmod:poss)"
            if unknown
            else "no relation named; give UD v2 relations such as det,nsubj,obj",
            setting="relations",
        )
    return list(dict.fromkeys(names))


@analysis("syntax heads")
def syntax(
    model: Session,
    texts: Iterable[Sentence] | Corpus | None = None,
    *,
    data: str | Path | None = None,
    limit: int | None = None,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    batch_size: int | None = None,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[SyntaxResult]]:
    """Heads that track dependency relations (Clark et al. 2019 §4), streamed over a treebank.

    For every relation of the treebank (`texts`, annotated sentences; `data`, a CoNLL-U file;
    else the shipped sample treebank) and both directions, each head's share of the arcs whose
    most-attended other word (word-level attention, [CLS]/[SEP] left out) is the right one,
    against the best fixed-offset baseline (offsets -3 to 3). `result.rows(relations, min_count)`
    gives what `bertscope syntax --json` prints; the counts are integers, summable across shards.
    The records' `partial` holds the counts so far.
    """
    from bertscope.analyses.attention.syntax import syntax_heads

    sentences = treebank(texts, data=data, limit=limit)
    run = syntax_heads(
        model,
        distributed.shard(sentences.sentences),
        conditions=_conditions(model, mask, ablation),
        job=JobOptions(batch_size=batch_size, cancel=cancel),
    )
    return _read_and_cut(
        run,
        sentences,
        lambda count: (
            f"{count:,} sentences were cut to the model's maximum of {model.max_length} tokens; "
            "arcs to the words beyond the cut are not counted"
        ),
    )


# --- what each layer knows ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeData:
    """A probing task's sentences: train, and dev and test (None: split from train); where they came from, and notes on the choice."""

    train: list[Sentence]
    dev: list[Sentence] | None = None
    test: list[Sentence] | None = None
    source: str = "sentences"
    notes: tuple[str, ...] = field(default=())


SentencesOrFile = str | Path | Iterable[Sentence] | None


def probe_sentences(
    task: str,
    texts: Iterable[Sentence] | ProbeData | None = None,
    *,
    data: str | Path | None = None,
    dev: SentencesOrFile = None,
    test: SentencesOrFile = None,
    format: str = "auto",
    limit: int | None = None,
) -> ProbeData:
    """The sentences a probe for `task` trains and scores on: `texts` (labelled or annotated sentences),
    or the file `data` (dev and test: files or sentences), or else the task's built-in data.

    Torch-free and read at once, so that the CLI refuses a wrong file before the model loads.
    """
    from bertscope.data.probing_tasks import TASKS, generate

    if isinstance(texts, ProbeData):
        return texts
    if texts is not None and data is not None:
        raise InputError("give either training sentences or a training file, not both", setting="data")
    if texts is None and data is None:
        if dev is not None or test is not None:
            raise InputError("a dev or test file needs a training file too", setting="data")
        if task in TREEBANK_TASKS:
            built = built_in_treebank(limit)
            message = (
                f"no data given: probing a generated treebank of {built.report.sentences:,} sentences (bertscope's built-in "
                "grammar; the treebank command writes it out as CoNLL-U)"
            )
            return ProbeData(list(built.sentences), source=built.source, notes=(message,))
        if task not in TASKS:
            raise InputError(
                f"unknown task {task!r} without data; built-in tasks: {', '.join((*TASKS, *TREEBANK_TASKS))}; or give a corpus file",
                setting="task",
            )
        return ProbeData(generate(task), source=f"built-in task {task}")
    reports = []

    def read(chosen: SentencesOrFile) -> list[Sentence] | None:
        if chosen is None:
            return None
        if not isinstance(chosen, (str, Path)):
            return [_only_the_columns_of(task, sentence) for sentence in list(chosen)[:limit]]
        report = ReadReport()
        sentences = [_only_the_columns_of(task, sentence) for sentence in read_sentences(chosen, format, limit=limit, report=report)]
        reports.append(report)
        return sentences

    train = read(data if texts is None else texts)
    if not train:
        raise InputError("no training sentences; give a corpus file with at least one sentence", setting="data")
    words = train[0].words is not None
    if words and task not in TREEBANK_TASKS:
        raise InputError(f"a CoNLL-U file probes {', '.join(TREEBANK_TASKS)}; not {task!r}", setting="task")
    if not words and task in TREEBANK_TASKS:
        raise InputError(f"task {task!r} needs a CoNLL-U file; {data or 'the sentences given'} is not one", setting="task")
    notes = tuple(report.summary() for report in reports if report.skipped)
    return ProbeData(train, read(dev), read(test), str(data) if texts is None else "sentences", notes)


_TASK_COLUMNS = {"upos": {"upos"}, "xpos": {"xpos"}, "deprel": {"deprels"}, "depth": {"heads", "upos"}, "distance": {"heads", "upos"}}


def _only_the_columns_of(task: str, sentence: Sentence) -> Sentence:
    """The sentence without the treebank columns `task` never reads: probing holds every sentence of its
    splits, and each unused column is a tuple a word long."""
    if sentence.words is None or task not in _TASK_COLUMNS:
        return sentence
    unused: dict[str, Any] = {column: None for column in ("upos", "xpos", "heads", "deprels") if column not in _TASK_COLUMNS[task]}
    return replace(sentence, **unused)


def built_in_treebank(size: int | None = None) -> Corpus:
    """The generated treebank (data.treebank: bertscope's grammar, every word annotated), for word and
    structural tasks given no file; `size` sentences (None: its default)."""
    from bertscope.data.treebank import DEFAULT_SENTENCES, generate_treebank

    size = size or DEFAULT_SENTENCES
    report = ReadReport()
    report.sentences = size
    return Corpus(generate_treebank(size), f"built-in treebank ({size:,} sentences)", report)


def task_sentences(
    task: str,
    texts: Iterable[Sentence] | ProbeData | None = None,
    *,
    data: str | Path | None = None,
    dev: SentencesOrFile = None,
    test: SentencesOrFile = None,
    format: str = "auto",
    limit: int | None = None,
    seed: int = 0,
) -> dict[str, list[Sentence]]:
    """The train, dev and test sentences `probe` trains and scores on for the same arguments: `{"train": [...],
    "dev": [...], "test": [...]}`, each a list of `Sentence` (`.text`, `.label` for sentence tasks, `.words` and
    `.upos`/`.xpos`/`.deprels`/`.heads` for treebank tasks). To check a probe with a pipeline of one's own."""
    from bertscope.data.splits import make_splits

    chosen = probe_sentences(task, texts, data=data, dev=dev, test=test, format=format, limit=limit)
    splits = make_splits(chosen.train, chosen.dev, chosen.test, seed=seed)
    return {"train": splits.train, "dev": splits.dev, "test": splits.test}


@analysis("probing", summed=False)
def probe(
    model: Session | DeferredSession,
    task: str,
    texts: Iterable[Sentence] | ProbeData | None = None,
    *,
    data: str | Path | None = None,
    dev: SentencesOrFile = None,
    test: SentencesOrFile = None,
    format: str = "auto",
    limit: int | None = None,
    word_pooling: str = "first",
    sentence_pooling: str = "cls",
    kind: ProbeKind = "linear",
    control: bool = True,
    random_baseline: bool = True,
    min_examples: int = 2,
    cache_dir: CacheDir = None,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    seed: int = 0,
    mdl: bool = False,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[ProbeReport]]:
    """A probe per layer for `task`, with its baselines (control task, random-init model).

    `task`: upos, xpos, deprel, depth or distance (a CoNLL-U `data`, else the built-in
    treebank), a SentEval task of `data`, or a built-in task. `texts` may give the training
    sentences already read (or the `ProbeData` of `probe_sentences`); dev and test default to
    splits of train. `kind`: the probe, linear or mlp. `cache_dir=False` keeps no cache. `mdl`: each
    layer's description length too (Voita & Titov 2020's online code, and the control task's),
    on the same features: `layers[l]["mdl"]`, `report.compression()`, `report.figure(mdl=True)`;
    for classification tasks (not depth or distance).
    """
    check_mdl(task, mdl)
    from bertscope.analyses.probing.run import run_probe
    from bertscope.data.splits import make_splits

    chosen = probe_sentences(task, texts, data=data, dev=dev, test=test, format=format, limit=limit)
    splits = make_splits(chosen.train, chosen.dev, chosen.test, seed=seed)
    run = run_probe(
        model,
        task,
        splits,
        word_pooling=word_pooling,
        sentence_pooling=sentence_pooling,
        kind=kind,
        control=control,
        random_baseline=random_baseline,
        min_examples=min_examples,
        mdl=mdl,
        conditions=_conditions(model, mask, ablation),
        job=JobOptions(seed=seed, cache_dir=cache_dir, cancel=cancel),
    )
    return _noted(run, lambda report: (*chosen.notes, *report.notes))


def check_mdl(task: str, mdl: bool) -> None:
    """Refuse, before any model loads, a description length for a task that has none (torch-free: the CLI calls it)."""
    from bertscope.analyses.probing.results import MDL_STRUCTURAL
    from bertscope.data.probing_tasks import STRUCTURAL_TASKS

    if mdl and task in STRUCTURAL_TASKS:
        raise InputError(MDL_STRUCTURAL, setting="mdl")


@analysis("erasure", summed=False)
def erase(
    model: Session,
    task: str,
    texts: Iterable[Sentence] | ProbeData | None = None,
    *,
    layer: int | None = None,
    data: str | Path | None = None,
    dev: SentencesOrFile = None,
    test: SentencesOrFile = None,
    format: str = "auto",
    limit: int | None = None,
    measure: str | None = None,
    probe_layer: int | None = None,
    word_pooling: str = "first",
    sentence_pooling: str = "cls",
    min_examples: int = 2,
    cache_dir: CacheDir = None,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    batch_size: int | None = None,
    seed: int = 0,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[ErasureResult]]:
    """Amnesic probing (Elazar et al. 2021) with LEACE: erase `task` from hidden-state `layer` (0 = embeddings; None:
    the last) inside the forward pass, and say what the model loses.

    The eraser is fitted on the train split's features at `layer`. The result holds the linear guardedness (a fresh
    probe for `task` at `layer` and above, before and after), the rank removed and its share of the variance, and
    the `measure` on the test split as it is, erased, and with as many random directions removed: `mlm` (a model
    with an MLM head; the default there), `preserve` (the default otherwise), `class` (a sequence classifier and
    labelled sentences) or `probe:TASK2` (a probe for another task at `probe_layer`, default the last). The data
    are chosen as `probe`'s; `mask` switches heads off throughout.
    """
    check_erasure(task, measure)
    from bertscope.analyses.erasure import run_erasure
    from bertscope.data.splits import make_splits

    chosen = erasure_sentences(task, measure, texts, data=data, dev=dev, test=test, format=format, limit=limit)
    splits = make_splits(chosen.train, chosen.dev, chosen.test, seed=seed)
    run = run_erasure(
        model,
        task,
        splits,
        layer=model.num_layers if layer is None else layer,
        measure=measure,
        probe_layer=probe_layer,
        word_pooling=word_pooling,
        sentence_pooling=sentence_pooling,
        min_examples=min_examples,
        conditions=_conditions(model, mask, ablation),
        job=JobOptions(batch_size=batch_size, seed=seed, cache_dir=cache_dir, cancel=cancel),
    )
    return _noted(run, lambda result: (*chosen.notes, *result.notes))


def check_erasure(task: str, measure: str | None) -> None:
    """Refuse, before any model loads, what erasure cannot do: a structural task, a measure it does not know or cannot
    take with this task (torch-free: the CLI calls it)."""
    from bertscope.analyses.erasure_results import check_measure
    from bertscope.data.probing_tasks import STRUCTURAL_TASKS

    if task in STRUCTURAL_TASKS:
        raise InputError(f"task {task!r} is a structural probe; erasure takes classification tasks", setting="task")
    check_measure(task, measure)


def erasure_sentences(
    task: str,
    measure: str | None,
    texts: Iterable[Sentence] | ProbeData | None = None,
    *,
    data: str | Path | None = None,
    dev: SentencesOrFile = None,
    test: SentencesOrFile = None,
    format: str = "auto",
    limit: int | None = None,
) -> ProbeData:
    """`probe_sentences` for `task`, with the treebank columns a `probe:TASK2` measure reads kept as well."""
    chosen = probe_sentences(task, texts, data=data, dev=dev, test=test, format=format, limit=limit)
    other = (measure or "").partition(":")[2]
    if not other or other == task or other not in _TASK_COLUMNS or isinstance(texts, ProbeData):
        return chosen
    extra = probe_sentences(other, texts, data=data, dev=dev, test=test, format=format, limit=limit)
    columns = _TASK_COLUMNS[other]

    def merged(ours: list[Sentence] | None, theirs: list[Sentence] | None) -> list[Sentence] | None:
        if ours is None or theirs is None:
            return ours
        return [replace(a, **{column: getattr(b, column) for column in columns}) for a, b in zip(ours, theirs, strict=True)]

    return replace(
        chosen, train=merged(chosen.train, extra.train) or [], dev=merged(chosen.dev, extra.dev), test=merged(chosen.test, extra.test)
    )


# --- which heads matter ------------------------------------------------------------------------------------


def check_objective_data(name: str, texts: Texts, data: str | Path | None) -> None:
    """Refuse, before any model loads, an objective that cannot be measured on no data (torch-free: the CLI calls it)."""
    if texts is not None or data is not None:
        return
    if name == "classification":
        raise InputError("the classification objective needs labelled data: a SentEval file (split<TAB>label<TAB>sentence)", setting="data")
    if name == "token-classification":
        raise InputError(
            "the token-classification objective needs tagged words: a CoNLL-2003 file (a token and its label a line) "
            "or a CoNLL-U file (--label-column upos, xpos or deprel)",
            setting="data",
        )
    if name == "qa":
        raise InputError("the qa objective needs questions with their contexts and answers: a SQuAD-1.1 or 2.0 JSON file", setting="data")


def objective_corpus(
    name: str,
    texts: Texts = None,
    *,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    label_column: str | None = None,
) -> Corpus:
    """The sentences objective `name` is measured on, read as it reads them: tagged words for token-classification
    (CoNLL-2003, or a CoNLL-U file's `label_column`), scored pairs for similarity (an STS-style TSV; default: the
    shipped sample pairs), and otherwise as `corpus` reads them (torch-free: the CLI reads them before the model loads)."""
    if label_column is not None and name != "token-classification":
        raise InputError(f"a label column is for the token-classification objective; {name} takes none", setting="label_column")
    if isinstance(texts, Corpus) or texts is not None or name not in ("token-classification", "qa", "similarity"):
        return corpus(texts, data=data, format=format, limit=limit, sample=name != "probe")
    report = ReadReport()
    if name == "qa":
        from bertscope.data.task_files import read_squad

        check_objective_data(name, texts, data)
        assert data is not None  # refused above without it
        if format != "auto":
            raise InputError(f"the qa objective reads SQuAD JSON, not {format}; leave the format to auto", setting="data_format")
        return Corpus(read_squad(data, limit=limit, report=report), str(data), report)
    if name == "similarity":
        from bertscope.data.task_files import read_scored_pairs, sample_pairs

        source = data if data is not None else sample_pairs()
        return Corpus(read_scored_pairs(source, limit=limit, report=report), str(source), report)
    from bertscope.data.task_files import read_tagged

    check_objective_data(name, texts, data)
    assert data is not None  # refused above without it
    if format not in ("auto", "conllu"):
        raise InputError(
            f"the token-classification objective reads CoNLL-2003 or CoNLL-U files, not {format}; leave the format to auto",
            setting="data_format",
        )
    return Corpus(read_tagged(data, label_column=label_column, limit=limit, report=report), str(data), report)


def objective(
    model: Session,
    name: str,
    texts: Texts = None,
    *,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    label_column: str | None = None,
    task: str | None = None,
    probe_layer: int | None = None,
    batch_size: int | None = None,
    seed: int = 0,
) -> Objective:
    """What importance and pruning are measured on, prepared over the data once: hand it to `importance`,
    `pruning_curve`, `prune` or `measure` in place of the objective's name to measure it again.

    `name`: mlm (an MLM head), classification (a classifier and labelled data), probe
    (`task`, `probe_layer`; no data: a built-in task), preserve (any encoder), token-classification
    (a token classifier and a CoNLL-2003 file, or a CoNLL-U file's `label_column`: upos, xpos,
    deprel), qa (an extractive question-answering model and a SQuAD-1.1 or 2.0 JSON file),
    similarity (pairs with gold scores, an STS-style TSV; no data: the shipped sample pairs), embedding
    (any encoder, any text). Its `source` says where the data came from; its `notes` go on to the
    results measured on it.
    """
    from bertscope.analyses.importance.objectives import check_objective, make_objective

    check_objective(model, name)
    check_objective_data(name, texts, data)
    sentences = objective_corpus(name, texts, data=data, format=format, limit=limit, label_column=label_column)
    with distributed.failures_shared():  # the probe objective trains on rank 0 alone: its failure must stop the others
        prepared = make_objective(
            model, name, list(sentences.sentences), batch_size=batch_size, seed=seed, probe_task=task, probe_layer=probe_layer
        )
    ignored = [f"a probing task is for the probe objective; the {name} objective ignores it"] if name != "probe" and task else []
    prepared.notes[:0] = [*ignored, *sentences.read_notes()]
    prepared.source = sentences.source or f"built-in task {task}"
    return prepared


def _prepared(model: Session, name: str | Objective, texts: Texts, job: JobOptions, **choice: Any) -> Objective:
    """The objective `name` prepared over the data `choice` names (`data`, `format`, `limit`, `label_column`, `task`,
    `probe_layer`)
    with `job`'s batch size and seed, or as it is when it was prepared already."""
    if isinstance(name, str):
        return objective(model, name, texts, batch_size=job.batch_size, seed=job.seed, **choice)
    if texts is not None or choice.get("data") is not None:
        raise InputError("a prepared objective has its data already; give the data when naming the objective", setting="data")
    return name


def _ranking(
    prepared: Objective, ranking: HeadImportance | None, method: str, ablation: Ablation, normalize: bool, job: JobOptions
) -> Iterator[Progress[HeadImportance]]:
    """Steps whose result is `ranking`, or else the head importance estimated by `method` (what `importance` streams)."""
    from bertscope.analyses.importance.run import head_importance

    if ranking is not None:
        return iter([Progress("head importance", 1, 1, ranking)])
    return head_importance(prepared, method, ablation=ablation, normalize=normalize, seed=job.seed, cancel=job.cancel)


@analysis("head importance")
def importance(
    model: Session,
    objective: str | Objective,
    texts: Texts = None,
    *,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    label_column: str | None = None,
    task: str | None = None,
    probe_layer: int | None = None,
    method: str = "gradient",
    ablation: Ablation = "zero",
    normalize: bool = True,
    batch_size: int | None = None,
    seed: int = 0,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[HeadImportance]]:
    """How much each head matters for an objective (its name, or one `objective` prepared):
    Michel et al.'s gradient, or exact ablation."""
    job = JobOptions(batch_size=batch_size, seed=seed, cancel=cancel)
    prepared = _prepared(
        model, objective, texts, job, data=data, format=format, limit=limit, label_column=label_column, task=task, probe_layer=probe_layer
    )
    return _ranking(prepared, None, method, ablation, normalize, job)


def measure(prepared: Objective, mask: str | HeadMask | None = None, ablation: Ablation = "zero") -> Measurement:
    """The objective's loss and metric with the heads of `mask` switched off (quick to repeat: the explorer's toggles)."""
    from bertscope.analyses.importance import run as head_scores

    chosen = head_mask(prepared.session, mask)
    return head_scores.measure(prepared, chosen if len(chosen) else None, ablation)


@analysis("pruning curve", summed=False)
def pruning_curve(
    model: Session,
    objective: str | Objective,
    texts: Texts = None,
    *,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    label_column: str | None = None,
    task: str | None = None,
    probe_layer: int | None = None,
    ranking: HeadImportance | None = None,
    method: str = "gradient",
    ablation: Ablation = "zero",
    normalize: bool = True,
    batch_size: int | None = None,
    seed: int = 0,
    step: float = 0.1,
    reestimate: bool = False,
    max_drop: float = 0.01,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[PruningCurve]]:
    """The objective as ever more of the least important heads are removed, `step` of them at a time,
    by `ranking` (a `HeadImportance` at hand; None: estimated first by `method`)."""
    from bertscope.analyses.importance.run import check_fraction
    from bertscope.analyses.importance.run import pruning_curve as curve

    check_fraction(step, "step")
    job = JobOptions(batch_size=batch_size, seed=seed, cancel=cancel)
    prepared = _prepared(
        model, objective, texts, job, data=data, format=format, limit=limit, label_column=label_column, task=task, probe_layer=probe_layer
    )
    ranking_steps = _ranking(prepared, ranking, method, ablation, normalize, job)

    def run() -> Iterator[Progress[PruningCurve]]:
        chosen = yield from relay(ranking_steps)
        if chosen is not None:
            yield from curve(
                prepared,
                importance=chosen,
                method=method,
                ablation=ablation,
                step=step,
                reestimate=reestimate,
                normalize=normalize,
                max_drop=max_drop,
                cancel=cancel,
            )

    return run()


@analysis("pruning")
def prune(
    model: Session,
    objective: str | Objective,
    texts: Texts = None,
    *,
    fraction: float,
    output: str | Path | None = None,
    weights: str = "sliced",
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    label_column: str | None = None,
    task: str | None = None,
    probe_layer: int | None = None,
    ranking: HeadImportance | None = None,
    method: str = "gradient",
    ablation: Ablation = "zero",
    normalize: bool = True,
    batch_size: int | None = None,
    seed: int = 0,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[Pruning]]:
    """Choose the least important `fraction` of all heads (by `ranking`, or estimated first by `method`),
    measure the objective without them, and with `output` write a copy of the model without them:
    `weights` sliced (the heads cut out of the weights: smaller and faster, for bertscope and
    transformers 4) or zeroed (same shapes, their output projection zeroed: loads in any transformers)."""
    from bertscope.analyses.importance.results import check_pruned_copy, check_weights
    from bertscope.analyses.importance.run import check_fraction

    check_fraction(fraction)
    check_weights(weights)
    if output is not None:  # what the copy cannot be is refused before any head is scored
        from bertscope.data.files import check_new_directory
        from bertscope.model.pruning import pruned_heads_of

        check_pruned_copy(weights, model.loaded.family, bool(pruned_heads_of(model.model.config)))
        check_new_directory(Path(output))
    job = JobOptions(batch_size=batch_size, seed=seed, cancel=cancel)
    prepared = _prepared(
        model, objective, texts, job, data=data, format=format, limit=limit, label_column=label_column, task=task, probe_layer=probe_layer
    )
    ranking_steps = _ranking(prepared, ranking, method, ablation, normalize, job)

    def run() -> Iterator[Progress[Pruning]]:
        chosen = yield from relay(ranking_steps)
        if chosen is not None:
            yield Progress("pruning", 1, 1, _pruned(model, prepared, chosen, fraction, output, weights, method, ablation))

    return run()


def _pruned(
    model: Session,
    prepared: Objective,
    ranking: HeadImportance,
    fraction: float,
    output: str | Path | None,
    weights: str,
    method: str,
    ablation: Ablation,
) -> Pruning:
    """Remove the least important `fraction` of the heads by `ranking`, measure, and with `output` write the pruned copy."""
    from bertscope.analyses.importance.results import Pruning
    from bertscope.analyses.importance.run import pruned_set

    total = model.num_layers * model.num_heads
    count = round(fraction * total) - len(pruned_set(model))
    if count <= 0:
        raise InputError(
            f"a fraction of {fraction:g} is {round(fraction * total)} of {total} heads, and the model already has "
            f"{total - len(ranking.order())} pruned; give a larger fraction"
        )
    chosen = ranking.least_important(count)
    if output is not None:
        from bertscope.analyses.importance.pruned_export import least_important_shared, weight_sharing_groups

        groups = weight_sharing_groups(model)
        if any(len(layers) > 1 for layers in groups):  # ALBERT: a saved copy removes a head from every application
            chosen = least_important_shared(ranking, groups, count)
    mask = HeadMask(model.num_layers, model.num_heads, frozenset(chosen))
    after = measure(prepared, mask)  # a count above 0: the mask switches heads off
    pruning = Pruning(
        objective=prepared.name,
        metric=prepared.metric,
        source=prepared.source,
        mask=mask,
        importance=ranking,
        loss_after=after.loss,
        metric_after=after.metric,
        written=None,
        method=method,
        ablation=ablation,
        fraction=fraction,
        notes=ranking.notes,
    )
    if output is not None and distributed.is_main():  # under torchrun, rank 0 writes the model
        from bertscope.analyses.importance.pruned_export import write_pruned_model

        record = pruning.record()
        record["ranking_ablation"] = record.pop("ablation")
        written = write_pruned_model(model, chosen, output, timing_texts=prepared.texts, weights=weights, extra=record)
        pruning = replace(pruning, written=written)
    return pruning


# --- the masked-LM head ------------------------------------------------------------------------------------


@analysis("fill")
def fill(
    model: Session,
    text: str,
    *,
    top: int = 10,
    layers: bool = True,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[FillResult]]:
    """The MLM head's top guesses at every [MASK] of `text`, at the output and read off every layer."""
    from bertscope.analyses.mlm import fill as fill_in
    from bertscope.analyses.mlm import require_mlm_head, with_mask_token

    if not text.strip():
        raise InputError("the text is empty; give a sentence with [MASK] where the missing word goes")
    require_mlm_head(model)
    encoding = model.encode(with_mask_token(model.tokenizer, text))

    def run() -> Iterator[Progress[FillResult]]:
        result = fill_in(model, encoding, top=top, mask=head_mask(model, mask), ablation=ablation, layers=layers)
        yield Progress("guessing", 1, 1, replace(result, notes=_cut_notes(model, encoding)))

    return run()


@analysis("cloze queries")
def cloze(
    model: Session,
    texts: str | Iterable[str] | None = None,
    *,
    data: str | Path | None = None,
    limit: int | None = None,
    batch_size: int | None = None,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[ClozeResult]]:
    """Precision at 1 and 10 of cloze queries' one-token answers, per layer (LAMA): `texts` (`query<TAB>answer`
    lines), or a cloze file `data` (those lines, or LAMA's JSON lines), or else the shipped sample."""
    from bertscope.analyses.mlm import cloze_queries, cloze_scores, read_cloze, require_mlm_head, sample_cloze

    require_mlm_head(model)
    if texts is not None and data is not None:
        raise InputError("give either cloze queries or a cloze file, not both", setting="data")
    report = ReadReport()
    if texts is None:
        queries = read_cloze(sample_cloze() if data is None else data, report, limit=limit)
    else:
        lines = [texts] if isinstance(texts, str) else list(texts)
        queries = cloze_queries(((f"query {number}", line) for number, line in enumerate(lines, start=1)), report, limit=limit)
    run = cloze_scores(model, queries, mask=head_mask(model, mask), ablation=ablation, batch_size=batch_size, report=report, cancel=cancel)

    def counted(result: ClozeResult) -> ClozeResult:
        if not report.skipped:
            return result
        location, reason = report.skipped[0]
        skipped = f"scored {result.queries} queries; skipped {len(report.skipped)} (first: {location}: {reason})"
        return replace(result, skipped=len(report.skipped), notes=(skipped,))

    return _finished(run, counted)


# --- context mixing ----------------------------------------------------------------------------------------


@analysis("context mixing", summed=False)
def mixing(
    model: Session,
    text: str | Encoding,
    *,
    pair: str | None = None,
    method: str = "value-zeroing",
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[Mixing]]:
    """How much of each token ends up in each other, per layer and rolled out from the input.

    `method`: attention, norms, value-zeroing (Mohebbi et al. 2023), alti (Ferrando et al. 2022),
    flow or rollout (Abnar & Zuidema 2020); `result.definition` says which definition. The
    result's `per_layer[l]` `[T, T]` (None for flow and rollout) and `rolled[l]` (from the input
    to layer l's output) have rows summing to 1; under `mask` they are the masked model's.
    `text` may be an `Encoding` already made (the explorer's).
    """
    from bertscope.analyses.mixing.run import check_methods, context_mixing

    if isinstance(text, str) and not text.strip():
        raise InputError("the text is empty; give a sentence to analyse")
    if pair is not None and not pair.strip():
        raise InputError("the pair text is empty; give a second sentence or none", setting="pair")
    (chosen,) = check_methods([method])
    encoding = model.encode(text, pair) if isinstance(text, str) else text
    run = context_mixing(model, encoding, method=chosen, conditions=_conditions(model, mask, ablation), job=JobOptions(cancel=cancel))
    cut = _cut_notes(model, encoding) if isinstance(text, str) else ()
    return _noted(run, lambda result: (*cut, *result.notes))


@analysis("context-mixing agreement")
def mixing_agreement(
    model: Session,
    texts: Texts = None,
    *,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    method: str | Iterable[str] = ("attention", "norms", "alti", "rollout"),
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    batch_size: int | None = None,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[MixingAgreement]]:
    """Context-mixing measures compared over a corpus: for every pair of `method`s, the Spearman rank correlation of
    their rolled-out rows at the last layer, averaged over sentences (Mohebbi et al. 2023 §5), and per layer each
    method's share from [CLS], [SEP], punctuation and the token itself. Streamed: memory flat in the corpus, measured a
    batch at a time (`batch_size` at most; by default as many as fit). The records' `partial` holds the comparison so
    far.

    By default the four measures that cost a bare forward or two each (attention, norms, alti, rollout); value zeroing
    (about 13 bare forwards) and flow (L·T² max-flow problems a sentence) run when named, and are timed on the first
    batch: the record after it carries a `mixing_results.CostEstimate` as its `partial` (`.line()` says it)."""
    from bertscope.analyses.mixing.run import check_methods
    from bertscope.analyses.mixing.run import mixing_agreement as agreement

    chosen = check_methods([method] if isinstance(method, str) else method)
    sentences = corpus(texts, data=data, format=format, limit=limit)
    run = agreement(
        model,
        distributed.shard(sentences.sentences),
        methods=chosen,
        conditions=_conditions(model, mask, ablation),
        job=JobOptions(batch_size=batch_size, cancel=cancel),
    )
    return _read_and_cut(run, sentences, lambda count: f"{count:,} sentences were cut to the model's maximum of {model.max_length} tokens")


# --- attribution -------------------------------------------------------------------------------------------


@analysis("attribution", summed=False)
def attribute(
    model: Session,
    text: str | Encoding,
    pair: str | None = None,
    *,
    method: str = "integrated-gradients",
    target: str | None = None,
    position: int | None = None,
    word: int | str | None = None,
    similarity: bool = False,
    probe: str | None = None,
    data: str | Path | None = None,
    layer: int | None = None,
    sentence_pooling: str = "cls",
    score: str = "log-probability",
    ig_steps: int | None = None,
    cache_dir: CacheDir = None,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[Attribution]]:
    """Which tokens of `text` a decision rests on: a probe's (`probe=TASK`, trained on `data`), a classifier's class, a
    token classifier's label at `word`, a QA model's answer span, an MLM guess, or the cosine of `text`'s and `pair`'s
    embeddings (`similarity`; the default on a model with no head of its own when a pair is given).

    `target` is the label, class or token to explain (default: the model's top choice; for a QA model, `start`,
    `end` or `span`, start + end, the default); `word` a token classifier's word by index or text; `text`
    may be an `Encoding` already made (the explorer's). `ig_steps`: integrated gradients' steps (default: 32, doubled
    up to 256 until the completeness error is under 5%).
    """
    from bertscope.analyses.attribution import Target
    from bertscope.analyses.attribution import attribute as attribution_steps
    from bertscope.analyses.mlm import with_mask_token

    if isinstance(text, str) and not text.strip():
        raise InputError("the text is empty; give a sentence to explain")
    if (data is not None or layer is not None) and probe is None:
        raise InputError("a probe's data and layer need the probe's task too", setting="probe")
    encoding = model.encode(with_mask_token(model.tokenizer, text), pair) if isinstance(text, str) else text
    if similarity and pair is None and (isinstance(text, str) or text.pair is None):
        raise InputError("a similarity is between two sentences: give the second one as the pair", setting="pair")
    chosen = Target(
        kind="similarity" if similarity else None,
        label=target,
        position=position,
        word=word,
        probe=probe,
        data=None if data is None else str(data),
        layer=layer,
        pooling=sentence_pooling,
    )
    run = attribution_steps(
        model,
        encoding,
        method=method,
        target=chosen,
        score=score,
        ig_steps=ig_steps,
        conditions=_conditions(model, mask, ablation),
        job=JobOptions(cache_dir=cache_dir, cancel=cancel),
    )
    cut = _cut_notes(model, encoding) if isinstance(text, str) else ()
    return _noted(run, lambda result: (*cut, *result.notes))


# --- activation patching -----------------------------------------------------------------------------------


@analysis("patching", summed=False)
def patch(
    model: Session,
    clean: str,
    corrupt: str,
    *,
    pair: str | None = None,
    corrupt_pair: str | None = None,
    metric: str = "preserve",
    answers: Iterable[str] | None = None,
    classes: Iterable[str] | None = None,
    task: str | None = None,
    data: str | Path | None = None,
    probe_layer: int | None = None,
    word: int | str | None = None,
    sweep: Iterable[str] = ("heads", "layers", "positions"),
    direction: str = "denoise",
    per_position: bool = False,
    cache_dir: CacheDir = None,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[PatchingResult]]:
    """Which heads, layers and positions carry the difference between `clean` and `corrupt` (activation patching).

    Both texts must have the same number of tokens (`pair`: the clean text's second segment). `sweep`: which
    of heads, layers and positions to patch. `metric`: mlm (`answers` A,B at the
    [MASK]), class (`classes` A,B of a classifier), probe (a probe for `task`, `classes` A,B),
    preserve (any model), embedding (the cosine of the pooled sentence embedding to the clean one's; any
    model), label (a token classifier's `classes` A,B at `word`, an index or the word; default: the first word the
    texts differ at), answer (a QA model's start + end logit of the clean answer span minus the corrupted one's;
    `clean` the question, `pair` the context). `direction`: denoise (clean into corrupted) or noise. Effects are
    shares of m(clean) - m(corrupt): 1 when the component carries all of it.
    """
    from bertscope.analyses.patching import patch as patching_steps
    from bertscope.analyses.patching_results import PatchMetric

    for text in (clean, corrupt):
        if not text.strip():
            raise InputError("the text is empty; give a clean and a corrupted sentence", setting="corrupt" if text is corrupt else None)
    chosen_metric = PatchMetric(
        metric,
        answers=tuple(answers) if answers else None,
        classes=tuple(classes) if classes else None,
        task=task,
        data=data,
        probe_layer=probe_layer,
        word=word,
    )
    return patching_steps(
        model,
        clean,
        corrupt,
        clean_pair=pair,
        corrupt_pair=corrupt_pair,
        metric=chosen_metric,
        sweeps=tuple(sweep),
        direction=direction,
        per_position=per_position,
        job=JobOptions(cache_dir=cache_dir, cancel=cancel),
    )


# --- representation geometry -------------------------------------------------------------------------------


@analysis("geometry")
def geometry(
    model: Session,
    texts: Texts = None,
    *,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    unit: str = "auto",
    max_rows: int | None = 4000,
    neighbours: int = 10,
    seed: int = 0,
    batch_size: int | None = None,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[GeometryResult]]:
    """Per layer on a seeded sample of rows: PCA, linear CKA, TwoNN intrinsic dimension, neighbourhood overlap.

    Under torchrun each rank samples its shard, and rank 0 measures the merged sample.
    """
    from bertscope.analyses.geometry.run import representation_geometry

    sentences = corpus(texts, data=data, format=format, limit=limit)
    run = representation_geometry(
        model,
        sentences.sentences,
        unit=unit,
        max_rows=max_rows,
        neighbours=neighbours,
        conditions=_conditions(model, mask, ablation),
        job=JobOptions(batch_size=batch_size, seed=seed, cancel=cancel),
    )
    return _noted(run, lambda result: (*sentences.read_notes(), *result.notes))


@analysis("comparison")
def compare(
    model: Session,
    model_b: Session | str,
    texts: Texts = None,
    *,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    unit: str = "auto",
    max_rows: int | None = 4000,
    seed: int = 0,
    batch_size: int | None = None,
    probe: Iterable[str | tuple[str, list[Sentence]]] = (),
    cache_dir: CacheDir = None,
    allow_download: bool = False,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[ComparisonResult]]:
    """`model` against `model_b` (a loaded model, or one to load on the same device and dtype, when called):
    per-head attention similarity, CKA between their layers, and with `probe` (task names) a probe per layer on both.

    Under torchrun each rank its shard, and rank 0 the merged sample's CKA.
    """
    from bertscope.analyses.geometry.compare import compare_models, probe_data

    sentences = corpus(texts, data=data, format=format, limit=limit)
    rows = list(sentences.sentences)
    tasks = [(task, probe_data(task, rows)) if isinstance(task, str) else task for task in probe]  # names, or (name, sentences)
    if isinstance(model_b, str):
        dtype = str(model.loaded.dtype).removeprefix("torch.")
        model_b = load(model_b, device=str(model.device), dtype=dtype, allow_download=allow_download)
    run = compare_models(
        model,
        model_b,
        rows,
        unit=unit,
        max_rows=max_rows,
        probes=tasks,
        job=JobOptions(batch_size=batch_size, seed=seed, cache_dir=cache_dir, cancel=cancel),
    )
    return _noted(run, lambda result: (*sentences.read_notes(), *result.notes))


# --- dictionary features -----------------------------------------------------------------------------------


@analysis("SAE training", summed=False)  # its steps count the whole corpus's tokens on every rank
def train_sae(
    model: Session,
    texts: Texts = None,
    *,
    layer: int,
    out: str | Path,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    width: int | None = None,
    k: int = 32,
    epochs: int | None = None,
    lr: float | None = None,
    include_special: bool = False,
    held_out: float = 0.1,
    batch_size: int | None = None,
    seed: int = 0,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[SAETraining]]:
    """Train a TopK sparse autoencoder (Gao et al. 2024) on hidden state `layer` (0 = the embeddings) of a corpus and
    write it to the new directory `out` in SAELens's layout (cfg.json, sae_weights.safetensors).

    `width`: its features (default 4 × the hidden size); `k`: the features that fire on a token; `epochs`: passes
    over the corpus (default: enough to see 200,000 tokens, at most 40); `lr`: Adam's learning rate (default
    1.2e-3 / sqrt(width / 16384)). Special tokens are left out unless `include_special`. A seeded `held_out` share
    of the sentences is never trained on: the result's FVU, L0, dead share, `preserve` and MLM loss recovered are
    theirs. The corpus is read again for each epoch (a file streams: memory stays flat in its size).
    """
    from bertscope.analyses.sae.results import SAESettings
    from bertscope.analyses.sae.train import train_sae as training

    settings = SAESettings(width=width, k=k, epochs=epochs, lr=lr, held_out=held_out, include_special=include_special)
    settings.check()
    first = corpus(texts, data=data, format=format, limit=limit)
    if texts is not None:  # sentences at hand: kept for every epoch
        first = Corpus(list(first.sentences), first.source, first.report)
    readings = [first]

    def sentences() -> Iterable[Sentence]:
        """The corpus for one more walk: the first reading (whose report gives the notes), then the file read again."""
        if texts is not None:
            return first.sentences
        if readings:
            return readings.pop().sentences
        return corpus(None, data=data, format=format, limit=limit).sentences

    run = training(
        model,
        sentences,
        layer=layer,
        out=out,
        settings=settings,
        data_name=first.source,
        job=JobOptions(batch_size=batch_size, seed=seed, cancel=cancel),
    )
    return _read_and_cut(run, first, lambda count: f"{count:,} sentences were cut to the model's maximum of {model.max_length} tokens")


@analysis("SAE features")
def sae_features(
    model: Session,
    texts: Texts = None,
    *,
    sae: str | Path,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    top: int = 10,
    batch_size: int | None = None,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[SAEFeatures]]:
    """Read the features of the SAE in directory `sae` (one `train_sae` wrote, or any TopK SAE in SAELens's layout for
    this model's width) on a corpus: its FVU, L0 and dead share there, and per feature its density, its `top` most
    active tokens in context and a histogram of its activations. With a CoNLL-U corpus, each feature's best-matching
    label (UPOS, dependency relation, first or inner word piece) with precision and recall, and how many are
    label-pure (precision ≥ 0.9, at least 10 firings)."""
    from bertscope.analyses.sae.features import sae_features as reading
    from bertscope.analyses.sae.files import read_config

    read_config(sae)  # an SAE directory, judged before the corpus is read
    if top < 1:
        raise InputError(f"top must be 1 or more, not {top}", setting="top")
    sentences = corpus(texts, data=data, format=format, limit=limit)
    run = reading(model, sae, sentences.sentences, top=top, job=JobOptions(batch_size=batch_size, cancel=cancel))
    return _read_and_cut(run, sentences, lambda count: f"{count:,} sentences were cut to the model's maximum of {model.max_length} tokens")


@analysis("SAE heads")
def sae_heads(
    model: Session,
    texts: Texts = None,
    *,
    sae: str | Path,
    feature: int,
    data: str | Path | None = None,
    format: str = "auto",
    limit: int | None = None,
    mask: str | HeadMask | None = None,
    ablation: Ablation = "zero",
    batch_size: int | None = None,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[SAEHeads]]:
    """Which heads write `feature` of the SAE in directory `sae` (at hidden state L ≥ 1): each head's direct
    contribution to the feature's pre-activation, W_enc[:, feature] · (its output through the attention output
    projection, as it reaches hidden state L through the residual stream and the LayerNorms, linearised at each token's
    σ where the family is post-LN), and the embeddings', feed-forward blocks', biases' and norm shifts' shares, which
    add up to the pre-activation; averaged over the tokens of the corpus where the feature fires. `mask` switches heads
    off in the passes (a head switched off writes nothing)."""
    from bertscope.analyses.sae.heads import sae_heads as reading
    from bertscope.analyses.sae.reading_results import check_sae_for_heads

    check_sae_for_heads(sae, feature)
    sentences = corpus(texts, data=data, format=format, limit=limit)
    run = reading(
        model,
        sae,
        sentences.sentences,
        feature=feature,
        conditions=_conditions(model, mask, ablation),
        job=JobOptions(batch_size=batch_size, cancel=cancel),
    )
    return _read_and_cut(run, sentences, lambda count: f"{count:,} sentences were cut to the model's maximum of {model.max_length} tokens")


@analysis("SAE directions", summed=False)
def sae_directions(
    model: Session,
    task: str,
    texts: Iterable[Sentence] | ProbeData | None = None,
    *,
    sae: str | Path,
    data: str | Path | None = None,
    dev: SentencesOrFile = None,
    test: SentencesOrFile = None,
    format: str = "auto",
    limit: int | None = None,
    min_examples: int = 2,
    cache_dir: CacheDir = None,
    batch_size: int | None = None,
    seed: int = 0,
    progress: ProgressCallback = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[SAEDirections]]:
    """Each feature of the SAE in directory `sae` against word task `task` (upos, xpos, deprel) at its hidden state:
    the largest |cosine| between its decoder row and the class directions of the linear probe `probe` trains there
    (and which class), and the share of the row the LEACE eraser `erase` fits there takes away; how many features the
    probe reads (|cos| ≥ 0.3) and the erasure removes (≥ 50%). The data are chosen as `probe`'s (a CoNLL-U `data`,
    else the built-in treebank), split with `seed`; features come from the probing cache."""
    from bertscope.analyses.sae.directions import check_direction_task
    from bertscope.analyses.sae.directions import sae_directions as reading
    from bertscope.analyses.sae.files import read_config
    from bertscope.data.splits import make_splits

    read_config(sae)  # an SAE directory, judged before the corpus is read
    check_direction_task(task)
    chosen = probe_sentences(task, texts, data=data, dev=dev, test=test, format=format, limit=limit)
    splits = make_splits(chosen.train, chosen.dev, chosen.test, seed=seed)
    run = reading(
        model,
        sae,
        splits,
        task=task,
        min_examples=min_examples,
        job=JobOptions(batch_size=batch_size, seed=seed, cache_dir=cache_dir, cancel=cancel),
    )
    return _noted(run, lambda result: (*chosen.notes, *splits.notes, *result.notes))


@contextlib.contextmanager
def switched(model: Session, *, sae: str | Path, features: Mapping[int, float | None] | Iterable[int]) -> Iterator[LiveFeatures]:
    """Within the block, every pass of `model` in this thread (`model.forward`, and every analysis run in the block)
    has features of the SAE in directory `sae` switched off or clamped at the hidden state it reads: `features` maps a
    feature to None (off) or the value it is clamped to; a list of features switches them off.

    The hidden state h becomes the reconstruction with those features changed plus the SAE's error term, which is
    h + Σ_f (c_f − a_f(h))·W_dec[f] (a_f the TopK activation, c_f 0 or the clamp value): with nothing switched the
    pass is exactly the model's. It applies at every token, the special ones included. Yields what is switched.

        with bertscope.switched(model, sae="sae3", features=[12, 40]):
            out = model.forward("The keys to the cabinet are on the table.")
    """
    from bertscope.analyses.sae.features import open_sae
    from bertscope.analyses.sae.results import LiveFeatures
    from bertscope.analyses.sae.switch import switching

    chosen = dict(features) if isinstance(features, Mapping) else dict.fromkeys(features)
    module, config, notes = open_sae(model, sae)
    for line in notes:
        note(line)
    live = LiveFeatures(str(sae), config.layer, config.d_sae, tuple(chosen.items()))
    with switching(model, module, config.layer, live.values):
        yield live
