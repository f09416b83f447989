"""The package's version: the one place it is written (pyproject reads it, the app reports it)."""

__version__ = "0.1.0"
