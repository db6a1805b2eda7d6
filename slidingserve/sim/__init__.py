"""Discrete-event simulator: the engine, the ground-truth hardware model and the workloads."""
