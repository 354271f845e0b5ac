"""Rendering with vispy: the neuron cloud, colormaps, camera views, picking and offscreen frames.

No Qt widgets live here; the app embeds these visuals in its own canvas and
movie export renders them offscreen.
"""
