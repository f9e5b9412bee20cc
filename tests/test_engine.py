"""``resgd.core.engine.engine_path``: how a step is computed here, as flat strings, and its digest."""

from __future__ import annotations

import pytest
import torch

import resgd
from resgd import settings
from resgd.core import engine


def test_the_engine_path_names_each_part_as_a_string():
    path = engine.engine_path()
    assert tuple(path) == engine.FIELDS and all(isinstance(v, str) for v in path.values())
    assert path["engine"] == f"resgd {resgd.__version__}" and path["torch"] == torch.__version__
    assert path["isa"] == torch.backends.cpu.get_cpu_capability()
    assert path["mkl_path"] in ("intel", "default")


def test_the_digest_is_short_stable_and_tells_engines_apart():
    path = engine.engine_path()
    digest = engine.engine_path_digest(path)
    assert len(digest) == 12 and int(digest, 16) >= 0
    assert engine.engine_path_digest(dict(reversed(list(path.items())))) == digest  # order does not matter
    for field in engine.FIELDS:
        assert engine.engine_path_digest({**path, field: "other"}) != digest, field


@pytest.mark.parametrize("variable", ["RESGD_NATIVE", "RESGD_GRAD_BACKEND"])
def test_the_retired_engine_switches_are_refused_by_name(variable):
    """One engine: a switch that chose between engines is gone, and setting it is an error, not a no-op."""
    with pytest.raises(settings.SettingError, match=rf"^\${variable}: not a setting of this package"):
        settings.check_all({variable: "0"})
