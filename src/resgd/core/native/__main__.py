"""``python -m resgd.core.native``: build and check the compiled stack evaluation now (``make install``
does), and say which path the stacked trainer takes. Never fails: without it the Python path runs
(a bad ``$RESGD_NATIVE`` is the one error: one line, exit status 2, as every bad setting)."""

import sys

from .. import stacked  # noqa: F401 - registers the self-test the compiled step must pass
from ...settings import SettingError
from . import library_path, row_kernels, status

if __name__ == "__main__":
    try:
        state = status()
    except SettingError as error:
        print(f"resgd.core.native: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"resgd.core.native: {state}" + (f" ({library_path()}; {row_kernels()})" if state == "compiled" else ""))
