"""Reproducible benchmarks; each script prints one JSON object (``make bench``)."""
