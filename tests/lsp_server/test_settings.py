"""Settings: both JSON shapes, patch semantics, and invalid values leaving the old value."""

from pathlib import Path

from lsp_server.settings import Settings, apply


def test_defaults_match_the_issue():
    s = Settings()
    assert (s.max_tokens, s.temperature, s.single_line) == (16, 0.0, True)
    assert (s.context_tokens, s.max_cover_decodes) == (2048, 8)
    assert s.model is None and s.stop == ()


def test_wrapped_and_bare_objects_are_both_accepted():
    wrapped, _ = apply(Settings(), {"cpcLsp": {"maxTokens": 4}})
    bare, _ = apply(Settings(), {"maxTokens": 4})
    assert wrapped == bare == Settings(max_tokens=4)


def test_every_key_maps_to_its_field():
    raw = {
        "model": "~/m.gguf", "maxTokens": 3, "temperature": 0.7, "topK": 5, "topP": 0.5, "minP": 0.1,
        "repetitionPenalty": 1.1, "seed": 7, "singleLine": False, "contextTokens": 1024,
        "stop": ["\n\n", "END"], "maxCoverDecodes": 2, "logDocumentText": True,
    }  # fmt: skip
    s, problems = apply(Settings(), raw)
    assert problems == []
    assert s == Settings("~/m.gguf", 3, 0.7, 5, 0.5, 0.1, 1.1, 7, False, 1024, ("\n\n", "END"), 2, "exact", 0, True)
    assert s.engine_config().model_path == Path("~/m.gguf").expanduser()
    assert s.engine_config().context_tokens == 1024
    assert s.sampling().temperature == 0.7 and s.sampling().single_line is False


def test_absent_keys_keep_their_value_and_null_restores_the_default():
    s, _ = apply(Settings(), {"maxTokens": 3, "temperature": 0.5})
    s, _ = apply(s, {"temperature": None})
    assert (s.max_tokens, s.temperature) == (3, 0.0)
    s, _ = apply(s, {"model": "/other.gguf"})
    s, _ = apply(s, {"model": None}, defaults=Settings(model="/cli.gguf"))
    assert s.model == "/cli.gguf"
    s, _ = apply(Settings(model="/other.gguf"), {"model": " "}, defaults=Settings(model="/cli.gguf"))
    assert s.model == "/cli.gguf"  # VS Code sends "" for "not set"


def test_invalid_values_are_reported_and_keep_the_old_value():
    start = Settings(max_tokens=5)
    bad = {"maxTokens": 0, "temperature": -1, "topP": 0, "singleLine": "yes", "stop": [""],
           "seed": True, "contextTokens": "big", "model": 3, "minP": float("nan")}  # fmt: skip
    s, problems = apply(start, {**bad, "topK": 9})
    assert s == Settings(max_tokens=5, top_k=9)
    assert len(problems) == len(bad)
    assert any("cpcLsp.maxTokens" in p and "keeping 5" in p for p in problems)


def test_max_tokens_must_fit_the_context():
    s, problems = apply(Settings(), {"maxTokens": 129, "contextTokens": 256})
    assert s == Settings() and len(problems) == 1
    s, problems = apply(Settings(), {"maxTokens": 128, "contextTokens": 256})
    assert (s.max_tokens, s.context_tokens, problems) == (128, 256, [])


def test_unknown_keys_and_non_objects():
    assert apply(Settings(), {"trace": {"server": "off"}}) == (Settings(), [])
    assert apply(Settings(), None) == (Settings(), [])
    s, problems = apply(Settings(), ["maxTokens", 3])
    assert s == Settings() and len(problems) == 1
    s, problems = apply(Settings(), {"cpcLsp": 5})
    assert s == Settings() and len(problems) == 1


def test_a_number_too_large_for_a_float_is_reported_not_raised():
    huge = 10**400  # JSON allows it; math.isfinite(huge) raises OverflowError
    updated, problems = apply(Settings(), {"temperature": huge, "topP": -huge, "maxTokens": huge})
    assert updated == Settings() and len(problems) == 3


def test_a_model_path_whose_home_cannot_be_found_is_reported():
    """Path.expanduser raises for "~nobody/..."; found at load time, it would fail every reload after."""
    updated, problems = apply(Settings(), {"model": "~no-such-user-cpc/model.gguf"})
    assert updated == Settings() and len(problems) == 1 and "cpcLsp.model" in problems[0]
    assert updated.engine_config().model_path is None


def test_every_sampler_field_but_logprobs_is_a_setting_of_the_same_name():
    """`Settings.sampling` takes its values by name: a renamed setting must not drop out silently."""
    from dataclasses import fields

    from engine import SamplingConfig

    names = {f.name for f in fields(SamplingConfig)} - {"logprobs"}  # logprobs: for the bench, per request
    assert names <= {f.name for f in fields(Settings)}
    chosen = Settings(temperature=0.5, top_k=3, top_p=0.5, min_p=0.1, repetition_penalty=1.2, seed=7, single_line=False)
    assert chosen.sampling() == SamplingConfig(0.5, 3, 0.5, 0.1, 1.2, 7, False, False)
