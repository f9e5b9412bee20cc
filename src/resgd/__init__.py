"""resgd: gradient descent on single- and multi-layer Transformers with residual connections.

The companion library of the book reproducing Qin, Zhou & Zhu (arXiv 2506.05249).
"""

from .infra.source_hash import record_imports as _record_imports

_record_imports()  # first: every other module compiled from source it records (the code identity)

from .infra.arithmetic import pin as _pin  # noqa: E402

__version__ = "0.3.0"

_pin()  # before torch or numpy load: the kernels every host runs alike (resgd.infra.arithmetic)
