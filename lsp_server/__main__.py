"""Command line: the server over stdio or TCP, and `complete` to see one suggestion.

    cpc-lsp                                  # LSP over stdio (what editors start)
    cpc-lsp --tcp 2087                       # LSP on 127.0.0.1:2087
    python -m lsp_server complete --text "Thanks for sending over the draft yest"

Every setting is also an option (``--max-tokens 4``, ``--threads 1``), checked by the same
schema as a client's settings (`lsp_server.schema`); for the server they are the defaults a
client's settings patch and ``null`` restores.

An LSP connection has no authentication: whoever reaches the port can read the documents sent
over it and run the model. So `--host` must be a loopback address unless `UNSAFE_HOST_FLAG` is
given as well.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import socket
import sys
from dataclasses import asdict

from lsp_server.schema import parse_cli
from lsp_server.settings import SPECS, Settings, from_command_line

LOG_LEVELS = ("debug", "info", "warning", "error")
UNSAFE_HOST_FLAG = "--unsafe-listen-on-network"
COMMAND_LINE_URI = "untitled:cpc-lsp-complete"  # the one document `complete` opens (no file, no folder)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: given before or after `complete`, an option is not reset by the other parser;
    # and an option that is absent stays absent, so the setting keeps its default.
    common.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS, help="stderr log level")
    options = common.add_argument_group("settings (see the README's settings table)")
    for spec in SPECS.values():
        help_text = f"{spec.kind.allowed().replace('`', '')}; default {json.dumps(spec.kind.to_json(spec.default))}"
        options.add_argument(
            spec.option, dest=f"setting:{spec.key}", metavar="VALUE", default=argparse.SUPPRESS,
            help=help_text.replace("%", "%%"),
        )  # fmt: skip

    parser = argparse.ArgumentParser(
        prog="cpc-lsp",
        description="Language server that finishes the word you are typing, from a local GGUF model.",
        parents=[common],
    )
    parser.add_argument("--tcp", type=_port, metavar="PORT", help="listen on TCP instead of stdio")
    parser.add_argument(
        "--host", default="127.0.0.1",
        help=f"TCP address to bind (default 127.0.0.1); a non-loopback address needs {UNSAFE_HOST_FLAG}",
    )  # fmt: skip
    parser.add_argument(
        UNSAFE_HOST_FLAG, action="store_true",
        help="allow --host to be an address other machines can reach. UNSAFE: LSP has no authentication, "
        "so anyone who can reach the port can read the documents sent to it and run the model",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command")
    complete = commands.add_parser(
        "complete",
        parents=[common],
        help="print one suggestion with the cursor at the end of --text",
        description="Run one completion through the server's pipeline and engine and print it: what an "
        "editor shows with this text as its one open document.",
    )
    complete.add_argument("--text", required=True, help="text before the cursor")
    complete.add_argument("--suffix", default="", help="text after the cursor")
    complete.add_argument(
        "--language",
        default="plaintext",
        help="the text's LSP languageId (python, c, markdown...): with no --model it picks the model, "
        "code languages going to the code model and prose to the prose model (default: plaintext)",
    )
    complete.add_argument("--json", action="store_true", help="print details as JSON")
    return parser


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return port


def _settings(args: argparse.Namespace) -> tuple[Settings, list[str]]:
    """The settings options given, checked by the schema like a client's settings."""
    given = {key.removeprefix("setting:"): value for key, value in vars(args).items() if key.startswith("setting:")}
    return from_command_line({key: parse_cli(value, SPECS[key]) for key, value in given.items()})


