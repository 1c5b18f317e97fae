"""The exception tree of streampunct.

StreampunctError
├── InputError        bad user input (files, words, options); message says what to fix
├── ModelError        a model folder or artifact is missing, malformed or incompatible
├── DependencyError   an optional dependency needed for a feature is not installed
├── OverloadedError   the inference queue is full; try again once it drains
└── EngineFailedError the engine failed on a request (the engine's own error,
                      an ``engines.base.EngineError``, is the ``__cause__``)
"""


class StreampunctError(Exception):
    """Root of every error streampunct raises on purpose."""


class InputError(StreampunctError, ValueError):
    """Bad input: a file, a word list or an option the user gave."""


class ModelError(StreampunctError):
    """A model folder or engine artifact is missing, malformed or incompatible."""


class DependencyError(StreampunctError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class OverloadedError(StreampunctError):
    """The batcher's queue is full; try again once it drains."""


class EngineFailedError(StreampunctError):
    """The engine failed on a request (the original exception is the ``__cause__``)."""
