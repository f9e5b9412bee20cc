"""Every study names and draws its figures the same way (one way to do each thing): ``FIGURE_KINDS``,
``figure_name(kind, …)`` for the file name and ``make_figure(results, kind)``, with a one-line
ConfigError for an unknown kind. The notebooks and ``python -m resgd reproduce`` call these."""

from __future__ import annotations

import inspect

import pytest

from resgd.collapse import study as collapse
from resgd.experiments import pages as experiments
from resgd.robustness import study as robustness
from resgd.theorem1 import study as theorem1
from resgd.validation import ConfigError

STUDIES = {"theorem1": theorem1, "collapse": collapse, "experiments": experiments, "robustness": robustness}
QUALIFIER = {"experiments": ("jena",), "robustness": ("quick",)}


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_study_figures_follow_the_convention(name):
    study = STUDIES[name]
    kinds = study.FIGURE_KINDS
    assert isinstance(kinds, tuple) and kinds and len(set(kinds)) == len(kinds)
    assert list(inspect.signature(study.figure_name).parameters)[0] == "kind"
    assert list(inspect.signature(study.make_figure).parameters)[1] == "kind"
    names = {study.figure_name(kind, *QUALIFIER.get(name, ())) for kind in kinds}
    assert len(names) == len(kinds)  # one file per kind
    with pytest.raises(ConfigError, match="figure kind"):
        study.figure_name("no_such_kind", *QUALIFIER.get(name, ()))


def test_no_study_keeps_a_second_naming_table():
    for name, study in STUDIES.items():
        assert not hasattr(study, "FIGURE_NAMES"), f"{name} still exposes FIGURE_NAMES"