def loopback_problem(host: str) -> str | None:
    """None when every address `host` names is a loopback address; else why it is refused."""
    try:
        addresses = {ipaddress.ip_address(host.split("%")[0])}
    except ValueError:  # a name: what does it resolve to?
        try:
            infos = socket.getaddrinfo(host or None, 0, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE)
        except OSError as exc:
            return f"cannot resolve --host {host!r}: {exc}"
        addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    outside = sorted(str(a) for a in addresses if not a.is_loopback)
    if not outside:
        return None
    return (
        f"--host {host!r} is reachable from other machines ({', '.join(outside)}). An LSP connection has no "
        "authentication: anyone who can reach the port could read the documents sent to it and run the "
        f"model. Use 127.0.0.1 (and an SSH tunnel for a remote editor), or pass {UNSAFE_HOST_FLAG} "
        "if you accept that risk"
    )


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def complete(args: argparse.Namespace, settings: Settings) -> int:
    """One suggestion through the server's own pipeline (lsp_server.pipeline: split, block,
    document words, request, gate, shaping, alternatives) and scheduler, the text being the one
    open document: what the editor would show at the end of --text."""
    from lsp_server.pipeline import Now, Pipeline
    from lsp_server.scheduler import Scheduler

    text, cursor = args.text + args.suffix, len(args.text)
    pipeline = Pipeline.fresh(settings)
    pipeline.documents.open(COMMAND_LINE_URI, text, None, args.language)
    doc = pipeline.documents.get(COMMAND_LINE_URI)
    assert doc is not None  # just opened
    step = pipeline.begin(COMMAND_LINE_URI, doc, cursor, settings)
    assert not isinstance(step, Now)  # nothing was shown before: the engine answers
    parts = step.snapshot.parts
    scheduler = Scheduler()
    try:
        loaded = scheduler.load(settings.engine_config()).result()
        if not loaded.ok:
            print(f"cpc-lsp: {loaded.error}", file=sys.stderr)
            return 2
        answer = scheduler.submit(step.request).future.result()
        model = scheduler.model_id  # after the answer: the routed default loads the model it needs
    finally:
        scheduler.close()
    if answer.completion is None:
        print(f"cpc-lsp: no completion ({answer.detail or answer.reason})", file=sys.stderr)
        return 1
    found = pipeline.finish(step, answer.completion, answer.model_id)
    insert_text = found[0].insert_text if found else parts.word
    if args.json:
        print(json.dumps({
            "model": model,
            "prompt": parts.prompt,
            "required": parts.required,
            "suffix": parts.suffix,
            "insertText": insert_text,
            "added": insert_text[len(parts.word):],
            "alternatives": [f.insert_text for f in found[1:]],
            "completion": answer.completion.text,
            "stopReason": answer.completion.stop_reason,
            "requiredSatisfied": answer.completion.required_satisfied,
            "stats": asdict(answer.completion.stats),
        }, ensure_ascii=False, indent=2))  # fmt: skip
    else:
        print(args.text[: parts.word_start] + insert_text + args.suffix)
    return 0


def serve(args: argparse.Namespace, settings: Settings) -> int:
    from lsp_server.server import build_server

    server = build_server(settings)
    try:
        if args.tcp is not None:
            server.start_tcp(args.host, args.tcp)
        else:
            server.start_io()
    except OSError as exc:  # the port is taken, or the address is not this machine's
        if args.tcp is None or exc.errno is None:
            raise
        logging.getLogger("lsp_server").error(
            "cannot listen on %s port %d: %s; choose another --tcp port (0 picks a free one) or --host",
            args.host, args.tcp, exc.strerror or exc,
        )  # fmt: skip
        return 1
    finally:
        server.scheduler.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    settings, problems = _settings(args)
    if problems:
        parser.error("; ".join(problems))  # exits 2
    if args.command == "complete":
        _setup_logging(getattr(args, "log_level", "warning"))
        return complete(args, settings)
    if args.tcp is not None and not args.unsafe_listen_on_network and (problem := loopback_problem(args.host)):
        parser.error(problem)
    _setup_logging(getattr(args, "log_level", "info"))
    if args.tcp is not None and args.unsafe_listen_on_network and loopback_problem(args.host):
        logging.getLogger("lsp_server").warning(
            "listening on %s with %s: anyone who can reach the port can read your documents",
            args.host,
            UNSAFE_HOST_FLAG,
        )
    return serve(args, settings)


if __name__ == "__main__":
    sys.exit(main())
