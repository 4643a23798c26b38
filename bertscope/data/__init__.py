"""The data: corpus files, the generated treebank and probing tasks, the cache directory,
batch planning and atomic file writes. No torch, and nothing from the model or the analyses.
"""
