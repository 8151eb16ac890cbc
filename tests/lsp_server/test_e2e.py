"""End to end: `python -m lsp_server` as a subprocess over stdio, the real engine and default model,
driven by pytest-lsp's client (a real LSP client library).

Every test runs twice, with VS Code's capabilities (UTF-16 positions) and Neovim 0.11's (UTF-8).
The server (and its model) is started once per client kind for the whole module. These are the
claims only the real model can make (the word is really finished, a keystroke really decodes no
prompt, a cancel really stops the engine); the handlers' logic around them is tested fast in
test_handlers.py.
"""

from __future__ import annotations

import asyncio
import sys
import time
from concurrent.futures import Future

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

pytestmark = pytest.mark.model

# The confidence gate off: these claims are about the protocol and the engine under it, and some
# texts here (a word after a long list) are ones the gate rightly hides; its own claims are in
# test_gate_server.py.
SERVER = [sys.executable, "-m", "lsp_server", "--log-level", "info", "--min-confidence", "0"]
CLIENTS = {"vscode": ("visual-studio-code", "utf-16"), "neovim": ("neovim@v0.11.0", "utf-8")}
DRAFT = "Thanks for sending over the draft yest"


def long_prefix(name: str) -> str:
    """About a thousand tokens nobody has seen, so the engine is still busy when the next message
    arrives (the supersede and cancel tests must not race a finished answer)."""
    return f"Inventory of {name}: " + ", ".join(f"{name}-{i}" for i in range(90)) + ".\n"


@pytest_lsp.fixture(scope="module", params=list(CLIENTS), config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient, request):
    spec, encoding = CLIENTS[request.param]
    result = await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities(spec),
            initialization_options={"cpcLsp": {"maxTokens": 16, "threads": 1}},
        )
    )
    assert result.capabilities.position_encoding == encoding
    lsp_client.encoding = encoding
    await wait_for_log(lsp_client, "loaded")
    yield
    await lsp_client.shutdown_session()


async def wait_for_log(client: LanguageClient, needle: str, after: int = 0, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in client.log_messages[after:]:
            if needle in message.message:
                return message.message
        await asyncio.sleep(0.05)
    raise AssertionError(f"no log message containing {needle!r}")


def units(text: str, encoding: str) -> int:
    """Length of `text` in the negotiated code units, computed independently of the server."""
    return len(text.encode("utf-8")) if encoding == "utf-8" else len(text.encode("utf-16-le")) // 2


def open_doc(client: LanguageClient, name: str, text: str) -> str:
    uri = f"file:///tmp/cpc-e2e/{name}"
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "plaintext", 1, text)))
    return uri


def end_of(client: LanguageClient, text: str) -> types.Position:
    lines = text.split("\n")
    return types.Position(len(lines) - 1, units(lines[-1], client.encoding))


def inline_params(uri: str, position: types.Position) -> types.InlineCompletionParams:
    context = types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic)
    return types.InlineCompletionParams(context, types.TextDocumentIdentifier(uri), position)


async def inline(client: LanguageClient, uri: str, position: types.Position):
    return await client.text_document_inline_completion_async(inline_params(uri, position))


def type_text(client: LanguageClient, uri: str, version: int, position: types.Position, text: str) -> None:
    change = types.TextDocumentContentChangePartial(types.Range(position, position), text)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(types.VersionedTextDocumentIdentifier(version, uri), [change])
    )


async def test_mid_word_finishes_the_word(client: LanguageClient):
    uri = open_doc(client, "draft.txt", DRAFT)
    items = await inline(client, uri, end_of(client, DRAFT))
    assert items and "yesterday" in items[0].insert_text  # the most probable first
    start = units("Thanks for sending over the draft ", client.encoding)
    for item in items:  # and the alternatives (other ways to finish the word), each distinct
        assert item.insert_text.startswith("yest")
        assert item.range == types.Range(types.Position(0, start), types.Position(0, start + 4))
    assert len({item.insert_text for item in items}) == len(items)


async def test_completion_fallback(client: LanguageClient):
    uri = open_doc(client, "fallback.txt", DRAFT)
    result = await client.text_document_completion_async(
        types.CompletionParams(types.TextDocumentIdentifier(uri), end_of(client, DRAFT))
    )
    assert result.is_incomplete and result.items
    items = sorted(result.items, key=lambda item: item.sort_text)
    assert "yesterday" in items[0].text_edit.new_text  # the suggestion first, then the alternatives
    start = units("Thanks for sending over the draft ", client.encoding)
    for item in items:
        assert item.text_edit.new_text.startswith("yest")
        assert item.text_edit.range == types.Range(types.Position(0, start), types.Position(0, start + 4))


async def test_a_keystroke_inside_a_word_decodes_no_prompt_tokens(client: LanguageClient):
    uri = open_doc(client, "keystroke.txt", DRAFT)
    assert await inline(client, uri, end_of(client, DRAFT))
    before = await client.protocol.send_request_async("cpcLsp/stats", None)
    type_text(client, uri, 2, end_of(client, DRAFT), "e")
    items = await inline(client, uri, end_of(client, DRAFT + "e"))
    assert items and items[0].insert_text.startswith("yeste")
    stats = await client.protocol.send_request_async("cpcLsp/stats", None)
    # The prompt ends before " yest": unchanged by the keystroke. Either the engine answered it
    # with no prompt token decoded, or it was answered from what was shown (no engine call: the
    # stats are then the first request's, which may have decoded the prompt cold).
    if stats.engineAnswers > before.engineAnswers:
        assert stats.decodedTokens == 0
    else:
        assert stats.carried == before.carried + 1
    assert stats.promptTokens > 0 and stats.stopReason in {"eos", "stop", "line", "length"}
    assert not any(isinstance(value, str) and "yest" in value for value in stats)  # no text


async def test_cancel_request_answers_request_cancelled(client: LanguageClient):
    text = long_prefix(f"cancel-{client.encoding}") + "Please review the attached pro"
    uri = open_doc(client, "cancel.txt", text)
    msg_id = f"cancel-me-{client.encoding}"
    pending: Future = client.protocol.send_request(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(uri, end_of(client, text)), msg_id=msg_id
    )
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wrap_future(pending)
    items = await inline(client, uri, end_of(client, text))  # the engine is free again
    assert items and items[0].insert_text.startswith("pro")
