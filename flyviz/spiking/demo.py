"""The demo spiking brain: the LIF model on the embedded demo connectome (works offline).

It is the graph :func:`flyviz.load("demo") <flyviz.api.load>` runs (``flyviz.demo.load_demo``,
built on first use into flyviz's cache): 49,393 neurons and 9,050,172 signed synapse counts of a
synthetic fly-like wiring, NOT the fruit-fly connectome, with MaleCNS's ``w_syn`` of 0.192 mV.
With nothing named to excite, a run excites :data:`DEMO_EXCITED` sensory neurons (as many as
the authors' right-hemisphere sugar GRNs): the ``cb_sensory`` neurons with the most outgoing
excitatory synapses.
"""

from __future__ import annotations

import numpy as np

from flyviz.spiking.brain import SpikingBrain, brain_from_checkpoint

__all__ = ["DEMO_EXCITED", "demo_brain", "strongest_sensory"]

#: Neurons a demo run excites by default: the authors' 21 sugar-sensing GRNs, in number.
DEMO_EXCITED = 21

_cache: list[SpikingBrain] = []


def demo_brain() -> SpikingBrain:
    """The demo spiking brain (built once per process)."""
    if _cache:
        return _cache[0]
    from flyviz.model.resolve import load_model

    brain = brain_from_checkpoint(load_model("demo"))
    brain.name = "demo"
    brain.default_excite = strongest_sensory(brain)
    _cache.append(brain)
    return brain


def strongest_sensory(brain: SpikingBrain, count: int = DEMO_EXCITED) -> np.ndarray:
    """The ``count`` ``cb_sensory`` neurons (any neurons, on a brain without labels) with the
    most outgoing excitatory synapses, sorted: what a run on a Fly LLM model's graph excites
    when nothing is named."""
    excitatory = np.where(brain.counts > 0, brain.counts, 0.0)
    out = np.add.reduceat(excitatory, brain.indptr[:-1]) if brain.synapses else \
        np.zeros(brain.neurons)
    out[np.diff(brain.indptr) == 0] = 0.0
    if brain.superclass is not None:
        sensory = np.array([s == "cb_sensory" for s in brain.superclass])
        out = np.where(sensory, out, -1.0)
    return np.sort(np.argsort(-out, kind="stable")[:int(count)])
