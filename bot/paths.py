"""Where hugginggpt keeps its data when the settings do not say: the user's data directory as the
platform defines it (``platformdirs``: ``$XDG_DATA_HOME/hugginggpt``, by default
``~/.local/share/hugginggpt`` on Linux; ``~/Library/Application Support/hugginggpt`` on macOS;
``%LOCALAPPDATA%\\hugginggpt`` on Windows). Cheap to import: ``hugginggpt --version`` prints it."""

from __future__ import annotations

from pathlib import Path

import platformdirs


def default_data_dir() -> Path:
    """The per-user data directory (absolute), the same from whatever directory a command runs."""
    return Path(platformdirs.user_data_dir("hugginggpt", appauthor=False))
