"""Gradient head importance over N sentences against one bare forward pass over them, in the same run.

    python benchmarks/importance.py [--model M] [--device D] [--sentences 320] [--objective preserve] [-o FILE.json]
    python benchmarks/importance.py --objective token-classification|qa|similarity|embedding [--ablation] ...

The task objectives run on the bundled encoder's weights under the head they need (a
`BertForTokenClassification` or `BertForQuestionAnswering` whose head is seeded random: a
fine-tuned head costs the same) over data built from the sample corpus (`task_data`): the
sample's words tagged IOB2 by capitalisation, SQuAD questions over windows of its sentences
whose answers are words of them, and the shipped sample pairs repeated. With `--ablation`,
`head_importance(objective, "ablation")` (every head and layer switched off in turn, the
metric of each measured too) is timed once after a warm-up, against the bare forward times
L·H + L + 1, the forwards it cannot do with fewer; also `bare_backward`: the same batches
through the bare encoder with the input embeddings requiring grad and one backward pass to
them, the floor under a gradient.

Corpus: the shipped sample corpus (about 320 sentences), repeated to `--sentences`. In the
same process:
- `bare`: a transformers model (SDPA) over the same length-sorted batches of 32, inputs
  tokenised beforehand, under `torch.inference_mode()`;
- `gradient`: `head_importance(objective, "gradient")` on the prepared objective: one
  forward with float gates and one backward pass per batch (for `preserve`, the random
  projection estimate), summing per-sentence gradients.
Each is timed 3 times after a warm-up; the best time counts. Budget (issue: head importance):
gradient ≤ 4 × bare. Also reported: the Spearman rank correlation of the gradient estimate
with exact single-head ablation on `--check-sentences` sentences (preserve only).
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

from common import emit, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sentences", type=int, default=320)
    parser.add_argument("--objective", default="preserve")
    parser.add_argument("--check-sentences", type=int, default=64)
    parser.add_argument("--ablation", action="store_true", help="also time exact ablation (one timed run)")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch
    from scipy.stats import spearmanr
    from transformers import AutoModel

    from bertscope.analyses.importance.objectives import make_objective
    from bertscope.analyses.importance.run import head_importance
    from bertscope.data.corpus import read_sentences, sample_corpus
    from bertscope.model.session import Session

    session = Session.open(task_model(args.model, args.objective), device=args.device)
    sentences = task_data(args.objective, list(read_sentences(sample_corpus())), args.sentences)
    objective = make_objective(session, args.objective, sentences)
    bare = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="sdpa").to(session.device).eval()
    batches = [{k: v for k, v in batch.inputs.items()} for batch in objective.batches]  # the same batches, tokenised
    for parameter in bare.parameters():
        parameter.requires_grad_(False)  # as importance freezes the weights: the backward reaches the inputs only

    def time_bare_backward() -> float:
        started = time.perf_counter()
        for batch in batches:
            inputs = {k: v for k, v in batch.items() if k != "input_ids"}
            embeds = bare.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_()
            bare(inputs_embeds=embeds, **inputs).last_hidden_state.sum().backward()
        sync()
        return time.perf_counter() - started

    def sync() -> None:
        synchronise(session.device)

    def time_bare() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                bare(**batch)
        sync()
        return time.perf_counter() - started

    def time_gradient() -> tuple[float, object]:
        started = time.perf_counter()
        result = list(head_importance(objective, "gradient", normalize=False))[-1].result
        sync()
        return time.perf_counter() - started, result

    load_before = os.getloadavg()[0]
    time_bare()
    time_gradient()  # warm-up
    bare_times, gradient_times = [], []
    for _ in range(3):  # interleaved, so machine noise hits both alike
        bare_times.append(time_bare())
        seconds, result = time_gradient()
        gradient_times.append(seconds)
    bare_s, gradient_s = min(bare_times), min(gradient_times)
    backward_s = min(time_bare_backward() for _ in range(3))
    load_after = os.getloadavg()[0]
    output = {
        "benchmark": "importance",
        "model": session.info.source,
        "device": str(session.device),
        "threads": torch.get_num_threads(),
        "objective": args.objective,
        "sentences": len(sentences),
        "bare_forward_s": round(bare_s, 3),
        "gradient_importance_s": round(gradient_s, 3),
        "ratio": round(gradient_s / bare_s, 3),
        "bare_forward_backward_s": round(backward_s, 3),
        "ratio_to_forward_backward": round(gradient_s / backward_s, 3),
        "budget": 4.0,
        "within_budget": gradient_s / bare_s <= 4.0,
        "load_average": [round(load_before, 2), round(load_after, 2)],
    }
    if args.ablation:
        list(head_importance(objective, "ablation", normalize=False))  # warm-up
        started = time.perf_counter()
        list(head_importance(objective, "ablation", normalize=False))
        sync()
        ablation_s = time.perf_counter() - started
        passes = session.num_layers * session.num_heads + session.num_layers + 1
        output |= {
            "ablation_s": round(ablation_s, 3),
            "ablation_ratio": round(ablation_s / bare_s, 3),
            "ablation_forwards": passes,
            "ablation_ratio_per_forward": round(ablation_s / (bare_s * passes), 3),
        }
    if args.objective == "preserve" and args.check_sentences:
        check = make_objective(session, "preserve", sentences[: args.check_sentences])
        gradient = list(head_importance(check, "gradient", normalize=False))[-1].result
        exact = list(head_importance(check, "ablation", normalize=False, layers=False))[-1].result
        output["check_sentences"] = len(check.texts)
        output["spearman_gradient_vs_ablation"] = round(float(spearmanr(gradient.raw.ravel(), exact.raw.ravel()).statistic), 4)
    emit(
        output,
        args.output,
        f"importance ({args.objective}): gradient {output['ratio']}x of a bare forward ({bare_s:.2f}s), "
        f"{output['ratio_to_forward_backward']}x of a bare forward and backward"
        + (
            f"; ablation {output['ablation_ratio']}x ({output['ablation_ratio_per_forward']}x of {output['ablation_forwards']} forwards)"
            if args.ablation
            else ""
        )
        + (f"; Spearman vs ablation {output['spearman_gradient_vs_ablation']}" if "spearman_gradient_vs_ablation" in output else ""),
    )


def task_model(model: str | None, objective: str) -> str | None:
    """The model to time `objective` on: the bundled encoder's weights under a seeded random token-classification or QA
    head where the objective needs one (saved once to a temporary folder), else `model`."""
    if objective not in ("token-classification", "qa"):
        return model
    import atexit
    import shutil
    import tempfile

    import torch
    from transformers import AutoTokenizer, BertForQuestionAnswering, BertForTokenClassification

    from bertscope.model.model_files import bundled_model_dir

    source = model or str(bundled_model_dir())
    torch.manual_seed(0)
    if objective == "qa":
        built = BertForQuestionAnswering.from_pretrained(source)
    else:
        labels = dict(enumerate(NER_LABELS))
        built = BertForTokenClassification.from_pretrained(source, id2label=labels, label2id={v: k for k, v in labels.items()})
    directory = tempfile.mkdtemp(prefix=f"bertscope-{objective}-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)  # a copy of the model: not left behind
    built.save_pretrained(directory)
    AutoTokenizer.from_pretrained(source).save_pretrained(directory)
    return directory


NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def task_data(objective: str, corpus: list, count: int) -> list:
    """`count` items of what `objective` reads, built from the sample corpus's sentences (see the module's docstring)."""
    from bertscope.data.corpus import Sentence

    if objective == "similarity":
        from bertscope.data.task_files import read_scored_pairs, sample_pairs

        pairs = list(read_scored_pairs(sample_pairs()))
        return list(itertools.islice(itertools.cycle(pairs), count))
    cycled = list(itertools.islice(itertools.cycle(corpus), count))
    if objective == "token-classification":
        tagged = []
        for sentence in cycled:
            words = tuple(sentence.text.split())
            tags, previous = [], "O"
            for index, word in enumerate(words):
                tag = "O" if not word[:1].isupper() or index == 0 else ("I-PER" if previous != "O" else "B-PER")
                tags.append(tag)
                previous = tag
            tagged.append(Sentence(sentence.text, words=words, tags=tuple(tags)))
        return tagged
    if objective == "qa":
        questions = []
        for index, sentence in enumerate(cycled):
            context = " ".join(s.text for s in corpus[index % len(corpus) : index % len(corpus) + 4])
            answer = sentence.text.split()[0]
            questions.append(Sentence(f"What begins: {sentence.text[:40]}?", pair=context, answers=((answer, context.index(answer)),)))
        return questions
    return cycled


if __name__ == "__main__":
    main()
