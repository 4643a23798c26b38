"""The analyses: each module a set of functions over a loaded model handle
(`core.model.session.Session`). Result types live in torch-free modules beside them
(`*_results.py`), so the CLI's output and the UI can use them without torch.
"""
