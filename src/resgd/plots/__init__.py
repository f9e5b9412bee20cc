"""Figures: one seaborn style, one way to save, one function per figure kind (in submodules)."""

from .style import FIGURES_ENV, figures_dir, glue_figure, label_standin, save_figure, use_style

__all__ = ["FIGURES_ENV", "figures_dir", "glue_figure", "label_standin", "save_figure", "use_style"]
