"""Representation geometry: anisotropy, intrinsic dimension, neighbours and CKA across layers. The way in
is `run`; `representations` gathers a corpus's token vectors, `compare` sets two models side by side;
`results` holds the result types, torch-free.
"""
