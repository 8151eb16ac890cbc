"""The field's most used peer on a FIM model: llama.vim's request to llama-server's `/infill`.

One place for it, so every benchmark that compares against llama.vim sends the same thing.
Read in llama.vim's own source (ggml-org/llama.vim, autoload/llama.vim at a1c8e6e, 2026-01-31,
`s:fim_ctx_local` and `llama#fim`):

- `input_prefix`: the `n_prefix` (256) lines before the cursor's line, joined by "\\n", plus "\\n";
- `prompt`: the cursor's line up to the cursor, raw (the partial word in it);
- `input_suffix`: the rest of the cursor's line, "\\n", the `n_suffix` (64) lines after it joined
  by "\\n", plus "\\n";
- `input_extra`: chunks of other text it has seen (its ring buffer; empty for a single file);
- `n_predict` 128, `stop` [], `n_indent` (the line's indentation), `top_k` 40, `top_p` 0.90,
  `samplers` ["top_k", "top_p", "infill"] (no temperature step: the server's chain then ends with
  its `dist` sampler, so it samples), `cache_prompt`, `t_max_prompt_ms` 500, `t_max_predict_ms`
  250 on a first request (1000 for its speculative follow-ups), `id_slot` 0.

What it shows as the user types (`LlamaVimSession`, read in the same file: `s:on_move`,
`s:fim_try_hint`, `s:fim_on_response`, `s:cache_insert`/`s:cache_get`, `s:fim_ctx_local`): every
answer is kept in an LRU cache (`max_cache_keys` 250) under its context; on each cursor move it
shows the cached answer for the exact context, else the rest of a cached answer from up to 128
bytes back that the typed bytes match (typing along a suggestion keeps showing its rest), and it
asks the server for the exact context unless that is cached. An answer that arrives while such a
rest is shown is cached, not shown. After showing a suggestion it asks ahead for the context where
the whole suggestion is accepted (`t_max_predict_ms` 1000).

It sends no `seed`, so the server's default applies: start llama-server with `--seed N` to make
the run repeatable without changing a byte of the request (`SEED_ARGS`). When it renders, it
drops a one-line suggestion that only retypes the next line (`render_line`).

`InfillPeer.complete` is the simpler request bench.remote_vs_local times (text before the cursor as the
raw prompt, greedy, a line-break stop): the same endpoint and connection handling.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.llama_server import LlamaServer

N_PREFIX, N_SUFFIX, N_PREDICT = 256, 64, 128
MAX_CACHE_KEYS, LOOK_BACK, TRIMMED_PREFIXES = 250, 128, 3  # its answer cache, `s:fim_try_hint`, `llama#fim`
SEED_ARGS = ("--seed", "0")  # llama-server's default seed for requests that send none (llama.vim's)


@dataclass(frozen=True)
class LocalContext:
    """llama.vim's local context of a cursor (`s:fim_ctx_local`, no previous completion)."""

    prefix: str  # input_prefix
    middle: str  # prompt: the line up to the cursor
    suffix: str  # input_suffix
    indent: int  # n_indent
    line_suffix: str  # the rest of the cursor's line
    line: str = ""  # the cursor's line as it is (its text up to the cursor: line[:column])
    column: int = 0  # the cursor's column in it (code points)


def local_context(text: str, cursor: int) -> LocalContext:
    """What llama.vim sends for the cursor at `cursor` (a code-point offset) of a buffer `text`."""
    line_start = text.rfind("\n", 0, cursor) + 1
    line_end = text.find("\n", cursor)
    line_end = len(text) if line_end < 0 else line_end
    line = text[line_start:line_end]
    before = text[:line_start].split("\n")[:-1][-N_PREFIX:]  # a buffer's lines, as getline() gives them
    body = text[line_end + 1 :]
    after = (body[:-1] if body.endswith("\n") else body).split("\n")[:N_SUFFIX] if line_end < len(text) and body else []
    middle, line_suffix = text[line_start:cursor], text[cursor:line_end]
    indent = 0
    if re.fullmatch(r"\s*", line):  # a blank line: everything from its start
        middle = line_suffix = ""
    else:
        indent = len(line) - len(line.lstrip(" \t"))
    return LocalContext(
        prefix="\n".join(before) + "\n", middle=middle, suffix=line_suffix + "\n" + "\n".join(after) + "\n",
        indent=indent, line_suffix=line_suffix, line=line, column=cursor - line_start,
    )  # fmt: skip


