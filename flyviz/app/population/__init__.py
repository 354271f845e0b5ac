"""The population docks: the whole-brain raster, cell types over time and the trajectory."""
