"""Lesion maps: the importance colours, the groups' table and the estimated lesions."""
