"""Benchmarks of the program's pieces, run in process as the program runs them: importing the
program's package first gives them its environment defaults (huggingface_hub's telemetry off, so
that no first request pays the library's fetch of its agent registry)."""

import hugginggpt  # noqa: F401
