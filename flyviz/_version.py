"""The single source of flyviz's version."""

__version__ = "0.5.0"
