"""flyviz: watch a connectome language model think.

The package is split so that the numerical core can be used without a GUI:

``flyviz.model``
    Checkpoint loaders, tokenizer, engine and sampler (NumPy/SciPy only).
``flyviz.record``
    Per-token :class:`~flyviz.record.frame.Frame` snapshots, the
    :class:`~flyviz.record.recording.Recording` they form, and movie export.
``flyviz.render``
    vispy visuals and the offscreen renderer.
``flyviz.app``
    The Qt desktop application.
"""

from flyviz._version import __version__

APP_NAME = "flyviz"
ORGANIZATION = "flyviz"
ORGANIZATION_DOMAIN = "flyviz.org"

__all__ = ["__version__", "APP_NAME", "ORGANIZATION", "ORGANIZATION_DOMAIN"]
