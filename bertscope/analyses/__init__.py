"""The analyses: functions over a loaded model handle (`bertscope.model.session.Session`), one module per
analysis or one package per subject (probing, mixing, attention, importance, geometry); result types live in
torch-free `*results.py` modules, so the CLI's output and the UI can use them without torch.
"""
