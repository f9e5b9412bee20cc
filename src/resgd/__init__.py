"""resgd: gradient descent on single- and multi-layer Transformers with residual connections.

The companion library of the book reproducing Qin, Zhou & Zhu (arXiv 2506.05249).
"""

__version__ = "0.3.0"
