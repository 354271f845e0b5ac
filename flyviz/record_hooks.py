"""What only the layers above the recordings know, handed down to them.

``flyviz.model`` and ``flyviz.record`` import nothing above them (``tests/test_architecture.py``
checks it). Where the record layer needs an answer only a model's kind has, the kinds put
the function that gives it here when they are imported (``flyviz.kinds``, which every
command and ``flyviz.load`` import); without them the record layer uses its own default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: ``recording -> FrameTiming``: how a recording's frames are timed and what its states are
#: (:meth:`flyviz.kinds.ModelKind.frame_timing`); ``None`` until :mod:`flyviz.kinds` is
#: imported, when a frame is a token (:class:`flyviz.record.convert.FrameTiming`).
frame_timing: Callable[[Any], Any] | None = None
