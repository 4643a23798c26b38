"""Head importance and pruning (Michel et al. 2019, Voita et al. 2019). The way in is `run` (importance
and the pruning curve); `objectives` what importance is measured on, `pruned_export` a pruned copy written
to disk; `results` holds the result types, torch-free.
"""
