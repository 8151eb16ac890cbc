"""User settings: one typed, immutable value, and the validation that produces it.

Each setting is declared once, as a field of `Settings` (see `lsp_server.schema` for how that one
declaration also makes the command-line option, the VS Code manifest entry and the row of
docs/settings.md, and for how to add a setting).

Clients send settings as JSON under the section ``cpcLsp`` (in ``initializationOptions`` and
``workspace/didChangeConfiguration``). Updates are patches: a key that is absent keeps its value,
``null`` restores the default (for ``model``, so does ``""``: the model given on the command line,
else the one from PyPI), and an invalid value is reported and leaves the old value in place.
Unknown keys are ignored, since editors put their own keys in the same section (``trace.server``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from engine import CompletionRequest, EngineConfig, SamplingConfig, catalogue
from lsp_server import schema
from lsp_server.schema import (
    SECTION,
    Bool,
    Choice,
    Int,
    Invalid,
    Number,
    OptionalNumber,
    OptionalPath,
    Secret,
    Spec,
    Strings,
    Urls,
    setting,
    specs,
)  # fmt: skip

_SAMPLING, _REQUEST, _ENGINE = SamplingConfig(), CompletionRequest(""), EngineConfig()
API_KEY_ENV = "CPC_LSP_MODEL_SERVER_API_KEY"  # the key when `modelServerApiKey` is empty
METHODS = (
    ("exact", "Spell the typed word by its most probable token path (exact character-prefix conditioning)."),
    ("mask", "Constrain each step to tokens consistent with the typed word (per-step masking)."),
    ("naive", "Leave the partial word in the prompt with no constraint (what most tools do; for comparison)."),
)
MULTI_LINE = (
    ("off", "One line: each suggestion ends at the end of the line."),
    (
        "block",
        "One line, except after a line that opens a block (`:`, `{`, `(`, `[`, `=>` at its end) with nothing in it yet: then the block, up to its end. At the end of a line that the model ends there, the next line.",
    ),
    ("always", "Several lines wherever the model goes on, up to the end of the block the cursor is in."),
)
FIM_ORDERS = (
    (
        "psm",
        "Prefix, suffix, middle: what most FIM models are trained on (Qwen2.5-Coder, StarCoder2, CodeGemma); "
        "each new word decodes the text after the cursor again.",
    ),
    (
        "spm",
        "Suffix, prefix, middle (llama.cpp's suffix-first layout): for models trained on it; a new word decodes only itself.",
    ),
    (
        "psm-line",
        "Prefix, suffix, middle, with the cursor's line in the middle (as llama.cpp's /infill does): the PSM order, "
        "and a new word decodes only itself; a new line decodes the text after the cursor again. At the end of a "
        "finished line (after `;`, `{`, `:`...) the middle begins at the cursor, as in psm.",
    ),
)


@dataclass(frozen=True)
class Settings:
    """Every knob the server reads: its default, its kind and what it does (the schema)."""

    model: str | None = setting(
        None,
        OptionalPath(tuple(catalogue.CATALOGUE)),
        "The model: a name from the catalogue (the README's model table; `make model MODEL=NAME` "
        "installs one) or the path to a GGUF file. Empty: the server's default, which is the one "
        "given with `--model` on the server's command line if any, else the two installed with the "
        "server: code files go to qwen2.5-coder-0.5b, prose (plain text, Markdown, commit messages...) "
        "to gemma-3-270m. Changing it reloads the model.",
        scope="machine-overridable",
    )
    max_tokens: int = setting(
        _REQUEST.max_tokens,
        Int(1, 512),
        "Most tokens generated per suggestion beyond what was typed; at most half of `contextTokens`.",
    )
    temperature: float = setting(
        _SAMPLING.temperature,
        Number(0.0, 10.0),
        "Sampling temperature. 0 picks the most probable text (greedy, deterministic); above 0, "
        "coverings of the typed word are sampled in proportion to their probability.",
    )
    top_k: int = setting(
        _SAMPLING.top_k,
        Int(0, 1_000_000),
        "Sample only from the K most probable tokens (0: no limit). Used when temperature > 0.",
    )
    top_p: float = setting(
        _SAMPLING.top_p,
        Number(0.0, 1.0, open_low=True),
        "Nucleus sampling: sample from the smallest set of tokens whose probabilities add up to P. "
        "Used when temperature > 0.",
    )
    min_p: float = setting(
        _SAMPLING.min_p,
        Number(0.0, 1.0),
        "Drop tokens less probable than this fraction of the most probable one. Used when temperature > 0.",
    )
    repetition_penalty: float = setting(
        _SAMPLING.repetition_penalty,
        Number(0.0, 10.0, open_low=True),
        "Penalty for repeating any of the last 64 tokens (1: none).",
    )
    seed: int = setting(
        _SAMPLING.seed, Int(0, 2**32 - 1), "Random seed for sampling, so that suggestions are reproducible."
    )
    single_line: bool = setting(
        _SAMPLING.single_line,
        Bool(),
        'Kept for older configurations: `false` means `multiLine` "always"; `true` leaves it to `multiLine`.',
    )
    context_tokens: int = setting(
        _ENGINE.context_tokens,
        Int(128, 131_072),
        "Size of the model's context window in tokens, per document: no prompt and no KV goes beyond "
        "it, and text before the cursor beyond it is cut. llama.cpp allocates it rounded up to a "
        "multiple of 256 tokens (300 takes the memory of 512). Changing it reloads the model.",
    )
    stop: tuple[str, ...] = setting(
        (), Strings(16), "Stop sequences: a suggestion ends before the first one it would contain (OpenAI semantics)."
    )
    max_cover_decodes: int = setting(
        _REQUEST.max_cover_decodes,
        Int(0, 1024),
        "Most extra model steps spent finding the best spelling of the partly typed word; bounds "
        "the worst-case latency.",
    )
    method: str = setting(
        "exact",
        Choice(METHODS),
        'How the partly typed word is honoured. Keep "exact"; the others exist for comparison.',
    )
    threads: int = setting(
        0,
        Int(0, 256),
        "CPU threads the model runs on. 0: as many as the cores other processes leave free, chosen "
        "again during each request (llama.cpp's threads wait for each other after every step, so a "
        "thread on a busy core slows them all); a number: exactly that many threads, however busy "
        "the machine is. Changing it reloads the model.",
    )
    log_document_text: bool = setting(
        False, Bool(), "Debugging only: let the server's log contain the text of your documents."
    )
    fim_suffix_lines: int = setting(
        8,
        Int(0, 1_000),
        "Lines of text after the cursor (its own line first) put in the prompt of a model that has "
        "fill-in-the-middle tokens (Qwen2.5-Coder, StarCoder2, CodeGemma...); 0: none. Models "
        "without FIM tokens never see it.",
    )
    fim_suffix_tokens: int = setting(
        _REQUEST.suffix_tokens,
        Int(0, 4_096),
        "Most tokens of that text after the cursor that go in the prompt (its first ones). They are "
        'decoded again after each new line ("psm-line"), or after each new word ("psm"), so this bounds that cost.',
    )
    first_window_tokens: int = setting(
        256,
        Int(0, 65_536),
        "First contact: when more than twice this many of the prompt's tokens are not decoded yet (a "
        "long file just opened, the window moved), the suggestion comes from this many to 1.5x this "
        "many tokens before the cursor, without other files' text, while the whole prompt decodes "
        "behind it; a short file's first suggestion likewise waits for at most 300 ms of other files' "
        "text. The next suggestions use the whole prompt once it is decoded. Needs "
        "`prefetch` and a second prompt kept: `memoryBudgetMib` above 0 in-process, or a model server "
        "with two or more slots and no other client on it; 0: off.",
    )
    fim_order: str = setting(
        _REQUEST.fim_order,
        Choice(FIM_ORDERS),
        "The fill-in-the-middle layout: the order the model was trained on, and where the cursor's line goes.",
    )
    lexicon: bool = setting(
        False,
        Bool(),
        "Weigh the words of your open documents that begin with the typed word against the model's "
        "own word, each scored by the model (its tokens and the word ending there) plus a small prior.",
    )
    lexicon_prior: float = setting(
        _REQUEST.lexicon_prior,
        Number(0.0, 20.0),
        "Nats added to the score of a word found in the open documents (with `lexicon`).",
    )
    lexicon_decodes: int = setting(
        _REQUEST.lexicon_decodes,
        Int(0, 256),
        "Most extra model steps spent scoring document words per suggestion (with `lexicon`).",
    )
    memory_budget_mib: int = setting(
        _ENGINE.memory_budget_mib,
        Int(0, 65_536),
        "MiB of KV cache kept for other recently used documents, so coming back to one costs no cold "
        "decode (least recently used first out; a 2048-token context takes 36 MiB with the default "
        "model, counted at the size llama.cpp allocates: a multiple of 256 tokens; never more than half "
        "the memory available when the model loads, and at most 15 documents). The live document's "
        "KV comes on top. Changing it reloads the model.",
    )
    min_confidence: float | None = setting(
        None,
        OptionalNumber(0.0, 1.0, unset="the model's calibrated threshold"),
        "Quieter ghost text: show a suggestion only up to the last word whose calibrated probability "
        "of being exactly right (the text so far, given what you typed) is at least this; nothing "
        "when the first word is below. 0: show every suggestion whole. Empty (null): the model's own "
        "threshold, chosen on a tuning replay and checked on other files for each model the gate is "
        "calibrated for (docs/gate.md); a stricter one for other models.",
    )
    alternatives: int = setting(
        3,
        Int(0, 16),
        "Other ways to finish the typed word offered beside the suggestion (next/previous "
        "suggestion), most probable first; 0: none. Finding them costs at most `maxCoverDecodes` "
        "extra model steps, made after the suggestion is shown (while you pause; the next keystroke "
        "stops them) or when you ask for the next one, and none on a keystroke typed along a suggestion.",
    )
    prefetch: bool = setting(
        True,
        Bool(),
        "Decode an opened or edited document's prompt while the engine is idle; any request stops it "
        "and keeps what it decoded.",
    )
    model_server: str | None = setting(
        None,
        Urls(),
        "URL of a llama-server to run the model on (e.g. `http://gpu-box:8080`) instead of in this "
        "process; empty: in-process. Suggestions stay exact. The text before the cursor is sent to it: "
        "plain http:// to another machine crosses the network in clear (see the README's \"Use a shared "
        'server"). Several URLs (a list, or separated by commas), all running the same model: each '
        "document stays on one of them, and goes to the next while its own is down "
        '(docs/shared-server.md, "More than one server"). Changing it reconnects.',
        scope="machine-overridable",
    )
    model_server_api_key: str | None = setting(
        None,
        Secret(),
        "The key the model server was started with (`llama-server --api-key`), sent as "
        f"`Authorization: Bearer`; never logged. Empty: the environment variable `{API_KEY_ENV}`, else none.",
        scope="machine-overridable",
    )
    model_server_timeout_ms: int = setting(
        round(_ENGINE.model_server_timeout_s * 1000),
        Int(100, 600_000),
        "Time budget of one request to the model server in milliseconds; a slower answer gives no "
        "suggestion for that keystroke, and the status says so.",
    )
    model_server_ca_file: str | None = setting(
        None,
        OptionalPath(what="a PEM certificate file"),
        "For an https:// `modelServer`: a PEM file with the certificate of the CA that signed the "
        "server's certificate (a team's own CA); empty: the system's CAs. The certificate and the host "
        "name are always checked.",
        scope="machine-overridable",
    )
    multi_line: str = setting(
        "block",
        Choice(MULTI_LINE),
        "When a suggestion may span several lines. A multi-line suggestion ends where the block does "
        "(a line indented less), before a line that is already after the cursor, and before a bracket "
        "that the text after the cursor already closes; it leaves no bracket it opened unclosed.",
    )
    extra_context: bool = setting(
        True,
        Bool(),
        "Put the text of your other files in the prompt, before the current file (on by default: "
        "on held-out projects it lifted the first word at names other files define by 9 points on "
        "the code model, none on Gemma, about 1.4x a cold request; docs/context.md): the open documents, "
        "regions you edited lately, and the files this one imports (resolved under the workspace "
        "folders only; with no workspace folder, under the file's own folder; binary, large and "
        "git-ignored files are skipped). With `modelServer` that text is sent to the server too. "
        "Qwen2.5-Coder gets its repository layout (`<|file_sep|>`).",
    )
    extra_context_tokens: int = setting(
        1024,
        Int(0, 65_536),
        "Most prompt tokens the other files' text takes (with `extraContext`): the definition lines "
        "of the names this file calls and the prompt does not show, then whole chunks; at most half "
        "of `contextTokens`, and, until the file fills two thirds of the window, at most half of the "
        "current file's own tokens or 256, whichever is more (a cold request costs at most 1.5x; a "
        "short file's first answer waits for 300 ms of them at most, see `firstWindowTokens`). They are chosen again "
        "only at the start of a line, so typing inside a word still reuses the whole prompt.",
    )
    multi_line_tokens: int = setting(
        48,
        Int(1, 512),
        "Most tokens of a multi-line suggestion (instead of `maxTokens`); half of `contextTokens` at most is used.",
    )

    def engine_config(self) -> EngineConfig:
        """What loading the engine needs; a change here means a reload."""
        return EngineConfig(
            model_path=self.model_ref(),
            context_tokens=self.context_tokens,
            threads=self.threads or None,
            memory_budget_mib=self.memory_budget_mib,
            model_server=self.model_server,
            model_server_api_key=(self.model_server_api_key or os.environ.get(API_KEY_ENV, "").strip() or None)
            if self.model_server
            else None,
            model_server_timeout_s=self.model_server_timeout_ms / 1000
            if self.model_server
            else _ENGINE.model_server_timeout_s,
            model_server_ca_file=str(Path(self.model_server_ca_file).expanduser())
            if self.model_server and self.model_server_ca_file
            else None,
        )

    def model_ref(self) -> str | Path | None:
        """`model` for the engine: a catalogue name as it is (engine.model_files resolves it), a
        path expanded; None: the default."""
        if self.model is None or catalogue.by_name(self.model) is not None:
            return self.model
        return Path(self.model).expanduser()

    def line_mode(self) -> str:
        """`multiLine`, with the older `singleLine: false` meaning "always"."""
        return "always" if not self.single_line else self.multi_line

    def sampling(self) -> SamplingConfig:
        """The sampler's settings, taken by name (a new sampling setting is declared once, above)."""
        return SamplingConfig(**{name: getattr(self, name) for name in _SAMPLING_SETTINGS})


