"""hookviz's benchmarks: ``python -m benchmarks`` prints and writes the whole table (see __main__.py)."""
