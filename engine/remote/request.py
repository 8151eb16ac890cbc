"""What one `/completion` request to llama-server says: its body, and the grammar literal that
forces the bytes still required."""

from __future__ import annotations

GENERATION_SLACK = 2  # tokens a request may generate beyond what the call wants
FINAL_FIELDS = ("id_slot", "stop", "tokens_predicted", "timings")  # what the engine reads of a final answer


def request_body(tokens: tuple[int, ...], predict: int, slot: int, warm: bool, n_probs: int, line_stop: bool) -> dict:
    """A request for `tokens` in `slot` (-1: the server's pick; `warm`: reuse its cache),
    generating `predict` tokens (0: a prefill, answered at once), listing `n_probs` tokens per
    event, stopped at a line break when `line_stop`."""
    body = {
        "prompt": list(tokens),
        "n_predict": predict,
        "cache_prompt": warm,
        "id_slot": slot,
        "temperature": 0.0,
        "samplers": ["temperature"],
        "return_tokens": True,
        # The final answer, trimmed to what is read of it (which slot, that it stopped, and a
        # prefill's timings). Untrimmed it restates the whole prompt's text, the generated
        # text and tokens and every generation setting: kilobytes per request, for nothing.
        "response_fields": list(FINAL_FIELDS),
    }
    if predict:
        body["n_probs"] = n_probs
        body["stream"] = True
        # What the server reused comes in the stream's first progress event (a few hundred
        # bytes per request) rather than timings on every token event (as many per token).
        body["return_progress"] = True
        if line_stop:
            body["stop"] = ["\n", "\r"]
    return body


def gbnf_literal(text: bytes) -> str | None:
    """`text` as a GBNF string literal; None when it is not valid UTF-8 (a grammar matches
    characters, so a remainder that starts inside a character cannot be written)."""
    try:
        chars = text.decode("utf-8")
    except UnicodeDecodeError:
        return None
    out = []
    for ch in chars:
        code = ord(ch)
        if ch in '"\\' or code < 0x20 or code >= 0x7F:
            out.append(f"\\U{code:08X}" if code > 0xFFFF else f"\\u{code:04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class Inexpressible(Exception):
    """The remaining bytes start inside a UTF-8 character: no grammar can force them."""
