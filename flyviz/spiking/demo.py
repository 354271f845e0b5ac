"""The demo spiking brain: the LIF model on the embedded demo connectome (works offline).

It is the graph :func:`flyviz.load("demo") <flyviz.api.load>` runs (``flyviz.demo.load_demo``,
built on first use into flyviz's cache): 49,393 neurons and 9,050,172 signed synapse counts of a
synthetic fly-like wiring, NOT the fruit-fly connectome, with MaleCNS's ``w_syn`` of 0.192 mV.
With nothing named to excite, a run excites :data:`DEMO_EXCITED` sensory neurons (as many as
the authors' right-hemisphere sugar GRNs): the ``cb_sensory`` neurons with the most outgoing
excitatory synapses.

The demo brain is made beside the loader that names it (:mod:`flyviz.spiking.brain`, whose
``load_brain("demo")`` returns it); this module offers it under its own name.
"""

from __future__ import annotations

from flyviz.spiking.brain import DEMO_EXCITED, demo_brain, strongest_sensory

__all__ = ["DEMO_EXCITED", "demo_brain", "strongest_sensory"]
