"""What reaches the logs: no document text unless the user asks, and a failure's stack frames.

Document text can hide in three places of a log record: its arguments (pygls logs whole messages:
a failed handler's params, every message it sends at INFO), an exception's message (a ValueError
that quotes its input), and nothing else here. So a failure is logged by its type and frames
(file, line, function, source line of *our* code), never by its message.

`TextGuard` is installed on pygls's loggers while a server runs (`installed`) and taken off when it
stops, so importing or building a server changes nothing in the process's logging.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def frames(exc: BaseException) -> str:
    """``TypeName`` and the stack frames where it was raised, without the exception's message."""
    trace = traceback.extract_tb(exc.__traceback__)
    data = getattr(exc, "data", None)
    if not trace and isinstance(data, dict) and isinstance(data.get("traceback"), list):
        listed = "".join(data["traceback"])  # pygls's JsonRpcInternalError: frames already formatted
    else:
        listed = "".join(traceback.format_list(trace))
    name = type(exc).__name__
    return f"{name}\n{listed.rstrip()}" if listed.strip() else name


class TextGuard(logging.Filter):
    """Unless `allowed`: drops records below WARNING (pygls logs every message it sends at INFO,
    suggestions included), replaces arguments that could carry text by their type (short plain
    values such as ids, method names and numbers stay), and an exception by its `frames`.
    Always, allowed or not: each of `secrets` (the model server's API key, which a client's
    settings carry and pygls would log with them) is replaced by "<hidden>"."""

    def __init__(self, allowed: bool = False) -> None:
        super().__init__()
        self.allowed = allowed
        self.secrets: frozenset[str] = frozenset()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            self._hide_secrets(record)
        if self.allowed:
            return True
        if record.levelno < logging.WARNING:
            return False
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record.args = tuple(a if _plain(a) else f"<{type(a).__name__} withheld>" for a in args)
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = frames(record.exc_info[1])
            record.exc_info = None
        return True

    def _hide_secrets(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        if not any(secret in text for secret in self.secrets):
            return
        for secret in self.secrets:
            text = text.replace(secret, "<hidden>")
        record.msg, record.args, record.exc_info, record.exc_text = text, (), None, None


def _plain(value: Any) -> bool:
    return isinstance(value, (int, float, type(None))) or (isinstance(value, str) and len(value) <= 80)


def _pygls_loggers() -> list[logging.Logger]:
    """pygls's loggers (filters are not inherited by child loggers, so each gets the guard)."""
    found = [logging.getLogger("pygls")]
    for name, node in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("pygls.") and isinstance(node, logging.Logger):
            found.append(node)
    return found


@contextmanager
def installed(guard: TextGuard) -> Iterator[TextGuard]:
    """`guard` on pygls's loggers for the duration (a server's run)."""
    loggers = _pygls_loggers()
    for node in loggers:
        node.addFilter(guard)
    try:
        yield guard
    finally:
        for node in loggers:
            node.removeFilter(guard)
