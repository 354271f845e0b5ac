"""The embedded demo brain: a default model, made entirely by flyviz, that runs offline.

The real Fly LLM checkpoints live on the Hugging Face Hub. So that ``flyviz``
opens on something that runs, writes English and shows real recurrent
dynamics without a download, flyviz ships a small demo brain of its own:

* a **synthetic** fly-like connectome with the real sizes (49,393 neurons,
  9,050,172 signed synapses), generated from a seed — not the fly's wiring;
* a byte-level BPE tokenizer (1,024 tokens) and a corpus of children's stories
  that flyviz writes itself;
* parameters fitted on a CPU as an echo-state network: fixed wiring and
  neuron parameters, a fitted rank-64 readout.

It is stored like the real web export (``assets/demo/model``: manifest.json
and raw float32 files) plus a compact graph that :func:`load_demo` unpacks
once into a fly-connectome-49k-style dataset folder in the user cache, and it
loads through the same loader as the real checkpoints.

``flyviz build-demo`` rebuilds it from nothing (:mod:`flyviz.demo.build`);
``python -m flyviz.demo.evaluate`` measures its quality.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

from flyviz.demo.names import DEMO_DESCRIPTION, DEMO_NAME, DEMO_SHORT_DESCRIPTION


def load_demo(progress: Callable[[str, float], None] | None = None) -> "Checkpoint":
    """Load the embedded demo brain (see :func:`flyviz.demo.loader.load_demo`)."""
    from flyviz.demo.loader import load_demo as _load

    return _load(progress)


__all__ = ["DEMO_NAME", "DEMO_DESCRIPTION", "DEMO_SHORT_DESCRIPTION", "load_demo"]