def llama_vim_request(
    ctx: LocalContext, id_slot: int = 0, first: bool = True, indent: int | None = None
) -> dict[str, Any]:
    """The JSON body llama.vim posts to /infill for that context (`first`: not a request ahead
    for an accepted suggestion, which gets more time and the last request's `indent`)."""
    return {
        "id_slot": id_slot, "input_prefix": ctx.prefix, "input_suffix": ctx.suffix, "input_extra": [],
        "prompt": ctx.middle, "n_predict": N_PREDICT, "stop": [], "n_indent": ctx.indent if indent is None else indent,
        "top_k": 40,
        "top_p": 0.90, "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
        "t_max_prompt_ms": 500, "t_max_predict_ms": 250 if first else 1000,
        "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms", "timings/predicted_n",
                            "timings/predicted_ms", "truncated", "tokens_cached"],
    }  # fmt: skip


def completion_request(text: str, cursor: int, id_slot: int = 0) -> dict[str, Any]:
    """llama.vim's request for a model with no FIM tokens, on `/completion`: the same lines before
    the cursor (`N_PREFIX` lines and the cursor's line up to the cursor) as the raw prompt, the
    same budget and sampling without the infill sampler; there is no place for the text after."""
    line_start = text.rfind("\n", 0, cursor) + 1
    before = text[:line_start].split("\n")[:-1][-N_PREFIX:]
    body = llama_vim_request(local_context(text, cursor), id_slot)
    for key in ("input_prefix", "input_suffix", "input_extra", "n_indent"):
        body.pop(key)
    prefix = "\n".join(before) + "\n" if before else ""
    return {**body, "prompt": prefix + text[line_start:cursor], "samplers": ["top_k", "top_p"]}


def render_line(ctx: LocalContext, content: str, next_line: str | None) -> str:
    """The one line llama.vim would show (and Tab would insert) after the cursor, "" for none:
    its first line, dropped when it is empty, only retypes the rest of the line, or makes the
    cursor's line equal the next non-blank line."""
    first = content.split("\n")[0]
    if first == "" or first == ctx.line_suffix or (next_line is not None and ctx.middle + first == next_line):
        return ""
    return "" if re.fullmatch(r"\s*", first + ctx.line_suffix) else first


def render(ctx: LocalContext, content: str, text: str, cursor: int, from_cursor: bool = False) -> str:
    """All that llama.vim shows after the cursor for `content` (`s:fim_render`), lines joined by
    "\n", "" for nothing: its first line at the cursor, the others as virtual lines below. Its
    rules, in its order: trailing empty lines go; on a line of only whitespace, as much leading
    whitespace of the suggestion as the line has is taken as that line (the request sent it from
    the line's start; `from_cursor`: the content continues at the cursor, as /completion's does,
    so nothing is trimmed); then it is dropped when it is empty, when its first line is empty and
    the next lines repeat the buffer's, when it only retypes the rest of the line, or when the
    cursor's line with it equals the next non-blank line (and the lines after it repeat too)."""
    lines = content.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return ""
    line_cur = ctx.line
    if re.fullmatch(r"\s*", ctx.line) and not from_cursor:
        lead = min(len(lines[0]) - len(lines[0].lstrip()), len(ctx.line))
        line_cur, lines[0] = lines[0][:lead], lines[0][lead:]
    prefix, suffix = line_cur[: ctx.column], line_cur[ctx.column :]
    line_end = text.find("\n", cursor)
    below = [] if line_end < 0 else text[line_end + 1 :].split("\n")  # the buffer's lines after the cursor's
    if len(lines) == 1 and lines[0] == "":
        return ""
    if len(lines) > 1 and lines[0] == "" and lines[1:] == below[: len(lines) - 1]:
        return ""
    if len(lines) == 1 and lines[0] == suffix:
        return ""
    at = next((i for i, line in enumerate(below) if line.strip()), None)  # the next non-blank line
    if at is not None and prefix + lines[0] == below[at]:
        after = below[at + 1 :]
        if len(lines) == 1:
            return ""
        if len(lines) == 2 and after[:1] and after[0][: len(lines[1])] == lines[1]:
            return ""
        if len(lines) > 2 and lines[1:] == after[: len(lines) - 1]:
            return ""
    shown = "\n".join(lines)
    return "" if re.fullmatch(r"\s*", shown + ctx.line_suffix) else shown


