"""The Dynamics dock: the model as a dynamical system on one prompt, against null wirings."""
