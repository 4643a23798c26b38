"""Context mixing: how much each token's representation draws on each other token (attention, norms, ALTI,
rollout, value zeroing, flow). The way in is `run`; `results` holds the result types, torch-free.
"""
