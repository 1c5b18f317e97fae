"""``python -m streampunct``: the ``streampunct`` command."""

import sys

from streampunct.cli import main

sys.exit(main())
