"""Errors a user can fix. Their message is one line: what is wrong and what to do.

The CLI prints it (naming the flag of its `setting`) and exits with status 2; the UI shows
it as a notification. Anything else that escapes is a bug in bertscope.
"""


class BertscopeError(Exception):
    """Base of every error caused by the user's input, files or environment.

    The message speaks of the problem in the analysis' own words, never of a command-line
    flag or a key. `setting` names the option at fault as the Python API spells it
    (`steps`, `model`, `cache_dir`...): the CLI turns it into its flag, the explorer into
    its own words.
    """

    def __init__(self, message: str = "", *, setting: str | None = None):
        super().__init__(message)
        self.setting = setting


class ModelLoadError(BertscopeError):
    """The model or its tokenizer could not be found, read, or is not a supported encoder."""


class InputError(BertscopeError):
    """Text, options or data the analysis cannot use."""


class NoMLMHeadError(BertscopeError):
    """The model cannot fill in blanks: it was saved without its masked-LM head."""


class MaskSpecError(InputError):
    """A head mask spec such as `0:3,2:*` that is malformed or out of range."""


class Cancelled(BertscopeError):
    """The caller's cancel event was set before the analysis finished."""


class BertscopeNote(UserWarning):
    """Something a person should know about a result: lines skipped, text cut, labels left out.

    The public API issues these as warnings (a notebook shows them); the CLI prints each
    as one `bertscope: warning:` line.
    """
