"""specdec's benchmarks, run as modules from the repository root (``python -m benchmarks.<kind>.<name>``)."""
