"""The `paddlectl` command line (see main.py)."""

from .main import main, run

__all__ = ["main", "run"]
