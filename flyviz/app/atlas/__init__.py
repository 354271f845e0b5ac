"""The neuron atlas: opening one, Find neurons, the Atlas dock and the Inspector's atlas card."""
