"""``python -m hugginggpt``: the same as the ``hugginggpt`` command."""

import sys

from . import main

sys.exit(main())
