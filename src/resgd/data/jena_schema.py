"""Facts about the Jena climate file (Max Planck Institute for Biogeochemistry, 2009–2016).

Shared by the parser (:mod:`.jena`) and the synthetic stand-in (:mod:`.standin`), which must
produce exactly this schema so that it goes through the same parser.
"""

from __future__ import annotations

import pandas as pd

JENA_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/jena_climate_2009_2016.csv.zip"
JENA_FILE_NAME = "jena_climate_2009_2016.csv"
JENA_RELATIVE_PATH = f"jena/{JENA_FILE_NAME}"

DATE_COLUMN = "Date Time"
DATE_FORMAT = "%d.%m.%Y %H:%M:%S"
DATE_FORMAT_DOC = "dd.mm.yyyy HH:MM:SS"
FEATURE_NAMES: tuple[str, ...] = (
    "p (mbar)",
    "T (degC)",
    "Tpot (K)",
    "Tdew (degC)",
    "rh (%)",
    "VPmax (mbar)",
    "VPact (mbar)",
    "VPdef (mbar)",
    "sh (g/kg)",
    "H2OC (mmol/mol)",
    "rho (g/m**3)",
    "wv (m/s)",
    "max. wv (m/s)",
    "wd (deg)",
)
COLUMNS: tuple[str, ...] = (DATE_COLUMN, *FEATURE_NAMES)
CANONICAL_HEADER = ",".join(f'"{name}"' for name in COLUMNS)
"""The first line of the canonical file, quotes included."""

TARGET_NAME = "T (degC)"
WIND_COLUMNS: tuple[str, ...] = ("wv (m/s)", "max. wv (m/s)")
WIND_ERROR_VALUE = -9999.0
"""The station's marker for a failed wind measurement (a few rows of ``wv`` and ``max. wv``)."""

EXCERPT_FILE_NAME = "jena_climate_2009_excerpt.csv"
EXCERPT_RELATIVE_PATH = f"jena/{EXCERPT_FILE_NAME}"
EXCERPT_SHA256 = "4f8858d6a054d939e04969bf1a3fcb175e99a211c767853bf937de1ed47b0ab1"
"""The January 2009 excerpt (real measurements: the first 4,000 rows and first 12 columns of the
canonical file), recognised by this checksum (``../shared/data/README.md`` gives its provenance)."""
EXCERPT_ROWS = 4_000
NONWIND_NAMES: tuple[str, ...] = tuple(name for name in FEATURE_NAMES if name not in ("wv (m/s)", "max. wv (m/s)", "wd (deg)"))
"""The 11 variables every source has (the excerpt has no wind columns): the task's inputs."""
TASK_LAST = pd.Timestamp(2009, 1, 28, 18, 40)
"""The task's period ends here (the excerpt's last row): January 2009, 28 days, for every source."""

CANONICAL_ROWS = 420_551
CANONICAL_FIRST = pd.Timestamp(2009, 1, 1, 0, 10)
CANONICAL_LAST = pd.Timestamp(2017, 1, 1, 0, 0)
STEP = pd.Timedelta(minutes=10)
