"""What every benchmark script does with its result: JSON to stdout, to a file if asked, a summary to stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def emit(result: dict, output: str | Path | None, summary: str) -> None:
    """Print `result` as JSON, write it atomically to `output` (creating its folder), and `summary` to stderr."""
    text = json.dumps(result, indent=2)
    print(text)
    if output is not None:
        from bertscope.data.files import atomic_write

        path = Path(output).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "w") as handle:
            handle.write(text + "\n")
    print(summary, file=sys.stderr)


def rss_mb() -> float:
    """This process's resident memory in MB (Linux), NaN elsewhere."""
    status = Path("/proc/self/status")
    if not status.exists():
        return float("nan")
    for line in status.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def synchronise(device) -> None:
    """Wait for the GPU's queued kernels before a clock is read (they run asynchronously); no-op on the CPU."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def bare_forward_seconds(bare, batches, device) -> float:
    """One plain transformers pass with attention weights over every batch: the unit corpus jobs are measured in."""
    import time

    import torch

    started = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            bare(**batch, output_attentions=True)
    synchronise(device)
    return time.perf_counter() - started


def cloze_queries(tokenizer, treebank) -> list[str]:
    """One query a sentence that has a one-token noun: the first such noun masked, `query<TAB>answer`."""
    vocabulary = tokenizer.get_vocab()
    lines = []
    for sentence in treebank:
        nouns = [index for index, tag in enumerate(sentence.upos or ()) if tag == "NOUN" and sentence.words[index].lower() in vocabulary]
        if nouns:
            words = list(sentence.words)
            answer, words[nouns[0]] = words[nouns[0]].lower(), tokenizer.mask_token
            lines.append(f"{' '.join(words)}\t{answer}")
    return lines
