"""Logging for operators: details go to a log file (and stderr with ``-v``); secrets are masked.

Every secret value from the settings is replaced by ``***`` in every record, whatever logger
produced it (our code, openai, huggingface_hub, discord.py, slack_sdk).
"""

from __future__ import annotations

import logging
import logging.handlers
from collections.abc import Iterable
from pathlib import Path


class RedactSecrets(logging.Filter):
    """Replace each secret (strings of 4+ characters) by ``***`` in the formatted message."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            msg = record.getMessage()
            for s in self.secrets:
                msg = msg.replace(s, "***")
            record.msg, record.args = msg, None
        return True


def setup_logging(*, verbose: int = 0, log_file: Path | None = None, secrets: Iterable[str] = ()) -> None:
    """Configure the root logger.

    Args:
        verbose: 0 → only the log file (INFO); 1 → also INFO on stderr; 2 → DEBUG everywhere.
        log_file: path of the rotating log file (created with its directory), or ``None``.
        secrets: values never to print.
    """
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    level = logging.DEBUG if verbose >= 2 else logging.INFO
    root.setLevel(level)
    redact = RedactSecrets(secrets)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            fh = logging.handlers.RotatingFileHandler(log_file, maxBytes=5_000_000, backupCount=3, encoding="utf-8")
            fh.setFormatter(fmt)
            fh.addFilter(redact)
            root.addHandler(fh)
        except OSError:
            pass
    if verbose:
        sh = logging.StreamHandler()
        sh.setFormatter(fmt)
        sh.addFilter(redact)
        root.addHandler(sh)
    else:
        root.addHandler(logging.NullHandler())
    for noisy in ("httpx2", "httpx", "httpcore", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
