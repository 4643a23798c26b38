"""One input's arrays in an .npz file, written with one layer's attention maps in memory at a time.

Every layer's maps and norms are `2 · L · H · T²` floats: 8 GB for a 2,000-token input to a
22-layer, 12-head model. The pass appends each layer's maps to .npy files beside the output
as it computes them (plain writes: pages of a memory map would count as the process's
memory), and the .npz is then assembled from those files, a block at a time. np.load reads
the result like any np.savez file.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from bertscope.analyses.attention.patterns_results import NORM_DEFINITION
from bertscope.analyses.streaming import joined_ids
from bertscope.data.files import atomic_write, temporary_beside
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding
from bertscope.model.session import Session

COPY_BLOCK = 1 << 24  # bytes copied from a map file into the archive at a time


def export_input(
    session: Session, encoding: Encoding, mask: HeadMask, ablation: Ablation, output: str | Path
) -> dict[str, int | list[int]]:
    """Write `encoding`'s tokens, attentions, norms, hidden states (and MLM logits) to `output`; their shapes."""
    length, shape = len(encoding), (session.num_layers, session.num_heads, len(encoding), len(encoding))
    maps = {name: temporary_beside(output) for name in ("attentions", "norms")}
    files: dict[str, BinaryIO] = {}
    try:
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False, "shape": shape}
        for name, path in maps.items():
            files[name] = open(path, "wb")  # closed below, or in `finally`
            np.lib.format.write_array_header_1_0(files[name], header)

        def into(name: str) -> Callable[[int, torch.Tensor], None]:
            def write(layer: int, values: torch.Tensor) -> None:  # layers come in order: appended, not mapped
                files[name].write(values[0].float().cpu().numpy().tobytes())

            return write

        inputs = session.tensors(encoding)
        with torch.inference_mode():
            outputs = session.run(
                inputs,
                gates=session.gate_tensor(mask),
                ablation=ablation,
                attentions=True,
                encoder_only=True,
                on_attention=into("attentions"),
                on_norms=into("norms"),
            )
            hidden = torch.stack(outputs.hidden_states)[:, 0]
            logits = session.mlm_head_logits(hidden[-1]).cpu().numpy() if session.mlm_head is not None else None
            hidden_states = hidden.float().cpu().numpy()
        for handle in files.values():
            handle.close()
        arrays: dict[str, np.ndarray] = {
            "tokens": np.array(encoding.tokens),
            "input_ids": encoding.input_ids,
            "token_type_ids": encoding.token_type_ids,
            "word_ids": joined_ids([encoding.word_ids]),
            "special": encoding.special,
            "norm_definition": np.array(NORM_DEFINITION),
            "hidden_states": hidden_states,
            "mask": np.array(mask.spec()),
            "ablation": np.array(ablation),
            "model": np.array(session.info.source),
        }
        if logits is not None:
            arrays["mlm_logits"] = logits
        with atomic_write(output) as written, zipfile.ZipFile(written, "w", allowZip64=True) as archive:
            for name, array in arrays.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
            for name, path in maps.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member, open(path, "rb") as source:
                    shutil.copyfileobj(source, member, COPY_BLOCK)
    finally:
        for handle in files.values():
            handle.close()
        for path in maps.values():
            Path(path).unlink(missing_ok=True)
    shapes = {name: list(value.shape) for name, value in arrays.items() if name in ("hidden_states", "mlm_logits")}
    return {"tokens": length, "attentions": list(shape), "norms": list(shape), **shapes}
