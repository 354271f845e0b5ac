"""Runs of any model kind: the worker thread, run and comparison control, models, interventions."""
