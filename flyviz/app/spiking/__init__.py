"""The spiking brain's views: its stimulus, live runs, screens and populations."""
