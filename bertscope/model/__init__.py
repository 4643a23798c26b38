"""The model handle and what it stands on: finding and loading a model, tokenising, one
forward pass under head masks, and model surgery. It imports no analysis.

`masks` and `results` are plain Python and numpy (the UI imports them); the rest loads torch.
"""
