"""The session: the handle on one loaded model that every analysis takes.

It owns the model, its tokenizer and device, and a lock so that one forward pass runs
at a time. `forward` turns text into plain results; `run` is the tensor-level entry for
analyses that batch sentences or need gradients through head gates. It imports no
analysis: they are functions over a session (`analyses`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from bertscope.base.errors import InputError
from bertscope.model import cpu_linear
from bertscope.model.ablation import AttentionSite, attention_pass
from bertscope.model.device import upload
from bertscope.model.effects import softmax
from bertscope.model.families import Family
from bertscope.model.loading import LoadedModel, load_model
from bertscope.model.masks import Ablation, HeadMask, check_ablation
from bertscope.model.model_files import model_limit, numerics_key
from bertscope.model.pooling import SentencePooling
from bertscope.model.pruning import kept_heads as pruned_layout
from bertscope.model.pruning import pruned_heads_of
from bertscope.model.results import Encoding, ForwardResult, MaskPrediction, ModelInfo
from bertscope.model.tokens import encode, encode_many


class Session:
    """A model ready for analysis. Thread-safe: forwards are serialised by `lock`."""

    def __init__(self, loaded: LoadedModel):
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.device = loaded.device
        self.lock = threading.RLock()
        config = self.model.config
        family = loaded.family
        layers = family.layers(self.model)
        self.num_layers: int = len(layers)  # ALBERT: applications of its shared layers
        self.num_heads: int = config.num_attention_heads
        self.hidden_size: int = config.hidden_size
        self.max_length: int = loaded.max_length
        self._layers = [
            AttentionSite(
                family.self_attention(layer), family.attention_output(layer), family.weights_module(layer), family.value_projection(layer)
            )
            for layer in layers
        ]
        self.mlm_head = family.mlm_head(self.model)
        # A physically pruned model: per layer, the original numbers of the heads it still has (model.pruning).
        self.kept_heads = pruned_layout(config)
        self.linear_path = "blas"  # or "onednn", once `choose_cpu_linear` found it faster

    @classmethod
    def open(
        cls,
        model: str | None = None,
        *,
        device: str = "auto",
        dtype: str = "float32",
        allow_download: bool = False,
        max_length: int | None = None,
    ) -> Session:
        """Load a model (None = the bundled all-MiniLM-L6-v2) and wrap it in a session; `max_length`: cut inputs there
        (default: the model's own limit, its position embeddings)."""
        return cls(load_model(model, device=device, dtype=dtype, allow_download=allow_download, max_length=max_length))

    def random_copy(self, seed: int = 0) -> Session:
        """The same architecture and tokenizer with freshly initialised weights (a probing baseline)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = type(self.model)(self.model.config)
        self.loaded.family.prepare(model)
        # transformers wraps PreTrainedModel.to with functools.wraps, which mypy does not bind to the model
        model.to(device=self.device, dtype=self.loaded.dtype).eval()  # type: ignore[call-arg]
        loaded = dataclasses.replace(
            self.loaded,
            model=model,
            source=f"{self.loaded.source} (random init, seed {seed})",
            fingerprint=f"random{seed}-{self.loaded.fingerprint}",
        )
        copy = Session(loaded)
        if self.linear_path == "onednn":
            copy.choose_cpu_linear("onednn")
        return copy

    def choose_cpu_linear(self, mode: str | None = None) -> str:
        """Run the model's linear layers on the faster CPU path, measured (`model.cpu_linear.choose`).

        Called where a model is loaded for use (`bertscope.load`, so every command and the
        explorer), not on every session: tests and baselines keep torch's default.
        """
        if self.device.type == "cpu":
            self.linear_path = cpu_linear.choose(self.model, mode)
        return self.linear_path

    @property
    def source(self) -> str:
        """The model's name as people see it."""
        return self.loaded.source

    @property
    def fingerprint(self) -> str:
        """Changes with the model's config and weights: what names its cache entries."""
        return self.loaded.fingerprint

    @property
    def dtype(self) -> str:
        """The dtype its passes compute in: float32, bfloat16 or float16."""
        return str(self.loaded.dtype).removeprefix("torch.")

    @property
    def numerics_key(self) -> str:
        """What of its arithmetic names its cache entries beside the fingerprint (`model_files.numerics_key`)."""
        return numerics_key(self.dtype, self.device.type)

    @property
    def numerics(self) -> dict[str, str | None]:
        """What its passes' numbers depend on besides the model and the input: device, dtype, and on the CPU in
        float32 the kernel path of its linear layers (`onednn` or `blas`, `model.cpu_linear`)."""
        linear = self.linear_path if self.device.type == "cpu" and self.dtype == "float32" else None
        return {"device": self.device.type, "dtype": self.dtype, "cpu_linear": linear}

    def ready(self) -> Session:
        """This session: a loaded model (`DeferredSession.ready` loads one)."""
        return self

    @property
    def is_classifier(self) -> bool:
        """A sequence-classification model: its forward gives class logits."""
        return self.loaded.architecture.endswith("ForSequenceClassification")

    @property
    def is_token_classifier(self) -> bool:
        """A token-classification model (NER, POS): its forward gives class logits at every token."""
        return self.loaded.architecture.endswith("ForTokenClassification")

    @property
    def is_question_answerer(self) -> bool:
        """An extractive question-answering model (SQuAD): its forward gives start and end logits at every token."""
        return self.loaded.architecture.endswith("ForQuestionAnswering")

    @property
    def is_sentence_embedder(self) -> bool:
        """A sentence-embedding model: sentence-transformers' files (modules.json) beside a model with no task head."""
        tasked = self.is_classifier or self.is_token_classifier or self.is_question_answerer
        return not tasked and (self.loaded.directory / "modules.json").is_file()

    @property
    def label_names(self) -> list[str]:
        """A classifier's classes by number, as its config's id2label names them."""
        config = self.model.config
        id2label = cast(dict[int, str], config.id2label or {})  # keyed by int once loaded (transformers)
        return [str(id2label.get(index, index)) for index in range(len(id2label))]  # len(id2label): the config's num_labels

    @functools.cached_property
    def pooling(self) -> SentencePooling:
        """How a sentence embedding is pooled from the last hidden states (its sentence-transformers files, else mean)."""
        return SentencePooling.of(self.loaded.directory)

    def gate_tensor(self, mask: HeadMask | None) -> Tensor | None:
        """`[L, H]` gates on the device for `run`, or None when no head is masked."""
        if mask is None or not len(mask):
            return None
        return torch.as_tensor(mask.gates(), device=self.device)

    @functools.cached_property
    def info(self) -> ModelInfo:
        config = self.model.config
        return ModelInfo(
            source=self.loaded.source,
            family=self.loaded.family.name,
            architecture=self.loaded.architecture,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            hidden_size=self.hidden_size,
            vocab_size=config.vocab_size,
            max_length=self.max_length,
            model_limit=model_limit(config.max_position_embeddings, self.loaded.family),
            tokenizer_limit=self.loaded.tokenizer_limit,
            has_mlm_head=self.mlm_head is not None,
            num_labels=config.num_labels if self.is_classifier or self.is_token_classifier else None,
            device=str(self.device),
            dtype=self.dtype,
            cpu_linear=self.numerics["cpu_linear"],
            parameters=sum(p.numel() for p in self.model.parameters()),
            fingerprint=self.loaded.fingerprint,
            pruned_heads=sum(len(heads) for heads in pruned_heads_of(config).values()),
            hidden_states=self.loaded.family.describe(),
            attention_windows=tuple(self.attention_window(layer) for layer in range(self.num_layers)),
            sentence_embedding=self.is_sentence_embedder,
        )

    def __repr__(self) -> str:
        info = self.info
        head = "an MLM head" if info.has_mlm_head else f"{info.num_labels} classes" if info.num_labels else "no MLM head"
        shape = f"{info.num_layers} layers × {info.num_heads} heads, hidden {info.hidden_size}"
        return f"Session({info.source} · {info.family} · {shape} · {head} · {info.device} {info.dtype})"

    def mask(self, spec: str | None = None) -> HeadMask:
        """Parse a mask spec (`0:3,2:*`) against this model's layers and heads."""
        return HeadMask.parse(spec, self.num_layers, self.num_heads)

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        return encode(self.tokenizer, text, pair, self.max_length)

    def encode_many(self, texts: Sequence[str], pairs: Sequence[str | None]) -> list[Encoding]:
        """`encode` of each text and its pair, tokenised together (model.tokens.encode_many)."""
        return encode_many(self.tokenizer, texts, pairs, self.max_length)

    def forward(
        self,
        text: str | Encoding,
        pair: str | None = None,
        *,
        attentions: bool = True,
        mask: HeadMask | str | None = None,
        ablation: Ablation = "zero",
        mlm_logits: bool = True,
        reuse: ForwardResult | None = None,
        norms: bool = False,
        on_layer: Callable[[int, np.ndarray, np.ndarray | None], None] | None = None,
    ) -> ForwardResult:
        """One sentence (or pair) through the model, as numpy arrays: tokens, attentions `[L, H, T, T]`
        (unless `attentions=False`, which is faster), hidden states `[L+1, T, D]`, logits.
        `norms=True` adds the value-weighted norms ‖α_ij f_h(x_j)‖ `[L, H, T, T]` of
        Kobayashi et al. (model.norms), from the same pass (it implies attentions).

        `reuse` is an unmasked result for the same input: the layers below the first masked
        one are then taken from it instead of being computed again (a toggle in layer 4 of 6
        runs two layers, not six). The result is the same as without it.

        `on_layer(layer, weights, norms)` receives each layer's maps `[H, T, T]` (its norms
        with `norms=True`, else None) as the pass computes them; with `reuse`, only the layers
        run again. A caller that reduces them (the explorer's per-head figures of a long input)
        then holds one layer's maps at a time: the result keeps them only with `attentions=True`.
        """
        encoding = text if isinstance(text, Encoding) else self.encode(text, pair)
        head_mask = mask if isinstance(mask, HeadMask) else self.mask(mask)
        ablation = check_ablation(ablation)
        attentions = attentions or norms and on_layer is None
        start = self._reusable_layers(reuse, encoding, head_mask, attentions, norms and attentions)
        if reuse is not None and start:
            return self._forward_from(reuse, start, head_mask, ablation, attentions, mlm_logits, norms, on_layer)
        inputs = self.tensors(encoding)
        taker = _LayerTaker(attentions, norms, on_layer)
        with torch.inference_mode():
            outputs = self.run(
                inputs,
                gates=self.gate_tensor(head_mask),
                ablation=ablation,
                attentions=attentions,
                on_attention=taker.weights if on_layer is not None else None,
                on_norms=taker.norms if norms else None,
            )
            hidden = torch.stack(outputs.hidden_states)[:, 0]
            mlm = None
            if self.mlm_head is not None and mlm_logits:
                mlm = _mlm_logits(outputs)[0]
            class_logits = outputs.logits[0] if self.is_classifier else None
            weights = None
            if attentions:
                weights = taker.stacked_weights() if on_layer is not None else _numpy(torch.stack(outputs.attentions)[:, 0])
            return ForwardResult(
                encoding=encoding,
                hidden_states=_numpy(hidden),
                attentions=weights,
                mlm_logits=_numpy(mlm) if mlm is not None else None,
                class_logits=_numpy(class_logits) if class_logits is not None else None,
                mask=head_mask,
                ablation=ablation,
                norms=taker.stacked_norms() if norms and attentions else None,
            )

    def tensors(self, encoding: Encoding) -> dict[str, Tensor]:
        """One encoded input as the model's batch of one, on the session's device (for `run`)."""
        return {
            "input_ids": torch.as_tensor(encoding.input_ids, device=self.device)[None],
            "token_type_ids": torch.as_tensor(encoding.token_type_ids, device=self.device)[None],
        }

    def padded_tensors(self, encodings: Sequence[Encoding]) -> dict[str, Tensor]:
        """Encoded inputs as one batch padded on the right, on the session's device (for `run`); one input is
        `tensors`' batch of one, with no padding to mark."""
        if len(encodings) == 1:
            return self.tensors(encodings[0])
        length = max(len(encoding) for encoding in encodings)
        rows = np.zeros((3, len(encodings), length), dtype=np.int64)  # input ids, token types, attention mask: one copy
        rows[0] = self.tokenizer.pad_token_id or 0
        for row, encoding in enumerate(encodings):
            rows[0, row, : len(encoding)], rows[1, row, : len(encoding)] = encoding.input_ids, encoding.token_type_ids
            rows[2, row, : len(encoding)] = 1
        return dict(zip(("input_ids", "token_type_ids", "attention_mask"), upload(rows, self.device).unbind(), strict=True))

    def layer_maps(
        self,
        encoding: Encoding,
        layer: int,
        *,
        mask: HeadMask | str | None = None,
        ablation: Ablation = "zero",
        norms: bool = False,
        start_from: ForwardResult | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """One layer's attention weights `[H, T, T]` (and value-weighted norms) for one input, keeping no other
        layer's: a 2,000-token input's maps take H·T² floats, not L·H·T² (what `forward` would hold).

        `start_from`: a `forward` result of this input under this mask and ablation; the layer then
        runs alone, on the hidden state that result says enters it (one layer's work, not the model's)."""
        head_mask = mask if isinstance(mask, HeadMask) else self.mask(mask)
        ablation = check_ablation(ablation)
        if start_from is not None:
            return self._one_layer_maps(start_from, layer, head_mask, ablation, norms)
        kept: dict[str, Tensor] = {}

        def keep(name: str) -> Callable[[int, Tensor], None]:
            def take(index: int, maps: Tensor) -> None:
                if index == layer:
                    kept[name] = maps[0].float().cpu()

            return take

        inputs = self.tensors(encoding)
        with torch.inference_mode():
            self.run(
                inputs,
                gates=self.gate_tensor(head_mask),
                ablation=check_ablation(ablation),
                attentions=True,
                hidden_states=False,
                encoder_only=True,
                on_attention=keep("weights"),
                on_norms=keep("norms") if norms else None,
            )
        return kept["weights"].numpy(), kept["norms"].numpy() if norms else None

    def _one_layer_maps(
        self, result: ForwardResult, layer: int, mask: HeadMask, ablation: Ablation, norms: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """`layer_maps` from the hidden state entering `layer` in `result` (the same input, mask and ablation)."""
        if result.mask.spec() != mask.spec() or (len(mask) and result.ablation != ablation):
            raise ValueError(f"start_from was run under mask {result.mask.spec()!r} ({result.ablation}), not {mask.spec()!r} ({ablation})")
        taker = _LayerTaker(True, norms, None)
        hidden = torch.as_tensor(result.hidden_states[layer], device=self.device, dtype=self.loaded.dtype)[None]
        with self._layers_into(taker, mask, ablation):
            for _ in self.loaded.family.run_layers(self.model, hidden, layer, layer + 1):
                pass
        return taker.stacked_weights()[0], taker.stacked_norms()[0] if norms else None

    @contextlib.contextmanager
    def _layers_into(self, taker: _LayerTaker, mask: HeadMask, ablation: Ablation) -> Iterator[None]:
        """Layers run one by one within the block (no gradients, the session's lock held) under `mask`, `taker` taking
        each one's maps (and norms) as it computes them."""
        with (
            torch.inference_mode(),
            self.lock,
            attention_pass(
                self._layers,
                gates=self.gate_tensor(mask),
                ablation=ablation,
                want_weights=taker.keep,
                kept=self.kept_heads,
                on_weights=taker.weights if taker.keep or taker.on_layer is not None else None,
                on_norms=taker.norms if taker.with_norms else None,
            ),
        ):
            yield

    def _reusable_layers(
        self, reuse: ForwardResult | None, encoding: Encoding, mask: HeadMask, attentions: bool, norms: bool = False
    ) -> int:
        """How many layers of `reuse` stay valid under `mask` (0: run the whole model)."""
        if reuse is None or not len(mask) or len(reuse.mask) or reuse.class_logits is not None:
            return 0
        if attentions and reuse.attentions is None or norms and reuse.norms is None:
            return 0
        if reuse.encoding is not encoding and not np.array_equal(reuse.encoding.input_ids, encoding.input_ids):
            return 0
        return min(layer for layer, _ in mask.off)

    def _forward_from(
        self,
        plain: ForwardResult,
        start: int,
        mask: HeadMask,
        ablation: Ablation,
        attentions: bool,
        mlm_logits: bool,
        norms: bool = False,
        on_layer: Callable[[int, np.ndarray, np.ndarray | None], None] | None = None,
    ) -> ForwardResult:
        """Run layers `start`.. on the unmasked hidden state entering layer `start`."""
        entering = torch.as_tensor(plain.hidden_states[start], device=self.device, dtype=self.loaded.dtype)[None]
        states = []
        taker = _LayerTaker(attentions, norms, on_layer)
        with self._layers_into(taker, mask, ablation):
            for hidden in self.loaded.family.run_layers(self.model, entering, start, self.num_layers):
                states.append(hidden[0])  # one unpadded sequence: no attention mask, as in the full pass
            mlm = self.mlm_head(hidden[0]) if self.mlm_head is not None and mlm_logits else None
            upper = _numpy(torch.stack(states))
        weights = layer_norms = None
        if attentions:
            assert plain.attentions is not None  # `_reusable_layers` reuses a result only with the maps asked for
            weights = np.concatenate([plain.attentions[:start], taker.stacked_weights()])
        if norms and attentions:
            assert plain.norms is not None
            layer_norms = np.concatenate([plain.norms[:start], taker.stacked_norms()])
        return ForwardResult(
            encoding=plain.encoding,
            hidden_states=np.concatenate([plain.hidden_states[: start + 1], upper]),
            attentions=weights,
            mlm_logits=_numpy(mlm) if mlm is not None else None,
            class_logits=None,
            mask=mask,
            ablation=ablation,
            norms=layer_norms,
        )

    def run(
        self,
        inputs: dict[str, Tensor],
        *,
        gates: Tensor | None = None,
        ablation: Ablation = "zero",
        attentions: bool = False,
        hidden_states: bool = True,
        encoder_only: bool = False,
        on_attention: Callable[[int, Tensor], None] | None = None,
        on_norms: Callable[[int, Tensor], None] | None = None,
    ) -> Any:
        """The model's own output for a batch, under head gates, holding the lock.

        `inputs` are tokenizer tensors on the session's device (`attention_mask` marks
        padding). `gates` is `[L, H]` or `[B, L, H]`, float, and may require grad. Call
        inside `torch.inference_mode()` unless gradients are wanted. `encoder_only` skips
        the model's head (an MLM head's logits over the whole vocabulary are costly).
        `on_attention(layer, weights)` receives each layer's `[B, H, T, T]` attention
        weights as the pass computes them, and the output then carries none: a corpus job
        that reduces the maps holds one layer of them at a time instead of every layer's.
        `on_norms(layer, norms)` receives each layer's value-weighted norms `[B, H, T, T]`
        (model.norms) from the same pass, after that layer's `on_attention`.
        """
        padding_mask = inputs.get("attention_mask")
        with (
            self.lock,
            attention_pass(
                self._layers,
                gates=gates,
                ablation=ablation,
                padding_mask=padding_mask.bool() if padding_mask is not None else None,
                want_weights=attentions,
                kept=self.kept_heads,
                on_weights=on_attention,
                on_norms=on_norms,
            ) as recorded,
        ):
            model = self.model.base_model if encoder_only else self.model
            own = self.loaded.family.attention == "own"  # its weights come from bertscope's hooks, not its outputs
            outputs = model(
                **self.loaded.family.inputs(inputs),
                output_hidden_states=hidden_states,
                output_attentions=attentions and on_attention is None and not own,
            )
            if own and attentions and on_attention is None:
                outputs.attentions = tuple(recorded[layer] for layer in range(self.num_layers))
            return outputs

    def mask_predictions(self, result: ForwardResult, top: int = 5) -> list[MaskPrediction]:
        """The top guesses at every [MASK] of a result (empty without an MLM head or a [MASK])."""
        mask_id = self.tokenizer.mask_token_id
        if result.mlm_logits is None or mask_id is None:
            return []
        predictions = []
        for position in np.flatnonzero(result.encoding.input_ids == mask_id):
            probabilities = softmax(result.mlm_logits[position].astype(np.float64))
            best = np.argsort(-probabilities)[:top]
            predictions.append(
                MaskPrediction(
                    position=int(position),
                    tokens=tuple(self.tokenizer.convert_ids_to_tokens(best.tolist())),
                    probabilities=tuple(float(p) for p in probabilities[best]),
                )
            )
        return predictions

    def mlm_head_logits(self, hidden: Tensor) -> Tensor:
        """The MLM head applied to hidden states `[..., D]` of any layer: vocabulary logits `[..., V]`, float."""
        if self.mlm_head is None:
            raise InputError(f"{self.info.architecture} has no MLM head", setting="model")
        with torch.inference_mode(), self.lock:
            return self.mlm_head(hidden.to(device=self.device, dtype=self.loaded.dtype)).float()

    def lens_logits(self, hidden: Tensor, layer: int) -> Tensor:
        """The MLM head on hidden states `[..., D]` at index `layer` (the logit lens): in a pre-LN model the states
        below the last first go through its final norm, which the last one has had (model.families)."""
        norm = self.loaded.family.lens_norm(self.model)
        if norm is None or layer >= self.num_layers:
            return self.mlm_head_logits(hidden)
        with torch.inference_mode(), self.lock:
            return self.mlm_head_logits(norm(hidden.to(device=self.device, dtype=self.loaded.dtype)))

    @property
    def family(self) -> Family:
        """The family adapter: where this model keeps its layers and projections (model.families)."""
        return self.loaded.family

    def attention_window(self, layer: int) -> int | None:
        """How far a head of `layer` sees (keys within ±this of the query); None where it sees the whole input."""
        return self.loaded.family.window(self.model, layer)

    def run_layers(self, hidden: Tensor, start: int, stop: int) -> Tensor:
        """Layers `start`..`stop - 1` on `hidden` (entering layer `start`, unpadded rows): the hidden state at
        index `stop`, as the full pass reports it. Call under the session's lock and any pass state wanted."""
        for hidden in self.loaded.family.run_layers(self.model, hidden, start, stop):  # noqa: B007, B020 - the last is the answer
            pass
        return hidden

    @property
    def layer_modules(self) -> list[torch.nn.Module]:
        """The encoder's layers, in order: analyses that run part of the model (patching) call them directly."""
        return self.loaded.family.layers(self.model)

    def class_logits(self, hidden: Tensor) -> Tensor:
        """A sequence classifier's head on last hidden states `[B, T, D]`: class logits `[B, C]`, float."""
        head = self.loaded.family.classifier_head(self.model) if self.is_classifier else None
        if head is None:
            raise InputError(f"{self.info.architecture} is not a sequence classifier", setting="model")
        with self.lock:
            return head(hidden.to(device=self.device, dtype=self.loaded.dtype)).float()

    def token_logits(self, hidden: Tensor) -> Tensor:
        """A token classifier's or QA model's head on last hidden states `[B, T, D]`: logits at every token `[B, T, C]`
        (C = 2 for QA: start, end), float."""
        task_model = self.is_token_classifier or self.is_question_answerer
        head = self.loaded.family.token_head(self.model) if task_model else None
        if head is None:
            raise InputError(f"{self.info.architecture} is neither a token classifier nor a QA model", setting="model")
        with self.lock:
            return head(hidden.to(device=self.device, dtype=self.loaded.dtype)).float()

    def tokenize_batch(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Pad and truncate a batch of sentences into tensors on the session's device."""
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        return {name: tensor.to(self.device) for name, tensor in batch.items()}


def _mlm_logits(outputs: Any) -> Tensor:
    """MLM logits of a model with an MLM head (pre-training models name them differently)."""
    prediction_logits = getattr(outputs, "prediction_logits", None)
    return cast(Tensor, prediction_logits if prediction_logits is not None else outputs.logits)


def _numpy(tensor: Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


class _LayerTaker:
    """Each layer's maps of a pass `[H, T, T]`: kept (with `keep`; stacked into numpy at the end, one copy off the
    device) and handed to `on_layer` as numpy, with the same layer's norms when `norms` (a pass reports a layer's
    weights, then its norms)."""

    def __init__(self, keep: bool, norms: bool, on_layer: Callable[[int, np.ndarray, np.ndarray | None], None] | None):
        self.keep, self.with_norms, self.on_layer = keep, norms, on_layer
        self.kept_weights: list[Tensor] = []
        self.kept_norms: list[Tensor] = []
        self._waiting: Tensor | None = None  # this layer's weights, until its norms come

    def weights(self, layer: int, weights: Tensor) -> None:
        if self.with_norms:
            self._waiting = weights[0]
        else:
            self._take(layer, weights[0], None)

    def norms(self, layer: int, norms: Tensor) -> None:
        weights, self._waiting = self._waiting, None
        self._take(layer, weights, norms[0])

    def _take(self, layer: int, weights: Tensor | None, norms: Tensor | None) -> None:
        if self.keep:
            if weights is not None:
                self.kept_weights.append(weights)
            if norms is not None:
                self.kept_norms.append(norms)
        if self.on_layer is not None:
            assert weights is not None  # a pass with `on_layer` hands its weights here too, before their norms
            self.on_layer(layer, _numpy(weights), None if norms is None else _numpy(norms))

    def stacked_weights(self) -> np.ndarray:
        return _numpy(torch.stack(self.kept_weights))

    def stacked_norms(self) -> np.ndarray:
        return _numpy(torch.stack(self.kept_norms))
