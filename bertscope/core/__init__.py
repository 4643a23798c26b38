"""The model core: the only package that imports torch and transformers.

Modules split by cost: `errors`, `masks` and `results` are plain Python and numpy, so the
UI may import them; `session` and the modules it uses load torch. The usual entry point:

    from bertscope.core.model.session import Session
    session = Session.open()              # the bundled all-MiniLM-L6-v2
    result = session.forward("The cat sat.", attentions=True)
"""
