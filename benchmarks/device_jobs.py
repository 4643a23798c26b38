"""Every corpus job on one device and in one precision, against a bare forward there (issue 19's single-GPU figures).

    python benchmarks/device_jobs.py --conllu TREEBANK.conllu [--sentences 2000] [--small 200] [--device cuda]
                                     [--dtype float32|bfloat16] [--jobs patterns,norms,...] [--mlm-model DIR | --random-mlm]
                                     [-o FILE.json]

Written so that one call on a lent GPU (whose time is short) takes every figure: run it once per dtype.
The corpus is the first --sentences sentences of a CoNLL-U treebank: their text for the jobs that read text,
their words and tags for `syntax` and `probe`. The unit is a bare transformers forward (eager attention, the same
model, device and dtype, attention weights out, inputs tokenised beforehand) over the same sentences in the batches
bertscope plans (sorted by length, filled to 1,024 padded tokens), the fastest of a run before and one after the
jobs. Each job runs through the public API on a session loaded in that device and dtype, timed end to end:
- `patterns`, `norms` (patterns with value-weighted norms), `syntax`, `importance` (gradient, preserve
  objective), `geometry` and `compare` (the model against itself loaded again) over the whole corpus;
- `ablation` (importance by ablation) and `curve` (`pruning_curve`, step 0.25) over the first --small
  sentences, against a bare forward over those;
- `probe`: UPOS, cold (an empty cache, until its entries are on disk), warm without baselines, warm with the
  control task and the random-init baseline (their features cached by an untimed run first);
- `cloze` with --mlm-model DIR (a model with its MLM head): each sentence's first one-token noun masked,
  against a bare forward of that model over the queries. With --random-mlm instead, where no MLM weights are at
  hand (the bundled model has no MLM head): a seeded random-init BertForMaskedLM of the model's configuration and
  tokenizer, saved to a temporary directory. The same architecture runs at the same speed; its guesses mean nothing.
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time

from common import cloze_queries, emit, synchronise  # benchmarks/common.py, found beside this script

JOBS = ("patterns", "norms", "syntax", "importance", "ablation", "curve", "geometry", "compare", "probe", "cloze")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--mlm-model", default=None)
    parser.add_argument("--random-mlm", action="store_true")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    jobs = [job for job in args.jobs.split(",") if job]
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        parser.error(f"unknown jobs {', '.join(unknown)}; choose from {', '.join(JOBS)}")

    import bertscope
    from bertscope import api
    from bertscope.analyses.probing.features import finish_writes
    from bertscope.data.corpus import ReadReport, read_sentences

    model = bertscope.load(args.model, device=args.device, dtype=args.dtype)
    treebank = list(itertools.islice(read_sentences(args.conllu, "conllu"), args.sentences))
    small = treebank[: args.small]
    unit, small_unit = Bare(model), Bare(model)
    unit.prepare(treebank)
    small_unit.prepare(small)
    unit.time(), small_unit.time()  # warm-ups

    def as_corpus(sentences):
        return api.Corpus(sentences, args.conllu, ReadReport())

    timings: dict[str, dict] = {}

    def timed(name: str, run, over_small: bool = False) -> None:
        synchronise(model.device)
        started = time.perf_counter()
        run()
        synchronise(model.device)
        timings[name] = {"seconds": round(time.perf_counter() - started, 3), "unit": "small" if over_small else "corpus"}

    with tempfile.TemporaryDirectory() as cache:
        if "patterns" in jobs:
            timed("patterns", lambda: bertscope.patterns(model, as_corpus(treebank)))
        if "norms" in jobs:
            timed("patterns --norms", lambda: bertscope.patterns(model, as_corpus(treebank), norms=True))
        if "syntax" in jobs:
            timed("syntax", lambda: api.syntax(model, as_corpus(treebank)))
        if "importance" in jobs:
            timed("importance (gradient)", lambda: bertscope.importance(model, "preserve", as_corpus(treebank)))
        if "ablation" in jobs:
            timed("importance (ablation)", lambda: bertscope.importance(model, "preserve", as_corpus(small), method="ablation"), True)
        if "curve" in jobs:
            timed("prune --curve", lambda: bertscope.pruning_curve(model, "preserve", as_corpus(small), step=0.25), True)
        if "geometry" in jobs:
            timed("geometry", lambda: api.geometry(model, as_corpus(treebank)))
        if "compare" in jobs:
            timed("compare", lambda: api.compare(model, str(model.loaded.directory), as_corpus(treebank)))
        if "probe" in jobs:

            def probe(lean: bool) -> None:
                api.probe(model, "upos", treebank, control=not lean, random_baseline=not lean, cache_dir=cache)

            timed("probe cold (lean)", lambda: (probe(True), finish_writes()))  # its cache entries on disk, as at exit
            timed("probe warm (lean)", lambda: probe(True))
            probe(False)  # the random-init copy's features, into the cache
            timed("probe warm (default)", lambda: probe(False))
    cloze = None
    if "cloze" in jobs and args.mlm_model:
        cloze = cloze_timings(args.mlm_model, args.device, args.dtype, treebank)
    elif "cloze" in jobs and args.random_mlm:
        with tempfile.TemporaryDirectory() as directory:
            cloze = cloze_timings(random_mlm(model, directory), args.device, args.dtype, treebank)
            cloze["model"] = "random-init BertForMaskedLM of the model's configuration"
    bare_s, small_bare_s = min(unit.time(), *unit.runs), min(small_unit.time(), *small_unit.runs)
    for entry in timings.values():
        entry["ratio"] = round(entry["seconds"] / (small_bare_s if entry["unit"] == "small" else bare_s), 3)
    import torch

    result = {
        "benchmark": "device_jobs",
        "model": model.source,
        "device": str(model.device),
        "device_name": torch.cuda.get_device_name(model.device) if model.device.type == "cuda" else None,
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "data": args.conllu,
        "sentences": len(treebank),
        "small_sentences": len(small),
        "bare_forward_s": round(bare_s, 3),
        "bare_runs_s": [round(run, 3) for run in unit.runs],
        "small_bare_forward_s": round(small_bare_s, 3),
        "load_average": round(os.getloadavg()[0], 2),
        "jobs": timings,
        "cloze": cloze,
    }
    table = " · ".join([f"{name} {entry['ratio']}x" for name, entry in timings.items()] + ([f"cloze {cloze['ratio']}x"] if cloze else []))
    emit(result, args.output, f"device_jobs on {result['device']} ({args.dtype}), bare forward {bare_s:.2f}s: {table}")


class Bare:
    """A plain transformers model of the session's files, device and dtype, over batches planned as bertscope plans them."""

    def __init__(self, session):
        import torch
        from transformers import AutoModel

        self.session = session
        self.model = (
            AutoModel.from_pretrained(session.loaded.directory, attn_implementation="eager", dtype=session.loaded.dtype)
            .to(session.device)
            .eval()
        )
        self.torch, self.batches, self.runs = torch, [], []

    def prepare(self, sentences) -> None:
        from bertscope.data.batching import plan_batches

        tokenizer = self.session.tokenizer
        ids = tokenizer([sentence.text for sentence in sentences], truncation=True, max_length=self.session.max_length)["input_ids"]
        order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
        for batch in plan_batches([len(ids[index]) for index in order]):
            rows = [ids[order[index]] for index in batch]
            self.batches.append(tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(self.session.device))

    def time(self) -> float:
        synchronise(self.session.device)
        started = time.perf_counter()
        with self.torch.inference_mode():
            for batch in self.batches:
                self.model(**batch, output_attentions=True)
        synchronise(self.session.device)
        self.runs.append(time.perf_counter() - started)
        return self.runs[-1]


