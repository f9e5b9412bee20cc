"""``python -m resgd``: see :mod:`resgd.cli`."""

from .cli import main

raise SystemExit(main())
