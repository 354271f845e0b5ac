"""What the demo brain is called and what it is, in words (the one place this is said).

Apart from :mod:`flyviz.demo`, which offers them, so that the demo's loader reads them
without importing the package that loads it.
"""

from __future__ import annotations

__all__ = ["DEMO_DESCRIPTION", "DEMO_NAME", "DEMO_SHORT_DESCRIPTION"]

#: Display name of the demo brain (window titles, ``flyviz info``).
DEMO_NAME = "flyviz demo brain (synthetic)"

#: What the demo brain is, in plain words, for ``flyviz info demo``, the window
#: title's tooltip and the about box. Keep it the one place this is said.
DEMO_DESCRIPTION = (
    "The flyviz demo brain is a stand-in that works offline. Its wiring is synthetic: "
    "a generated fly-like graph with the real sizes (49,393 neurons, 9,050,172 signed "
    "synapses, mirrored hemispheres, made-up soma positions), NOT the fruit-fly connectome. "
    "It was fitted by flyviz on children's stories that flyviz writes itself, so it writes "
    "simple English, and its activity is real recurrent dynamics of that synthetic graph. "
    "To see the real fly brain, load a real checkpoint: "
    "'flyviz gui --model fernandofernandes/fly-wordbrain-rank64' "
    "(or ngxson/fly-llm-hf, or a downloaded folder); the MaleCNS connectome they use is "
    "CC BY 4.0 (FlyEM / HHMI Janelia and partners)."
)

#: One-line form for status bars and window titles.
DEMO_SHORT_DESCRIPTION = "synthetic demo brain, not the fly connectome"
