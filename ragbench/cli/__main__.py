"""``python -m ragbench.cli``: the ``ragbench`` command."""

import sys

from ragbench.cli import main

sys.exit(main())