def next_nonblank_line(text: str, cursor: int) -> str | None:
    """The first non-blank line after the cursor's line (llama.vim compares against it)."""
    line_end = text.find("\n", cursor)
    if line_end < 0:
        return None
    return next((line for line in text[line_end + 1 :].split("\n") if line.strip()), None)


class InfillPeer:
    """A kept-alive connection to llama-server for llama.vim's requests (llama.vim opens one per
    request: this is kinder to the peer). `slot` pins its requests to one slot, so beside our
    engine on the same server it never evicts ours. A model with no FIM tokens has no /infill:
    `complete` then sends the same raw text to /completion (what such a request amounts to)."""

    def __init__(self, server: LlamaServer, max_tokens: int = N_PREDICT, slot: int = 0) -> None:
        self.server, self.max_tokens, self.slot = server, max_tokens, slot
        self.connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        self.endpoint = "/infill"
        status, body = self._post({"input_prefix": "", "input_suffix": "", "prompt": "x", "n_predict": 1})
        if status != 200:  # no FIM tokens: the same raw text to /completion
            self.endpoint = "/completion"
            self.refused = (
                str(body.get("error", {}).get("message", body))[:120] if isinstance(body, dict) else str(body)
            )

    def _post(self, body: dict[str, Any]) -> tuple[int, Any]:
        for attempt in (1, 2):  # the server closes the connection after an error answer: reconnect once
            try:
                self.connection.request("POST", self.endpoint, json.dumps(body), {"Content-Type": "application/json"})
                answer = self.connection.getresponse()
                raw = answer.read()
                break
            except (OSError, http.client.HTTPException):
                self.connection.close()
                if attempt == 2:
                    raise
        try:
            return answer.status, json.loads(raw)
        except ValueError:
            return answer.status, raw.decode(errors="replace")

    def complete(self, text: str) -> tuple[float, str]:
        """(ms, the text it suggests) for the cursor at the end of `text`: the text before the
        cursor as the raw prompt, greedy, one line (bench.remote_vs_local's latency peer)."""
        common = {"n_predict": self.max_tokens, "cache_prompt": True, "id_slot": self.slot, "stream": False,
                  "temperature": 0.0, "stop": ["\n"]}  # fmt: skip
        if self.endpoint == "/infill":
            line_start = text.rfind("\n") + 1
            body = {
                "input_prefix": text[:line_start],
                "prompt": text[line_start:],
                "input_suffix": "\n",
                "input_extra": [],
            }
        else:
            body = {"prompt": text}
        started = time.perf_counter()
        status, answer = self._post({**body, **common})
        ms = (time.perf_counter() - started) * 1000
        return ms, answer.get("content", "") if status == 200 and isinstance(answer, dict) else ""

    def llama_vim(self, text: str, cursor: int, greedy: bool = False) -> tuple[float, str, dict[str, Any]]:
        """(ms, the line llama.vim would insert after the cursor, the server's answer) for the
        cursor at `cursor` of `text`, sent exactly as llama.vim sends it; `greedy` swaps only its
        sampling for the most probable token (`top_k` 1), to tell sampling apart from the layout."""
        ms, ctx, answer = self._llama_vim_answer(text, cursor, greedy)
        if "content" not in answer:
            return ms, "", answer
        return ms, render_line(ctx, answer["content"], next_nonblank_line(text, cursor)), answer

    def llama_vim_shown(self, text: str, cursor: int) -> tuple[float, str, dict[str, Any]]:
        """(ms, all that llama.vim shows after the cursor: `render`, lines joined, the server's
        answer) for the same request as `llama_vim`. On a model with no FIM tokens (`/completion`)
        the same request with the text before the cursor as the raw prompt (`completion_request`)."""
        ms, ctx, answer = self._llama_vim_answer(text, cursor)
        if "content" not in answer:
            return ms, "", answer
        return ms, render(ctx, answer["content"], text, cursor, from_cursor=self.endpoint != "/infill"), answer

    def session(self) -> LlamaVimSession:
        """A buffer's llama.vim: what it shows keystroke by keystroke, with its answer cache."""
        return LlamaVimSession(self._content, from_cursor=self.endpoint != "/infill")

    def _content(self, text: str, cursor: int, first: bool, indent: int | None) -> tuple[float, str | None]:
        ms, _, answer = self._llama_vim_answer(text, cursor, first=first, indent=indent)
        content = answer.get("content")
        return ms, content if isinstance(content, str) else None

    def _llama_vim_answer(
        self, text: str, cursor: int, greedy: bool = False, first: bool = True, indent: int | None = None
    ) -> tuple[float, LocalContext, dict[str, Any]]:
        ctx = local_context(text, cursor)
        if self.endpoint == "/infill":
            body = llama_vim_request(ctx, self.slot, first, indent)
        else:
            body = completion_request(text, cursor, self.slot)
            body["t_max_predict_ms"] = 250 if first else 1000
        if greedy:
            body = {**body, "top_k": 1}
        started = time.perf_counter()
        status, answer = self._post(body)
        ms = (time.perf_counter() - started) * 1000
        if status != 200 or not isinstance(answer, dict):
            return ms, ctx, {"status": status, "error": str(answer)[:200]}
        return ms, ctx, answer

    def close(self) -> None:
        self.connection.close()


