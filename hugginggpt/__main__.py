"""``python -m hugginggpt``: the same as the ``hugginggpt`` command, leaving without the
interpreter's teardown once everything is closed (:func:`hugginggpt.exit_now`)."""

from . import exit_now, main

exit_now(main())
