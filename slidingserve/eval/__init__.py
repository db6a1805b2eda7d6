"""Experiments: goodput search, capacity bound, reports and plots."""
