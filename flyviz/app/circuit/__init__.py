"""The Circuit dock: the part of the brain that carries a task, run alone."""
