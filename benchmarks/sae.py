"""Sparse autoencoders (issue 56): training's throughput against a bare forward, and FVU and L0 against width and k.

    python benchmarks/sae.py throughput --data FILE [--sentences 1500] [--layer 3] [--epochs 2] [--dtype float32] [-o FILE.json]
    python benchmarks/sae.py sweep --data FILE [--sentences 1500] [--layer 3] [--widths 2,4,8] [--ks 16,32,64] [--epochs 8] [-o FILE.json]

`throughput`: `bertscope.train_sae` end to end on the first --sentences of FILE for --epochs epochs, timed from the
call to the first record of the held-out measurement (the epochs: each one's passes, which stop at the hidden
state, and the SAE's steps), against a bare forward of the same sentences in the same run: the plain transformers
model (its default SDPA attention, no weights) on the same sentences in batches of 32, tokenised beforehand, every
layer run, timed before and after training (the faster kept). Both as tokens a second, counting the tokens the SAE trains on (the real tokens without the special
ones) of the sentences each one ran; `ratio` = the bare forward's tokens a second over training's: how many bare
forwards of the corpus one epoch of training costs. Then the SAE's steps alone on activations taken once, the
same tokens, as tokens a second. With --dtype bfloat16 the model runs in bfloat16 on a GPU (bertscope refuses it on the CPU; the SAE trains in float32).

`sweep`: hidden state --layer of the training and held-out sentences taken once (the held-out share and the
tokens as `bertscope sae train` chooses them), then for every width (× the hidden size) and k the trainer on
those activations for --epochs epochs at the default learning rate for its width, and its held-out FVU, L0 and
dead share. Prints JSON; exit status 0 whatever the numbers. Runs on CUDA when torch sees a GPU (`--device`).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import emit, synchronise  # benchmarks/common.py, found beside this script

BARE_BATCH = 32


def _sentences(args):
    from bertscope.api import corpus

    return list(corpus(data=args.data, limit=args.sentences).sentences)


def _machine(session) -> dict:
    import platform

    import torch

    return {
        "model": session.info.source,
        "device": str(session.device),
        "dtype": session.dtype,
        "gpu": torch.cuda.get_device_name(session.device) if session.device.type == "cuda" else None,
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def _activations(session, sentences, layer, *, held: bool | None, seed: int = 0, held_out: float = 0.1):
    """Hidden state `layer` of the chosen tokens of the (training, held-out or all) sentences `[n, d]`, their token
    keys for epoch 0 and the sentences' count."""
    import torch

    from bertscope.analyses.sae.activations import numbered, token_batches

    rows, numbers, positions = [], [], []
    for batch in token_batches(session, numbered(sentences, seed, held_out, held=held), layer):
        rows.append(batch.states.float())
        numbers.append(batch.sentences)
        positions.append(batch.positions)
    return torch.cat(rows), np.concatenate(numbers), np.concatenate(positions)


def _bare_seconds(session, sentences) -> float:
    """A plain transformers forward (SDPA, every layer) of the sentences in batches of BARE_BATCH, tokenised beforehand."""
    import torch
    from transformers import AutoModel

    bare = AutoModel.from_pretrained(session.loaded.directory, dtype=session.model.dtype).to(session.device).eval()
    ordered = sorted(sentences, key=lambda sentence: len(sentence.text))
    batches = []
    for start in range(0, len(ordered), BARE_BATCH):
        texts = [sentence.text for sentence in ordered[start : start + BARE_BATCH]]
        encoded = session.tokenizer(texts, padding=True, truncation=True, max_length=session.max_length, return_tensors="pt")
        batches.append({name: tensor.to(session.device) for name, tensor in encoded.items()})
    with torch.inference_mode():
        bare(**batches[0])  # warm
    synchronise(session.device)
    started = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            bare(**batch)
    synchronise(session.device)
    return time.perf_counter() - started


def _warm(session) -> None:
    """A few steps of a small SAE first: torch's optimiser imports its compiler's modules at its first step (seconds)."""
    import torch

    from bertscope.analyses.sae.results import SAESettings
    from bertscope.analyses.sae.train import fit, in_blocks

    rows = torch.randn(512, session.hidden_size)
    for _ in fit(in_blocks(rows, 512), session.hidden_size, SAESettings(width=64, k=4, epochs=1), device=session.device):
        pass


