"""cdlaw: an experiment runner for compute–data (CD) scaling laws (arXiv 2607.25271)."""

__version__ = "0.1.0"