def random_mlm(session, directory: str) -> str:
    """A seeded random-init BertForMaskedLM with `session`'s configuration and tokenizer, saved in `directory`."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, BertForMaskedLM

    torch.manual_seed(0)
    BertForMaskedLM(AutoConfig.from_pretrained(session.loaded.directory)).save_pretrained(directory)
    AutoTokenizer.from_pretrained(session.loaded.directory).save_pretrained(directory)
    return directory


def cloze_timings(mlm_model: str, device: str, dtype: str, treebank) -> dict:
    """`cloze` over one query per sentence (its first one-token noun masked), against a bare forward of the MLM model."""
    import bertscope
    from bertscope.data.corpus import Sentence

    model = bertscope.load(mlm_model, device=device, dtype=dtype)
    lines = cloze_queries(model.tokenizer, treebank)
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as handle:
        handle.write("\n".join(lines) + "\n")
    try:
        bare = Bare(model)
        bare.prepare([Sentence(text=line.split("\t")[0]) for line in lines])
        bare.time()
        synchronise(model.device)
        started = time.perf_counter()
        bertscope.cloze(model, data=handle.name)
        synchronise(model.device)
        seconds = time.perf_counter() - started
    finally:
        os.unlink(handle.name)
    unit = min(bare.time(), *bare.runs)
    return {"queries": len(lines), "seconds": round(seconds, 3), "bare_forward_s": round(unit, 3), "ratio": round(seconds / unit, 3)}


if __name__ == "__main__":
    main()
