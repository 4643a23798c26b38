"""bertscope: a terminal explorer for BERT-family encoders.

Importing this package stays cheap (no torch) so `bertscope --help` and the first
frame of the UI appear at once; the model core lives in `bertscope.core`.
"""

__version__ = "0.1.0"
