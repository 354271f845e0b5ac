"""The 3-D brain view and what draws on or reads from it: colours, picking, synapse lines, the inspector."""
