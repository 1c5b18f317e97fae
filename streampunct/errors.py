"""The exception tree of streampunct.

StreampunctError
├── InputError        bad user input (files, words, options); message says what to fix
├── ModelError        a model folder or artifact is missing, malformed or incompatible
└── DependencyError   an optional dependency needed for a feature is not installed
"""


class StreampunctError(Exception):
    """Root of every error streampunct raises on purpose."""


class InputError(StreampunctError, ValueError):
    """Bad input: a file, a word list or an option the user gave."""


class ModelError(StreampunctError):
    """A model folder or engine artifact is missing, malformed or incompatible."""


class DependencyError(StreampunctError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""
