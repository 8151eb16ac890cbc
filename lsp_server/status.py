"""`cpcLsp/status`: whether the model is loading, ready or failed, for an editor's status bar.

Editors show "loading" while the first suggestions wait for the model, and the cause when it
failed. One notification per change, sent around each model (re)load.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from lsp_server.scheduler import LoadResult

STATUS_METHOD = "cpcLsp/status"

State = Literal["loading", "ready", "error"]


@dataclass(frozen=True)
class Status:
    state: State
    message: str  # what is loading, or why it failed; never document text


def loading(name: str) -> Status:
    return Status("loading", f"loading {name}")


def loaded(result: LoadResult, name: str) -> Status:
    """After a load: ready, or the error. A failed reload that kept the previous model still serves
    suggestions, so it is "ready", and says what failed."""
    if result.ok:
        return Status("ready", f"{name} loaded in {result.seconds:.1f} s")
    if result.kept is not None:
        return Status("ready", f"{result.error} (kept the previous model)")
    return Status("error", str(result.error))


def send(protocol: Any, status: Status) -> None:
    """Notify the client (`protocol` is pygls's: anything with `notify(method, params)`)."""
    protocol.notify(STATUS_METHOD, asdict(status))