def context_key(prefix_middle: str, suffix: str) -> bytes:
    """What llama.vim hashes a context by (`prefix . middle . 'Î' . suffix`), as bytes: Vim's
    strings are bytes, and its look-back cuts them byte by byte."""
    return prefix_middle.encode() + "Î".encode() + suffix.encode()


def cache_keys(ctx: LocalContext) -> list[bytes]:
    """The keys an answer for `ctx` is cached under (`llama#fim`'s hashes): its context, and the
    same with its first 1-3 prefix lines dropped (for a view scrolled down since)."""
    keys = [context_key(ctx.prefix + ctx.middle, ctx.suffix)]
    prefix = ctx.prefix
    for _ in range(TRIMMED_PREFIXES):
        prefix = re.sub(r"^[^\n]*\n", "", prefix, count=1)
        if not prefix:
            break
        keys.append(context_key(prefix + ctx.middle, ctx.suffix))
    return keys


def accepted_key(text: str, cursor: int, ctx: LocalContext, shown: str) -> bytes:
    """The context once all of `shown` (at `cursor`) is accepted, as llama.vim builds it for the
    request it sends ahead (`s:fim_ctx_local` with `prev`: the shown lines, the rest of the
    cursor's line after the last)."""
    prev = (shown + ctx.line_suffix).split("\n")
    line_start = text.rfind("\n", 0, cursor) + 1
    before_lines = text[:line_start].split("\n")[:-1]
    line = ctx.line
    if len(prev) == 1:
        lines, middle = before_lines[-N_PREFIX:], line + prev[0]
    else:
        keep = N_PREFIX - (len(prev) - 1)
        lines = (before_lines[-keep:] if keep > 0 else []) + [line + prev[0], *prev[1:-1]]
        middle = prev[-1]
    below = ctx.suffix[len(ctx.line_suffix) :]  # "\n", the lines after the cursor's, "\n"
    return context_key("\n".join(lines) + "\n" + middle, below)