SPECS: dict[str, Spec] = {spec.key: spec for spec in specs(Settings)}  # JSON key -> setting
_SAMPLING_SETTINGS = tuple(f.name for f in fields(SamplingConfig) if f.name in {s.name for s in SPECS.values()})


def section_of(raw: Any) -> Mapping[str, Any] | None:
    """Accept ``{"cpcLsp": {...}}`` as well as the bare ``{...}``; None when neither."""
    if not isinstance(raw, Mapping):
        return None
    inner = raw.get(SECTION, raw)
    return inner if isinstance(inner, Mapping) else None


def apply(current: Settings, raw: Any, defaults: Settings = Settings()) -> tuple[Settings, list[str]]:
    """Patch `current` with the client's JSON; returns the new settings and one problem per bad key.

    `defaults` is what ``null`` restores (the server's command line may have set the model).
    """
    section = section_of(raw)
    if section is None:
        if raw is None:
            return current, []
        return current, [f"{SECTION} settings must be a JSON object; settings unchanged"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in section.items():
        spec = SPECS.get(key)
        if spec is None:
            continue
        try:
            checked = None if value is None else spec.check(value)
        except Invalid as exc:
            kept = "the previous value" if isinstance(spec.kind, Secret) else _show(getattr(current, spec.name))
            problems.append(f"{SECTION}.{key}: {exc}; keeping {kept}")
            continue
        # null (or an empty model path) restores the default
        changes[spec.name] = getattr(defaults, spec.name) if checked is None else checked
    updated = replace(current, **changes)
    if (problem := _budget_problem(updated)) is not None:
        problems.append(f"{SECTION}.{problem}; keeping {current.max_tokens} and {current.context_tokens}")
        updated = replace(updated, max_tokens=current.max_tokens, context_tokens=current.context_tokens)
    return updated, problems


def from_command_line(values: Mapping[str, Any]) -> tuple[Settings, list[str]]:
    """Settings from command-line options (JSON key -> the value as a client would send it),
    checked exactly like a client's; one problem per bad option, named as the option."""
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in values.items():
        spec = SPECS[key]
        try:
            changes[spec.name] = spec.check(value)
        except Invalid as exc:
            problems.append(f"{spec.option}: {exc}")
    settings = replace(Settings(), **changes)
    if not problems and _budget_problem(settings) is not None:
        problems.append(f"--max-tokens must be at most half of --context-tokens ({settings.context_tokens})")
    return settings, problems


def _budget_problem(settings: Settings) -> str | None:
    """The one rule across settings: the generated tokens may use at most half of the context,
    the rest is for the prompt."""
    if 2 * settings.max_tokens > settings.context_tokens:
        return f"maxTokens must be at most half of contextTokens ({settings.context_tokens})"
    return None


def _show(value: Any) -> str:
    if value is None:
        return "the default"
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def main(argv: list[str] | None = None) -> int:
    """`python -m lsp_server.settings --write | --check`: the VS Code manifest's server keys and the
    table of docs/settings.md, written from (or checked against) `Settings`."""
    args = sys.argv[1:] if argv is None else argv
    if args not in (["--write"], ["--check"]):
        print("usage: python -m lsp_server.settings --write | --check", file=sys.stderr)
        return 2
    wanted = {
        schema.MANIFEST: schema.dump_manifest(
            schema.updated_manifest(json.loads(schema.MANIFEST.read_text(encoding="utf-8")), Settings)
        ),
        schema.SETTINGS_PAGE: schema.updated_settings_page(schema.SETTINGS_PAGE.read_text(encoding="utf-8"), Settings),
    }
    stale = [path for path, text in wanted.items() if path.read_text(encoding="utf-8") != text]
    if args == ["--write"]:
        for path in stale:
            path.write_text(wanted[path], encoding="utf-8")
            print(f"wrote {path.relative_to(schema.ROOT)}")
        return 0
    for path in stale:
        print(
            f"{path.relative_to(schema.ROOT)} disagrees with the settings schema; run python -m lsp_server.settings --write"
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
