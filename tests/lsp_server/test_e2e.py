"""End to end: `python -m lsp_server` as a subprocess over stdio, the real engine and default model.

Every test runs twice, with VS Code's capabilities (UTF-16 positions) and Neovim 0.11's (UTF-8).
The server (and its model) is started once per client kind for the whole module.
"""

from __future__ import annotations

import asyncio
import sys
import time
from concurrent.futures import Future

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcRequestCancelled
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

SERVER = [sys.executable, "-m", "lsp_server", "--log-level", "info"]
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
            initialization_options={"cpcLsp": {"maxTokens": 16}},
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
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "plaintext", 1, text))
    )
    return uri


def end_of(client: LanguageClient, text: str) -> types.Position:
    lines = text.split("\n")
    return types.Position(len(lines) - 1, units(lines[-1], client.encoding))


def inline_params(uri: str, position: types.Position) -> types.InlineCompletionParams:
    context = types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic)
    return types.InlineCompletionParams(context, types.TextDocumentIdentifier(uri), position)


async def inline(client: LanguageClient, uri: str, position: types.Position):
    return await client.text_document_inline_completion_async(inline_params(uri, position))


def send_inline(client: LanguageClient, uri: str, position: types.Position) -> asyncio.Future:
    """Send now, answer later (the client's `*_async` methods are coroutines: they send only once
    awaited, which would serialise the requests a test means to overlap)."""
    params = inline_params(uri, position)
    return asyncio.wrap_future(client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params))


def type_text(client: LanguageClient, uri: str, version: int, position: types.Position, text: str) -> None:
    change = types.TextDocumentContentChangePartial(types.Range(position, position), text)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(types.VersionedTextDocumentIdentifier(version, uri), [change])
    )


async def test_mid_word_finishes_the_word(client: LanguageClient):
    uri = open_doc(client, "draft.txt", DRAFT)
    items = await inline(client, uri, end_of(client, DRAFT))
    assert len(items) == 1
    item = items[0]
    assert "yesterday" in item.insert_text and item.insert_text.startswith("yest")
    start = units("Thanks for sending over the draft ", client.encoding)
    assert item.range == types.Range(types.Position(0, start), types.Position(0, start + 4))


async def test_astral_characters_before_the_cursor(client: LanguageClient):
    before = "Notes 😀 𝒳: thanks for sending over the draft yest"
    text = before + " and the notes.\nNext line"
    uri = open_doc(client, "astral.txt", text)
    cursor = types.Position(0, units(before, client.encoding))
    items = await inline(client, uri, cursor)
    assert len(items) == 1
    item = items[0]
    assert item.insert_text.startswith("yest") and len(item.insert_text) > 4
    assert item.range.start == types.Position(0, units(before[:-4], client.encoding))
    assert item.range.end == cursor


async def test_completion_fallback(client: LanguageClient):
    uri = open_doc(client, "fallback.txt", DRAFT)
    result = await client.text_document_completion_async(
        types.CompletionParams(types.TextDocumentIdentifier(uri), end_of(client, DRAFT))
    )
    assert result.is_incomplete and len(result.items) == 1
    edit = result.items[0].text_edit
    assert "yesterday" in edit.new_text and edit.new_text.startswith("yest")
    start = units("Thanks for sending over the draft ", client.encoding)
    assert edit.range == types.Range(types.Position(0, start), types.Position(0, start + 4))


async def test_a_keystroke_inside_a_word_decodes_no_prompt_tokens(client: LanguageClient):
    uri = open_doc(client, "keystroke.txt", DRAFT)
    assert await inline(client, uri, end_of(client, DRAFT))
    type_text(client, uri, 2, end_of(client, DRAFT), "e")
    items = await inline(client, uri, end_of(client, DRAFT + "e"))
    assert items and items[0].insert_text.startswith("yeste")
    stats = await client.protocol.send_request_async("cpcLsp/stats", None)
    assert stats.decodedTokens == 0  # the prompt ends before " yest": unchanged by the keystroke
    assert stats.promptTokens > 0 and stats.stopReason in {"eos", "stop", "line", "length"}
    assert not any(isinstance(value, str) and "yest" in value for value in stats)  # no text


async def test_a_newer_request_supersedes_an_older_one(client: LanguageClient):
    busy = long_prefix(f"supersede-{client.encoding}") + "The list is comp"
    busy_uri = open_doc(client, "supersede-busy.txt", busy)
    text = "def add(a, b):\n    ret"
    uri = open_doc(client, "supersede.py", text)
    older = send_inline(client, busy_uri, end_of(client, busy))
    newer = send_inline(client, uri, end_of(client, text))
    assert await older == []  # answered, empty, not stale
    items = await newer
    assert items and items[0].insert_text.startswith("ret")


