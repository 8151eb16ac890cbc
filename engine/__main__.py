"""`python -m engine --prompt TEXT --require TEXT`: one completion from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from engine.types import CompletionRequest, EngineConfig, ModelLoadError, SamplingConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    parser.add_argument("--prompt", required=True, help="text before the word boundary")
    parser.add_argument("--require", default="", help="bytes the completion must begin with")
    parser.add_argument(
        "--model", default=None, help="a catalogue name (engine.catalogue) or a GGUF file (default: Gemma 3 270M)"
    )
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (default: the cores other processes leave free, see engine.local.cores)",
    )
    parser.add_argument("--multi-line", action="store_true", help="do not stop at the first line break")
    parser.add_argument("--per-step", action="store_true", help="per-step masking instead of the covering search")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    from engine.engine import Engine  # loads llama.cpp only when actually running

    try:
        engine = Engine.load(EngineConfig(model_path=args.model, threads=args.threads))
    except ModelLoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    sampling = SamplingConfig(temperature=args.temperature, seed=args.seed, single_line=not args.multi_line)
    request = CompletionRequest(
        prompt=args.prompt,
        required=args.require,
        max_tokens=args.max_tokens,
        sampling=sampling,
        exact=not args.per_step,
    )
    result = engine.complete(request)
    if args.json:
        print(
            json.dumps(
                {
                    "model": engine.model_id,
                    "text": result.text,
                    "tokens": result.stats.generated_tokens,
                    "ms": round(result.stats.ms, 2),
                    "stop_reason": result.stop_reason,
                    "required_satisfied": result.required_satisfied,
                    "stats": result.stats.__dict__,
                },
                ensure_ascii=False,
            )
        )
    else:
        print(args.prompt + result.text)
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