class AnswerCache:
    """llama.vim's `g:cache_data` with its LRU order: a read makes a key the most recent; an insert
    into a full cache first drops the least recent key (even when the key is already there)."""

    def __init__(self, max_keys: int = MAX_CACHE_KEYS) -> None:
        self.max_keys = max_keys
        self._data: OrderedDict[bytes, str] = OrderedDict()

    def get(self, key: bytes) -> str | None:
        if key not in self._data:
            return None
        self._data.move_to_end(key)
        return self._data[key]

    def has(self, key: bytes) -> bool:
        return key in self._data

    def insert(self, key: bytes, content: str) -> None:
        if len(self._data) > self.max_keys - 1:
            self._data.popitem(last=False)
        self._data[key] = content
        self._data.move_to_end(key)


class LlamaVimSession:
    """What llama.vim shows in one buffer as the user types, keystroke by keystroke (module
    docstring): `shown(text, cursor)` is one cursor move (`s:on_move`, then the automatic
    `llama#fim`), with the user waiting for its answer. `ask(text, cursor, first, indent)` is the
    server: (ms, the answer's content, None for none). The request llama.vim sends ahead after
    showing a suggestion is asked when the user reaches that context (it is the same request;
    until then it changes nothing shown)."""

    def __init__(
        self, ask: Callable[[str, int, bool, int | None], tuple[float, str | None]], from_cursor: bool = False
    ) -> None:
        self.ask, self.from_cursor = ask, from_cursor
        self.cache = AnswerCache()
        self.ahead: dict[bytes, int] = {}  # contexts asked ahead for -> the indent sent with them
        self.requests = 0

    def shown(self, text: str, cursor: int) -> tuple[float, str]:
        ctx = local_context(text, cursor)
        keys = cache_keys(ctx)
        ms = 0.0
        if not self.cache.has(keys[0]) and keys[0] in self.ahead:  # its answer would be cached by now
            ms += self._ask(text, cursor, ctx, False, self.ahead.pop(keys[0]))
        content = self.hint(ctx)
        shown = None if content is None else render(ctx, content, text, cursor, self.from_cursor)
        if not any(self.cache.get(key) is not None for key in keys):
            ms += self._ask(text, cursor, ctx, True, None)
            if not (shown or "").strip():  # nothing acceptable shown: the answer is shown on arrival
                content = self.cache.get(keys[0])
                shown = None if content is None else render(ctx, content, text, cursor, self.from_cursor)
        if shown and shown.strip():
            self.ahead.setdefault(accepted_key(text, cursor, ctx, shown), ctx.indent)
        return ms, shown or ""

    def _ask(self, text: str, cursor: int, ctx: LocalContext, first: bool, indent: int | None) -> float:
        ms, content = self.ask(text, cursor, first, indent)
        self.requests += 1
        if content is not None:
            for key in cache_keys(ctx):
                self.cache.insert(key, content)
        return ms

    def hint(self, ctx: LocalContext) -> str | None:
        """`s:fim_try_hint`'s choice: the cached answer for the exact context, else the rest of a
        cached answer from up to LOOK_BACK bytes back whose start the bytes typed since match
        (its loop as written: the nearest one found, then replaced by any one further back that
        is longer than the best replacement so far)."""
        pm = (ctx.prefix + ctx.middle).encode()
        exact = self.cache.get(pm + "Î".encode() + ctx.suffix.encode())
        if exact is not None:
            return exact
        raw: bytes | None = None
        best = 0
        for i in range(min(LOOK_BACK, len(pm) - 1)):
            removed = pm[len(pm) - (i + 1) :]
            cached = self.cache.get(pm[: len(pm) - (i + 1)] + "Î".encode() + ctx.suffix.encode())
            if not cached:
                continue
            answer = cached.encode()
            if answer[: i + 1] != removed:
                continue
            rest = answer[i + 1 :]
            if rest:
                if raw is None:
                    raw = rest
                elif len(rest) > best:
                    best, raw = len(rest), rest
        return None if raw is None else raw.decode(errors="replace")
