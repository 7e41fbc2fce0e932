"""Foundations that know nothing of the paper: argument checks, the seeding rule, devices, statistics,
result files and their provenance."""
