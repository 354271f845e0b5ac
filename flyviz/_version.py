"""The single source of flyviz's version."""

__version__ = "0.1.0"
