"""Sparse autoencoders on a hidden state: dictionary features of an encoder (Gao et al. 2024's TopK SAE).

The ways in are `train.train_sae` (train one on a corpus and write it in SAELens's layout) and
`features.sae_features` (read one's features on a corpus: density, top contexts, histograms, labels).
`autoencoder` is the SAE itself (torch), `activations` streams a hidden state's tokens from a corpus (and splices
a replacement into the pass), `files` reads and writes cfg.json torch-free; `results` holds the result types,
torch-free.
"""
