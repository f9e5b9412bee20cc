"""``python -m resgd``: see :mod:`resgd.cli`."""

import sys

from .cli import main
from .infra.mkl_path import reexec_if_requested
from .validation import ConfigError

try:
    reexec_if_requested(["-m", "resgd", *sys.argv[1:]])  # opt-in $RESGD_MKL_INTEL_PATH: see resgd.infra.mkl_path
except ConfigError as err:  # a bad setting: one line, exit 2 (as in resgd.cli)
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2) from None
raise SystemExit(main())
