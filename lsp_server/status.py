"""`cpcLsp/status`: whether the model is loading, ready or failed, for an editor's status bar.

Editors show "loading" while the first suggestions wait for the model, and the cause when it
failed. One notification per change, sent around each model (re)load, and when a model server
stops or starts answering. A server that cannot be reached (or answers too slowly) is not
"loading": it is "unreachable" (or "slow"), and the message says what happened and when the next
try is; the other server failures (a refused key, another model, a bad URL or answer) are errors.
A request that missed its time budget is "slow (N s)", N the seconds since it was sent: the server
stays in use (its prompt goes on decoding), and the next answer in time makes it "ready" again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from lsp_server import routing
from lsp_server.loading import LoadResult, ServerHealth

STATUS_METHOD = "cpcLsp/status"

State = Literal["loading", "ready", "error", "unreachable", "slow"]
STATE_OF_KIND: dict[str, State] = {"unreachable": "unreachable", "timeout": "slow"}  # other kinds: "error"


@dataclass(frozen=True)
class Status:
    state: State
    message: str  # what is loading, or why it failed; never document text


def loading(name: str) -> Status:
    return Status("loading", f"loading {name}")


def loaded(result: LoadResult, name: str) -> Status:
    """After a load: ready, or the error. A failed reload that kept the previous model still serves
    suggestions, so it is "ready", and says what failed. The routed default's models are only
    found here; each says "loading" and "loaded" again when its first document loads it."""
    if result.ok and routing.routes(result.config):
        return Status("ready", f"{name}: files checked; each loads with the first document of its kind")
    if result.ok:
        return Status("ready", f"{name} loaded in {result.seconds:.1f} s")
    if result.kept is not None:
        return Status("ready", f"{result.error} (kept the previous model)")
    message = str(result.error)
    if result.retry_in is not None:
        message += f" (trying again in {result.retry_in:.0f} s)"
    return Status(STATE_OF_KIND.get(result.kind or "", "error"), message)


def serving(health: ServerHealth, name: str) -> Status:
    """After a request found the model server failing (`kind`), or answering again (None)."""
    if health.kind is None:
        return Status("ready", f"{name} answers again")
    if health.kind == "timeout" and health.seconds is not None:
        return slow(health, name)
    return Status(STATE_OF_KIND.get(health.kind, "error"), health.message)


def slow(health: ServerHealth, name: str) -> Status:
    """A request missed its budget (or, `caught_up`, the prompt it left has been decoded since)."""
    took = health.seconds or 0.0
    seconds = f"{took:.1f}" if took < 10 else f"{took:.0f}"
    budget = f"the {health.budget_s:g} s budget" if health.budget_s else "its budget"
    fix = "If it stays slow, raise `modelServerTimeoutMs` or use a faster server (one with a GPU)."
    if health.caught_up:
        return Status(
            "slow",
            f"slow ({seconds} s): {name} needed {seconds} s for a prompt, more than {budget} (`modelServerTimeoutMs`); it is decoded now, so the next suggestions come from it. {fix}",
        )
    return Status(
        "slow",
        f"slow ({seconds} s): {name} did not answer within {budget} (`modelServerTimeoutMs`), so that keystroke got no suggestion; it goes on decoding the prompt for the next keystrokes. {fix}",
    )


def send(protocol: Any, status: Status) -> None:
    """Notify the client (`protocol` is pygls's: anything with `notify(method, params)`)."""
    protocol.notify(STATUS_METHOD, asdict(status))
