"""Errors a user can fix. Their message is one line: what is wrong and what to do.

The CLI prints it and exits with status 2; the UI shows it as a notification. Anything
else that escapes is a bug in bertscope.
"""


class BertscopeError(Exception):
    """Base of every error caused by the user's input, files or environment."""


class ModelLoadError(BertscopeError):
    """The model or its tokenizer could not be found, read, or is not a supported encoder."""


class InputError(BertscopeError):
    """Text, options or data the analysis cannot use."""


class MaskSpecError(InputError):
    """A head mask spec such as `0:3,2:*` that is malformed or out of range."""


class Cancelled(BertscopeError):
    """The caller's cancel event was set before the analysis finished."""


class BertscopeNote(UserWarning):
    """Something a person should know about a result: lines skipped, text cut, labels left out.

    The public API issues these as warnings (a notebook shows them); the CLI prints each
    as one `bertscope: warning:` line.
    """
