"""``python -m resgd``: see :mod:`resgd.cli`."""

import sys

from .cli import main
from .mkl_path import reexec_if_requested

reexec_if_requested(["-m", "resgd", *sys.argv[1:]])  # opt-in $RESGD_MKL_INTEL_PATH: see resgd.mkl_path
raise SystemExit(main())