async def test_an_edit_supersedes_work_in_flight(client: LanguageClient):
    text = long_prefix(f"edit-{client.encoding}") + "The meeting is on Mon"
    uri = open_doc(client, "edit.txt", text)
    before = send_inline(client, uri, end_of(client, text))
    type_text(client, uri, 2, end_of(client, text), "d")
    assert await before == []
    items = await inline(client, uri, end_of(client, text + "d"))
    assert items and items[0].insert_text.startswith("Mond")


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


async def test_invalid_params_get_an_error(client: LanguageClient):
    answer: Future = Future()
    client.protocol._request_futures["bad-params"] = answer  # raw JSON: the client would validate
    client.protocol._send_data(
        {
            "jsonrpc": "2.0",
            "id": "bad-params",
            "method": types.TEXT_DOCUMENT_INLINE_COMPLETION,
            "params": {"textDocument": {"uri": "file:///x"}, "position": {"line": "one", "character": 0}},
        }
    )
    with pytest.raises(JsonRpcInvalidParams, match="position"):
        await asyncio.wait_for(asyncio.wrap_future(answer), 30)


async def test_the_server_survives_garbage(client: LanguageClient):
    uri = open_doc(client, "survivor.txt", DRAFT)
    bad_change = {"textDocument": {"uri": uri}, "contentChanges": [{"text": 5}]}  # no version; text 5
    send_raw = client.protocol._send_data
    send_raw({"jsonrpc": "2.0", "method": types.TEXT_DOCUMENT_DID_CHANGE, "params": bad_change})
    client.protocol.writer.write(b"Content-Length: 9\r\n\r\n{not json")
    send_raw({"jsonrpc": "2.0", "method": "cpcLsp/unknownNotification", "params": [1]})
    # The unreadable change leaves the server's copy in doubt: nothing until the whole text comes.
    assert await inline(client, uri, end_of(client, DRAFT)) == []
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(3, uri), [types.TextDocumentContentChangeWholeDocument(DRAFT)]
        )
    )
    items = await inline(client, uri, end_of(client, DRAFT))
    assert items and "yesterday" in items[0].insert_text


async def test_unknown_documents_and_out_of_range_positions(client: LanguageClient):
    assert await inline(client, "file:///tmp/cpc-e2e/never-opened.txt", types.Position(0, 0)) == []
    uri = open_doc(client, "range.txt", DRAFT)
    items = await inline(client, uri, types.Position(0, 999))  # clamped to the end of the line
    assert items and items[0].range.end == end_of(client, DRAFT)
    assert await inline(client, uri, types.Position(42, 7)) == items  # past the end: end of document


async def test_settings_change_takes_effect(client: LanguageClient):
    text = "def add(a, b):\n    ret"
    uri = open_doc(client, "settings.py", text)
    long_answer = (await inline(client, uri, end_of(client, text)))[0].insert_text

    shown = len(client.messages)
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams({"cpcLsp": {"maxTokens": 1, "temperature": "hot"}})
    )
    await client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
    warnings = client.messages[shown:]
    assert any("temperature" in m.message and m.type == types.MessageType.Warning for m in warnings)
    short_answer = (await inline(client, uri, end_of(client, text)))[0].insert_text
    assert short_answer.startswith("ret") and len(short_answer) < len(long_answer)

    client.workspace_did_change_configuration(types.DidChangeConfigurationParams({"maxTokens": None}))
    assert (await inline(client, uri, end_of(client, text)))[0].insert_text == long_answer


async def test_model_loads_with_progress_and_reloads_on_context_change(client: LanguageClient):
    reports = [r for values in client.progress_reports.values() for r in values]
    assert any(isinstance(r, types.WorkDoneProgressBegin) for r in reports)
    assert any(isinstance(r, types.WorkDoneProgressEnd) for r in reports)

    seen = len(client.log_messages)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams({"contextTokens": 1024}))
    assert "1024 context tokens" in await wait_for_log(client, "loading", after=seen)
    uri = open_doc(client, "reload.txt", DRAFT)
    items = await inline(client, uri, end_of(client, DRAFT))  # waits for the reload
    assert items and "yesterday" in items[0].insert_text
    await wait_for_log(client, "loaded", after=seen)
