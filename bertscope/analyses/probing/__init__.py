"""Probing: what each layer's hidden states say of a task (Conneau, Tenney, Hewitt, Voita & Titov).

The way in is `run.run_probe` (a probe per layer with its baselines). `probes` fits the classifiers (linear,
MLP; `lbfgs` their solver), `structural` the distance and depth probes, `features` builds and caches the
hidden states they read, `mdl` the online codes, `decision` a trained probe's decision for one sentence
(attribution, patching); `results` holds the result types, torch-free.
"""
