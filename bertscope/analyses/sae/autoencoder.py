"""The TopK sparse autoencoder (Gao et al. 2024), in plain torch, saved and read in SAELens's layout.

    z = ReLU(TopK((x − b_dec) W_enc + b_enc)),    x̂ = z W_dec + b_dec

with W_enc `[d_in, d_sae]`, W_dec `[d_sae, d_in]` (rows of unit norm), as SAELens names and shapes them, so that
the file opens there. The ReLU after the TopK is SAELens's and Gao et al.'s: a selected latent never subtracts.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn

from bertscope.analyses.sae.files import CONFIG_FILE, WEIGHT_SHAPES, WEIGHTS_FILE, SAEConfig, read_config
from bertscope.base.errors import InputError
from bertscope.data.files import atomic_directory


class ReconstructionTally:
    """What an SAE's reconstructions of a stream of batches add up to: the FVU (Σ‖x − x̂‖² / Σ‖x − x̄‖², x̄ the
    tokens' mean, from running sums: no token kept) and the mean L0 (latents firing per token)."""

    def __init__(self, d_in: int, device: torch.device) -> None:
        self.error = self.squares = self.active = 0.0
        self.tokens = 0
        self.total = torch.zeros(d_in, dtype=torch.float64, device=device)

    def add(self, x: Tensor, values: Tensor, reconstruction: Tensor) -> None:
        """One batch: its states `x` `[N, d_in]`, the selected latents' `values` `[N, k]` and their reconstruction."""
        self.error += float((x - reconstruction).double().pow(2).sum())
        self.squares += float(x.double().pow(2).sum())
        self.total += x.double().sum(0)
        self.active += float((values > 0).sum())
        self.tokens += len(x)

    @property
    def fvu(self) -> float:
        mean = self.total / max(self.tokens, 1)
        variance = self.squares - self.tokens * float(mean.pow(2).sum())
        return self.error / variance if variance > 0 else math.nan

    @property
    def l0(self) -> float:
        return self.active / self.tokens if self.tokens else math.nan


class TopKSAE(nn.Module):
    """A TopK SAE: `k` of `d_sae` latents per token, decoder rows of unit norm."""

    def __init__(self, d_in: int, d_sae: int, k: int, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if not 1 <= k <= d_sae:
            raise InputError(f"k must be between 1 and the SAE's width ({d_sae}), not {k}", setting="k")
        self.d_in, self.d_sae, self.k = d_in, d_sae, k
        decoder = torch.randn(d_sae, d_in, generator=generator)
        decoder /= decoder.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(decoder)
        self.W_enc = nn.Parameter(decoder.T.clone().contiguous())  # the decoder's transpose (Gao et al. §2.3)
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))

    def preactivations(self, x: Tensor) -> Tensor:
        """`[..., d_sae]`: every latent's input before the TopK."""
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def select(self, preactivations: Tensor) -> tuple[Tensor, Tensor]:
        """The `k` latents of each row that fire: their values (ReLU'd: 0 where the k-th best is negative) and indices."""
        values, indices = preactivations.topk(self.k, dim=-1)
        return values.relu(), indices

    def dense(self, values: Tensor, indices: Tensor) -> Tensor:
        """The latents as a `[..., d_sae]` tensor, zero where they do not fire."""
        return torch.zeros((*values.shape[:-1], self.d_sae), dtype=values.dtype, device=values.device).scatter(-1, indices, values)

    def encode(self, x: Tensor) -> Tensor:
        """`[..., d_sae]` feature activations of `x` `[..., d_in]`."""
        return self.dense(*self.select(self.preactivations(x)))

    def decode(self, latents: Tensor) -> Tensor:
        return latents @ self.W_dec + self.b_dec

    def decode_selected(self, values: Tensor, indices: Tensor, *, bias: bool = True) -> Tensor:
        """x̂ from the firing latents alone, rows `[n, k]` (`select`'s): k decoder rows a token, not all d_sae of them
        (a sum of gathered rows, whose gradient reaches only those rows)."""
        summed = torch.nn.functional.embedding_bag(indices, self.W_dec, per_sample_weights=values, mode="sum")
        return summed + self.b_dec if bias else summed

    def forward(self, x: Tensor) -> Tensor:
        """The reconstruction x̂ of `x`."""
        return self.decode(self.encode(x))

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Every decoder row back to unit norm (after an optimiser step)."""
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp(min=1e-12))

    @torch.no_grad()
    def project_decoder_gradient(self) -> None:
        """Remove from each decoder row's gradient its part along the row, which only changes the row's norm (Gao et
        al. §2.3; the norm is put back after the step anyway)."""
        if self.W_dec.grad is not None:
            self.W_dec.grad -= (self.W_dec.grad * self.W_dec).sum(dim=1, keepdim=True) * self.W_dec

    def weights(self) -> dict[str, Tensor]:
        """The four tensors as SAELens names them, float32 on the CPU."""
        return {name: getattr(self, name).detach().float().cpu().contiguous() for name in WEIGHT_SHAPES}

    def save(self, directory: str | Path, config: SAEConfig) -> Path:
        """Write cfg.json and sae_weights.safetensors into a new directory, whole or not at all."""
        import json

        from safetensors.torch import save_file

        with atomic_directory(directory) as staging:
            save_file(self.weights(), str(staging / WEIGHTS_FILE))
            (staging / CONFIG_FILE).write_text(json.dumps(config.cfg_json(), indent=2) + "\n", encoding="utf-8")
        return Path(directory).expanduser()

    @classmethod
    def load(cls, directory: str | Path) -> tuple[TopKSAE, SAEConfig]:
        """An SAE directory read back: its module and config; one line when the files are not an SAE's."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        config = read_config(directory)
        path = Path(directory).expanduser() / WEIGHTS_FILE
        try:
            tensors = load_file(str(path))
        except (OSError, SafetensorError) as error:
            raise InputError(f"{path} cannot be read as safetensors ({error}); the SAE directory is damaged", setting="sae") from None
        sizes = {"d_in": config.d_in, "d_sae": config.d_sae}
        for name, dims in WEIGHT_SHAPES.items():
            expected = tuple(sizes[dim] for dim in dims)
            if name not in tensors or tuple(tensors[name].shape) != expected:
                found = "missing" if name not in tensors else f"of shape {tuple(tensors[name].shape)}"
                raise InputError(f"{path}: {name} is {found}, not {list(expected)} as cfg.json says", setting="sae")
        sae = cls(config.d_in, config.d_sae, config.k)
        with torch.no_grad():
            for name in WEIGHT_SHAPES:
                getattr(sae, name).copy_(tensors[name].float())
        return sae, config
