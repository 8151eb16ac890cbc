"""Command line: the server over stdio or TCP, and `complete` to see one suggestion.

    cpc-lsp                                  # LSP over stdio (what editors start)
    cpc-lsp --tcp 2087                       # LSP on 127.0.0.1:2087
    python -m lsp_server complete --text "Thanks for sending over the draft yest"
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path

from lsp_server.settings import Settings

LOG_LEVELS = ("debug", "info", "warning", "error")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: given before or after `complete`, an option is not reset by the other parser.
    common.add_argument(
        "--model", type=Path, default=argparse.SUPPRESS, help="GGUF model file (default: the model from PyPI)"
    )
    common.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS, help="stderr log level")

    parser = argparse.ArgumentParser(
        prog="cpc-lsp",
        description="Language server that finishes the word you are typing, from a local GGUF model.",
        parents=[common],
    )
    parser.add_argument("--tcp", type=_port, metavar="PORT", help="listen on TCP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1", help="TCP address to bind (default 127.0.0.1)")
    commands = parser.add_subparsers(dest="command")
    complete = commands.add_parser(
        "complete",
        parents=[common],
        help="print one suggestion with the cursor at the end of --text",
        description="Run one completion through the server's split and engine path and print it.",
    )
    complete.add_argument("--text", required=True, help="text before the cursor")
    complete.add_argument("--suffix", default="", help="text after the cursor")
    complete.add_argument("--max-tokens", type=int, default=Settings.max_tokens)
    complete.add_argument("--context-tokens", type=int, default=Settings.context_tokens, help="model context size")
    complete.add_argument("--json", action="store_true", help="print details as JSON")
    return parser


def _port(value: str) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return port


def _model_setting(args: argparse.Namespace) -> str | None:
    model = getattr(args, "model", None)
    return None if model is None else str(model)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def complete(args: argparse.Namespace) -> int:
    """One suggestion through split → request → scheduler → engine → suggestion, like the server."""
    from lsp_server.scheduler import Scheduler
    from lsp_server.split import split
    from lsp_server.suggestion import request_for, suggestion_for

    settings = Settings(model=_model_setting(args), max_tokens=args.max_tokens, context_tokens=args.context_tokens)
    if settings.context_tokens < 128:
        print("cpc-lsp: --context-tokens must be at least 128", file=sys.stderr)
        return 2
    if not 1 <= settings.max_tokens <= settings.context_tokens // 2:
        print(f"cpc-lsp: --max-tokens must be from 1 to {settings.context_tokens // 2}", file=sys.stderr)
        return 2
    parts = split(args.text + args.suffix, len(args.text))
    scheduler = Scheduler()
    try:
        loaded = scheduler.load(settings.engine_config()).result()
        if not loaded.ok:
            print(f"cpc-lsp: {loaded.error}", file=sys.stderr)
            return 2
        answer = scheduler.submit(request_for(parts, settings)).future.result()
    finally:
        scheduler.close()
    if answer.completion is None:
        print(f"cpc-lsp: no completion ({answer.detail or answer.reason})", file=sys.stderr)
        return 1
    found = suggestion_for(
        parts, answer.completion, single_line=settings.single_line, naive=settings.method == "naive"
    )
    insert_text = found.insert_text if found else parts.word
    if args.json:
        print(json.dumps({
            "prompt": parts.prompt,
            "required": parts.required,
            "suffix": parts.suffix,
            "insertText": insert_text,
            "added": insert_text[len(parts.word):],
            "completion": answer.completion.text,
            "stopReason": answer.completion.stop_reason,
            "requiredSatisfied": answer.completion.required_satisfied,
            "stats": asdict(answer.completion.stats),
        }, ensure_ascii=False, indent=2))  # fmt: skip
    else:
        print(args.text[: parts.word_start] + insert_text + args.suffix)
    return 0


def serve(args: argparse.Namespace) -> int:
    from lsp_server.server import build_server

    server = build_server(Settings(model=_model_setting(args)))
    try:
        if args.tcp is not None:
            server.start_tcp(args.host, args.tcp)
        else:
            server.start_io()
    finally:
        server.scheduler.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "complete":
        _setup_logging(getattr(args, "log_level", "warning"))
        return complete(args)
    _setup_logging(getattr(args, "log_level", "info"))
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
