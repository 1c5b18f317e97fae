"""streampunct: real-time punctuation for streaming speech recognition output."""

from streampunct.errors import StreampunctError
from streampunct.labels import LABELS

__all__ = ["LABELS", "StreampunctError", "__version__"]
__version__ = "0.1.0"
