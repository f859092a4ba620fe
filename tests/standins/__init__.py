"""In-process stand-in servers for tests (127.0.0.1, real wire formats)."""