def throughput(args) -> None:
    import bertscope
    from bertscope.analyses.sae.results import SAESettings
    from bertscope.analyses.sae.train import fit, token_keys

    session = bertscope.load(args.model, device=args.device, dtype=args.dtype)
    sentences = _sentences(args)
    every, _, _ = _activations(session, sentences, args.layer, held=None)
    bare_before = _bare_seconds(session, sentences)
    _warm(session)
    marks: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()

        def seen(record) -> None:
            if record.stage.startswith("measuring") and "trained" not in marks:
                synchronise(session.device)
                marks["trained"] = time.perf_counter()

        result = bertscope.train_sae(session, sentences, layer=args.layer, out=Path(folder) / "sae", epochs=args.epochs, progress=seen)
        total = time.perf_counter() - started
    training = marks["trained"] - started
    bare_after = _bare_seconds(session, sentences)
    bare = min(bare_before, bare_after)  # timed either side of training: a busy machine's noise shows as their gap
    # the SAE's steps alone: the training tokens' activations taken once, the same epochs
    train_rows, numbers, positions = _activations(session, sentences, args.layer, held=False)
    settings = SAESettings(epochs=args.epochs)

    def blocks(epoch):
        yield [(train_rows, token_keys(0, epoch, numbers, positions))]

    synchronise(session.device)
    started = time.perf_counter()
    *_, last = fit(blocks, session.hidden_size, settings, device=session.device)
    synchronise(session.device)
    steps_only = time.perf_counter() - started
    trained_tokens = result.tokens_trained
    output = {
        **_machine(session),
        "data": str(args.data),
        "sentences": len(sentences),
        "layer": args.layer,
        "epochs": result.epochs,
        "d_sae": result.d_sae,
        "k": result.k,
        "tokens_all_sentences": len(every),
        "tokens_trained": trained_tokens,
        "bare_forward_s": round(bare, 3),
        "bare_forward_before_after_s": [round(bare_before, 3), round(bare_after, 3)],
        "bare_tokens_per_s": round(len(every) / bare, 1),
        "training_s": round(training, 3),
        "training_tokens_per_s": round(trained_tokens / training, 1),
        "ratio": round((len(every) / bare) / (trained_tokens / training), 2),
        "whole_call_s": round(total, 3),
        "steps_only_s": round(steps_only, 3),
        "steps_only_tokens_per_s": round(last.result.tokens / steps_only, 1),
        "held_out_fvu": round(result.fvu, 4),
    }
    emit(
        output,
        args.output,
        f"training {output['training_tokens_per_s']:,.0f} tokens/s, bare forward {output['bare_tokens_per_s']:,.0f} tokens/s: "
        f"an epoch costs {output['ratio']:.1f} bare forwards of the corpus; the steps alone {output['steps_only_tokens_per_s']:,.0f} tokens/s",
    )


def sweep(args) -> None:
    import torch

    import bertscope
    from bertscope.analyses.sae.autoencoder import ReconstructionTally
    from bertscope.analyses.sae.results import SAESettings
    from bertscope.analyses.sae.train import fit, token_keys

    session = bertscope.load(args.model, device=args.device)
    sentences = _sentences(args)
    train_rows, numbers, positions = _activations(session, sentences, args.layer, held=False)
    held_rows, _, _ = _activations(session, sentences, args.layer, held=True)
    d_in = session.hidden_size
    _warm(session)
    runs = []
    for multiple in [int(part) for part in args.widths.split(",")]:
        for k in [int(part) for part in args.ks.split(",")]:
            settings = SAESettings(width=multiple * d_in, k=k, epochs=args.epochs)

            def blocks(epoch):
                yield [(train_rows, token_keys(0, epoch, numbers, positions))]

            started = time.perf_counter()
            *_, last = fit(blocks, d_in, settings, device=session.device)
            seconds = time.perf_counter() - started
            sae = last.result.sae.eval()
            tally = ReconstructionTally(d_in, session.device)
            fired = torch.zeros(sae.d_sae, dtype=torch.bool, device=session.device)
            with torch.no_grad():
                for part in held_rows.to(session.device).split(4096):
                    values, indices = sae.select(sae.preactivations(part))
                    tally.add(part, values, sae.decode_selected(values, indices))
                    fired[indices[values > 0]] = True
            run = {
                "width": sae.d_sae,
                "width_multiple": multiple,
                "k": k,
                "lr": settings.lr_for(sae.d_sae),
                "held_out_fvu": round(tally.fvu, 4),
                "held_out_l0": round(tally.l0, 2),
                "dead_share": round(float((~fired).float().mean()), 4),
                "training_fvu": round(last.result.running["fvu"], 4),
                "seconds": round(seconds, 1),
            }
            runs.append(run)
            print(run, file=sys.stderr, flush=True)
    output = {
        **_machine(session),
        "data": str(args.data),
        "sentences": len(sentences),
        "layer": args.layer,
        "epochs": args.epochs,
        "training_tokens": len(train_rows),
        "held_out_tokens": len(held_rows),
        "runs": runs,
    }
    best = min(runs, key=lambda run: run["held_out_fvu"] if math.isfinite(run["held_out_fvu"]) else math.inf)
    emit(output, args.output, f"{len(runs)} SAEs; lowest held-out FVU {best['held_out_fvu']} at width {best['width']}, k {best['k']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("throughput", "sweep"))
    parser.add_argument("--data", default=None, help="corpus (text, CoNLL-U); default: the sample treebank")
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--sentences", type=int, default=1500)
    parser.add_argument("--layer", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=None, help="throughput: 2; sweep: 8")
    parser.add_argument("--widths", default="2,4,8", help="sweep: widths as multiples of the hidden size")
    parser.add_argument("--ks", default="16,32,64", help="sweep: the values of k")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    if args.data is None:
        from bertscope.data.corpus import sample_corpus

        args.data = str(sample_corpus("conllu"))
    if args.epochs is None:
        args.epochs = 2 if args.mode == "throughput" else 8
    from bertscope.base.errors import BertscopeError

    try:
        {"throughput": throughput, "sweep": sweep}[args.mode](args)
    except BertscopeError as error:  # bad arguments: a missing model or file, bfloat16 on the CPU
        parser.exit(2, f"sae.py: error: {error}\n")


if __name__ == "__main__":
    main()
