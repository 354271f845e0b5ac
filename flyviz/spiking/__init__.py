"""The whole-brain spiking model of Shiu et al. (Nature 2024), tick for tick as Brian2 runs it.

Qt-free: brains (:mod:`flyviz.spiking.brain`: the authors' files, a Fly LLM checkpoint's graph,
a ConnecTorch ``.ct`` brain, the demo), the compiled engine (:mod:`flyviz.spiking.engine`), runs
(:mod:`flyviz.spiking.run`) and screens of many neuron sets (:mod:`flyviz.spiking.screen`,
``flyviz screen``)::

    from flyviz import spiking
    brain = spiking.load_brain("demo")
    run = spiking.simulate(brain, excite=brain.default_excite, duration_s=1.0, trials=30)
    run.to_frame("sugar").to_parquet("spikes.parquet")
    live = spiking.SpikingSimulation(brain, excite=brain.default_excite)
    ticks, neurons = live.advance(100)   # 10 ms at a time, state kept between calls
"""

from flyviz.spiking.brain import (BrainError, SpikingBrain, brain_from_checkpoint,
                                  brain_from_connectorch, load_brain)
from flyviz.spiking.engine import LIFParams, propagator
from flyviz.spiking.run import (SpikeRun, SpikingSimulation, poisson_events, read_input_spikes,
                                select, simulate)

__all__ = ["BrainError", "LIFParams", "SpikeRun", "SpikingBrain", "brain_from_checkpoint",
           "brain_from_connectorch", "load_brain", "poisson_events", "propagator", "read_input_spikes", "select",
           "simulate", "SpikingSimulation"]
