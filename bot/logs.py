"""Logging for operators: details go to a log file (and stderr with ``-v``); secrets are masked.

A line written during a traced run names its trace (`` trace_id=…`` after the logger's name,
:data:`LINE_FORMAT`), so an operator finds the run's lines from a trace and the trace from a line.

Every secret value from the settings, and the credentials of any URL, are replaced by ``***`` in
every line written, tracebacks included, whatever logger produced it (our code, openai,
huggingface_hub, discord.py, slack_sdk).
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from collections.abc import Iterable
from pathlib import Path

from pipeline.redact import mask_credentials

_PLAIN = logging.Formatter()
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s%(trace)s: %(message)s"
"""A log line: time, level, logger, the run's trace id while tracing is on and a span is current
(`` trace_id=<32 hex digits>``, :func:`pipeline.tracing.install`), the message."""


class RedactSecrets(logging.Filter):
    """Replace each secret (strings of 4+ characters) by ``***`` and mask URL credentials
    (``https://user:password@host`` → ``https://***@host``) in a record: its message, its
    traceback text (``exc_text``, formatted here once, so every handler gets it masked) and its
    ``stack_info``. A message whose format string does not fit its arguments is logged raw
    instead of raising at the caller."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with every secret and URL credential masked."""
        for s in self.secrets:
            text = text.replace(s, "***")
        return mask_credentials(text)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # a bad format string: never raise at the caller; log the raw text and arguments
            msg = f"{record.msg} {record.args!r}"
        masked = self.redact(msg)
        if masked != msg or record.args:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:  # masked once here, for every handler
            record.exc_text = _PLAIN.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


class RedactingFormatter(logging.Formatter):
    """A formatter whose whole output (tracebacks and stack included) goes through
    :class:`RedactSecrets`: an exception's text can carry a key or a URL with a password."""

    def __init__(self, fmt: str, redact: RedactSecrets) -> None:
        super().__init__(fmt, defaults={"trace": ""})  # "trace" is set only while a span is current
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact.redact(super().format(record))


class LogFile(logging.handlers.RotatingFileHandler):
    """The rotating log file. A line the file system refuses (a full disk, a read-only mount) is
    dropped, and that is said once on stderr in one sentence, instead of logging's default
    (``Handler.handleError``: a "Logging error" traceback on stderr for every line, in the middle
    of a terminal chat); once a line is written again, a later failure is said again."""

    def __init__(self, filename: Path, **kwargs: object) -> None:
        super().__init__(filename, **kwargs)  # type: ignore[arg-type]
        self.failing = False
        self._failed_now = False

    def emit(self, record: logging.LogRecord) -> None:
        self._failed_now = False
        super().emit(record)
        if not self._failed_now:
            self.failing = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        self._failed_now = True
        if not self.failing:
            self.failing = True
            error = sys.exc_info()[1]
            reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
            sys.stderr.write(f"hugginggpt: the log file {self.baseFilename} cannot be written ({reason}); "
                             "log lines are dropped until it can.\n")


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
    fmt = RedactingFormatter(LINE_FORMAT, redact)
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            fh = LogFile(log_file, maxBytes=5_000_000, backupCount=3, encoding="utf-8")
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
