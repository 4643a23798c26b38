"""Writing a physically pruned copy of a model to disk, then loading it back to check it.

The surgery itself (slicing heads out of the weights) is `model.pruning`; this module
saves the result as a standard model directory with bertscope's pruning record beside it,
and measures the copy against the original masked the same way (and a sliced copy's speed
against the original's, timed in pairs; a zeroed copy runs the same arithmetic, so is not timed).
"""

from __future__ import annotations

import copy
import gc
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertscope.analyses.importance.results import HeadImportance, PairedTiming, PrunedModel, check_pruned_copy
from bertscope.base.errors import InputError
from bertscope.data.files import check_new_directory, follow_umask
from bertscope.model.pruning import PRUNING_FILE, apply_pruning, pruned_heads_of, zero_heads
from bertscope.model.session import Session

TIMING_ROUNDS = 7  # paired rounds: all seven on one side of 1 happens by chance alone 2 times in 2**7
TIMING_SENTENCES = 32  # the one batch both models are timed on, taken evenly across the data


def write_pruned_model(
    session: Session,
    remove: Sequence[tuple[int, int]],
    directory: str | Path,
    *,
    timing_texts: Sequence[str],
    extra: dict[str, Any],
    weights: str = "sliced",
) -> PrunedModel:
    """Save a copy of the session's model without heads `remove`, then load it back and measure it.

    `sliced`: the heads cut out of the weights (smaller, and timed against the original; loads in bertscope and
    transformers 4, which honour config.json's `pruned_heads`). `zeroed`: the same shapes,
    the heads' columns of the attention output projection zeroed (loads in any transformers,
    including 5, and computes what the masked model does with the same arithmetic: not timed).
    Written to a temporary directory beside `directory` and renamed into place when complete,
    so a failure never leaves half a model. `extra` goes into the pruning JSON file.
    """
    target = Path(directory).expanduser()
    already = pruned_heads_of(session.model.config)
    family = session.loaded.family
    check_pruned_copy(weights, family, bool(already))
    check_new_directory(target)
    pruned = {
        layer: sorted(set(already.get(layer, [])) | {head for (at, head) in remove if at == layer}) for layer in range(session.num_layers)
    }
    pruned = {layer: heads for layer, heads in pruned.items() if heads}
    _check_shared_weights(session, pruned)
    model = copy.deepcopy(session.model).float().cpu()
    if weights == "zeroed":
        zero_heads(model, session.loaded.family, pruned)
    else:
        new_only = {layer: [h for h in heads if h not in already.get(layer, [])] for layer, heads in pruned.items()}
        apply_pruning(model, session.loaded.family, new_only)
        model.config.pruned_heads = {str(layer): heads for layer, heads in pruned.items()}
    family.restore(model)  # ALBERT: saved with its one shared layer, as it was loaded
    model.config.architectures = [session.loaded.architecture.removeprefix("encoder of ").split(" ")[0]]
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        model.save_pretrained(staging)
        session.tokenizer.save_pretrained(staging)
        reloaded = Session.open(str(staging), device=str(session.device))
        reloaded.choose_cpu_linear(session.linear_path)  # timed on the same kernels as the original
        difference = _max_difference(session, reloaded, pruned, timing_texts[:8])
        result = PrunedModel(
            directory=target,
            pruned=pruned,
            parameters_before=session.info.parameters,
            parameters_after=sum(p.numel() for p in reloaded.model.parameters()),
            max_abs_difference=difference,
            format=weights,
            timing=None if weights == "zeroed" else time_paired(session, reloaded, timing_texts),
        )
        summary = {
            "source": session.info.source,
            "format": weights,
            "pruned_heads": {str(layer): heads for layer, heads in pruned.items()},
            "heads_pruned": sum(len(h) for h in pruned.values()),
            "heads_total": session.num_layers * session.num_heads,
            "parameters_before": result.parameters_before,
            "parameters_after": result.parameters_after,
            **result.timing_json(),
            "max_abs_difference_vs_masked": difference,
            "head_numbers": "original: masks and heatmaps of the pruned model use the unpruned model's head numbers",
            "loads_with": "any transformers (AutoModel.from_pretrained)"
            if weights == "zeroed"
            else "bertscope, or transformers 4 (pruned_heads)",
            **extra,
        }
        (staging / PRUNING_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        follow_umask(staging)  # mkdtemp's directory and the saved weights are private; the copy is not
        if target.exists():
            target.rmdir()  # check_new_directory allowed only an empty directory
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


def weight_sharing_groups(session: Session) -> list[list[int]]:
    """The layers that run the same weights, together (ALBERT: every application of its one layer; else one each)."""
    by_weights: dict[int, list[int]] = {}
    for layer, module in enumerate(session.layer_modules):
        by_weights.setdefault(id(session.loaded.family.attention_output(module).weight), []).append(layer)
    return list(by_weights.values())


def least_important_shared(ranking: HeadImportance, groups: list[list[int]], count: int) -> list[tuple[int, int]]:
    """About `count` heads to remove where layers share weights: a head of the shared weights goes from every layer
    that runs them, ranked by its importance summed over those layers (ties: the lower layer and head)."""
    num_heads = ranking.importance.shape[1]
    candidates = sorted(
        (sum(float(ranking.importance[layer, head]) for layer in layers), layers[0], head, layers)
        for layers in groups
        for head in range(num_heads)
        if not any((layer, head) in ranking.pruned for layer in layers)
    )
    chosen: list[tuple[int, int]] = []
    for _, _, head, layers in candidates:
        if chosen and len(chosen) + len(layers) / 2 > count:
            break
        chosen += [(layer, head) for layer in layers]
    return chosen


def _check_shared_weights(session: Session, pruned: dict[int, list[int]]) -> None:
    """Layers that run the same weights (ALBERT's applications of one layer) must lose the same heads: a saved copy
    can only change the weights, and so every application of them."""
    for layers in weight_sharing_groups(session):
        if len({tuple(pruned.get(layer, ())) for layer in layers}) > 1:
            differs = next(layer for layer in layers if pruned.get(layer, []) != pruned.get(layers[0], []))
            raise InputError(
                f"layers {layers[0]}-{layers[-1]} run the same weights, so a saved copy removes a head from all of them, "
                f"but layers {layers[0]} and {differs} lose different heads; switch the heads off with a head mask "
                "instead, or prune the same heads in every layer"
            )


def _max_difference(original: Session, pruned_session: Session, pruned: dict[int, list[int]], texts: Sequence[str]) -> float:
    """Largest difference of final hidden states, pruned model vs the original with those heads masked (zero)."""
    gates = torch.ones(original.num_layers, original.num_heads)
    for layer, heads in pruned.items():
        gates[layer, heads] = 0.0
    inputs = original.tokenize_batch(list(texts))
    real = inputs["attention_mask"].bool()
    with torch.inference_mode():
        want = original.run(inputs, gates=gates.to(original.device), hidden_states=False, encoder_only=True).last_hidden_state
        got = pruned_session.run(inputs, hidden_states=False, encoder_only=True).last_hidden_state
    return float((want[real].float().cpu() - got[real].float().cpu()).abs().max())


def time_paired(original: Session, pruned_copy: Session, texts: Sequence[str], rounds: int = TIMING_ROUNDS) -> PairedTiming:
    """Time the encoder forward of `original` and `pruned_copy` in pairs over one batch, after a warm-up of each.

    One batch of at most `TIMING_SENTENCES` sentences spread evenly over `texts`, so the cost is
    `rounds` × 2 forwards of it whatever the data's size. The encoder alone: pruning acts there,
    and an MLM head's vocabulary projection would dilute the ratio with work pruning does not
    touch. The garbage collector is held off while timing, as `timeit` does.
    """
    count = min(TIMING_SENTENCES, len(texts))
    sample = [texts[i * len(texts) // count] for i in range(count)]
    batch = original.tokenize_batch(sample)
    sessions = (original, pruned_copy)
    seconds: tuple[list[float], list[float]] = ([], [])
    collecting = gc.isenabled()
    gc.disable()
    try:
        with torch.inference_mode():
            for session in sessions:  # warm-up: the batch's shapes, kernels and allocations are new to both
                _forward_seconds(session, batch)
            for round_number in range(rounds):
                order = (0, 1) if round_number % 2 == 0 else (1, 0)  # alternate who goes first: no side gains from going second
                for which in order:
                    seconds[which].append(_forward_seconds(sessions[which], batch))
    finally:
        if collecting:
            gc.enable()
    return PairedTiming(tuple(seconds[0]), tuple(seconds[1]), count)


def _forward_seconds(session: Session, batch: dict[str, torch.Tensor]) -> float:
    """Wall-clock seconds of one encoder forward over `batch`, the device's queue drained on both sides."""
    if session.device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    session.run(batch, hidden_states=False, encoder_only=True)
    if session.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started
