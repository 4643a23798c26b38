"""Attention statistics over a corpus: `patterns` (Kovaleva's classes, Clark's attention to [CLS]/[SEP]) and
`syntax` (Clark et al.'s heads that find dependency relations), each its own way in; `headstats` the
per-head statistics they share; `patterns_results` and `syntax_results` hold
their result types, torch-free.
"""
