"""The engine process on the real default model: streaming, cancel, determinism, crash boundary, bad files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.ops import Hello
from hisho.core.engine.protocol import PROTOCOL_VERSION, BadRequest, ErrorKind, LoadParams, Sampling
from hisho.core.errors import EngineCrashed, EngineError

GREEDY = Sampling(temperature=0.0, max_tokens=24, repeat_penalty=1.0)
HELLO = [{"role": "user", "content": "Say hello to the world."}]


def test_hello_reports_engine_facts(engine: EngineClient) -> None:
    info = engine.engine_info
    assert info["pid"] == engine.pid
    assert info["llama_cpp_version"]
    assert isinstance(info["supports_gpu_offload"], bool)


def test_load_reports_model_facts(engine: EngineClient) -> None:
    info = engine.load_info
    assert info["n_ctx"] == 2048
    assert info["n_vocab"] > 1000
    assert info["chat_template_source"] == "gguf"  # SmolLM2 ships a chat template in its metadata
    assert info["architecture"] == "llama"


def test_streaming_yields_tokens_then_result(engine: EngineClient) -> None:
    stream = engine.generate(messages=HELLO, sampling=GREEDY)
    events = list(stream)
    assert len(events) >= 2
    assert all(isinstance(ev["token"], int) and isinstance(ev["text"], str) for ev in events)
    result = stream.result
    assert result is not None
    assert result.completion_tokens == len(events)
    assert result.text == "".join(ev["text"] for ev in events)
    assert result.prompt_tokens > 5
    assert result.stop_reason in ("eos", "length")


def test_greedy_is_deterministic(engine: EngineClient) -> None:
    first = engine.generate(messages=HELLO, sampling=GREEDY).collect()
    second = engine.generate(messages=HELLO, sampling=GREEDY).collect()
    assert first.text == second.text
    assert first.completion_tokens == second.completion_tokens > 0


def test_prefix_is_reused_between_turns(engine: EngineClient) -> None:
    engine.call("seq_rm", {"seq": 0, "start": 0})
    first = engine.generate(messages=HELLO, sampling=GREEDY).collect()
    follow = HELLO + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Again."}]
    second = engine.generate(messages=follow, sampling=GREEDY).collect()
    # Everything up to the first reply is still in the KV cache: only the new turn is prefilled.
    assert second.cached_tokens >= first.prompt_tokens
    assert second.cached_tokens < second.prompt_tokens


def test_seeded_sampling_is_reproducible(engine: EngineClient) -> None:
    sampling = Sampling(temperature=0.9, seed=1234, max_tokens=16)
    a = engine.generate(messages=HELLO, sampling=sampling).collect()
    b = engine.generate(messages=HELLO, sampling=sampling).collect()
    assert a.text == b.text


def test_cancel_stops_within_one_token(engine: EngineClient) -> None:
    sampling = Sampling(temperature=0.0, max_tokens=400, ignore_eos=True, repeat_penalty=1.0)
    # The engine holds the reply after its 5th token until the cancel is in (a fast machine would otherwise
    # sample many more between our look and the cancel, and token events leave in 25 ms batches).
    stream = engine.generate(messages=[{"role": "user", "content": "Count to one thousand."}], sampling=sampling,
                             test_hooks={"hold_after_tokens": 5})
    seen = 0
    for _ in stream:
        seen += 1
        if seen == 5:
            stream.cancel()
    result = stream.result
    assert result is not None
    assert result.stop_reason == "cancelled"
    # The cancel came in after the 5th token: checked before each token, it lets no 6th one be sampled.
    assert seen == 5 and result.completion_tokens == 5, result
    # The engine is free again at once.
    assert engine.generate(messages=HELLO, sampling=GREEDY).collect().completion_tokens > 0


def test_max_tokens_and_stop_strings(engine: EngineClient) -> None:
    capped = engine.generate(messages=HELLO, sampling=Sampling(temperature=0.0, max_tokens=3)).collect()
    assert capped.completion_tokens == 3
    assert capped.stop_reason == "length"


def test_tokenize_round_trip(engine: EngineClient) -> None:
    tokens = engine.tokenize("The quick brown fox", special=False)
    assert 3 <= len(tokens) <= 8
    assert engine.detokenize(tokens).strip() == "The quick brown fox"
    templated = engine.tokenize(messages=HELLO)
    assert len(templated) > len(engine.tokenize("Say hello to the world.", special=False))


def test_prompt_longer_than_context_is_refused(engine: EngineClient) -> None:
    long_text = "word " * 3000
    with pytest.raises(EngineError) as info:
        engine.generate(prompt=long_text, sampling=GREEDY).collect()
    assert info.value.kind == "context_full"
    assert engine.generate(messages=HELLO, sampling=GREEDY).collect().completion_tokens > 0


def test_native_abort_kills_only_the_engine_and_next_request_recovers(
    engine_home: Path, default_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HISHO_HOME", str(engine_home))
    client = EngineClient(test_hooks=True)
    try:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=1024))
        expected = client.generate(messages=HELLO, sampling=GREEDY).collect().text
        old_pid = client.pid
        with pytest.raises(EngineCrashed) as info:
            client.call("abort")  # ggml_abort(): what a failed GGML_ASSERT does
        assert "signal 6" in str(info.value) or info.value.exit_code not in (0, None)
        assert "simulated GGML_ASSERT" in str(info.value)
        # The caller's data is intact and the next request restarts the engine with the same plan.
        again = client.generate(messages=HELLO, sampling=GREEDY).collect()
        assert again.text == expected
        assert client.pid != old_pid
        assert client.restarts == 1
    finally:
        client.close()


def test_kill_mid_generation_reports_crash(engine_home: Path, default_model_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISHO_HOME", str(engine_home))
    client = EngineClient()
    try:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=1024))
        stream = client.generate(messages=HELLO, sampling=Sampling(temperature=0.0, max_tokens=300,
                                                                     ignore_eos=True))
        got = 0
        with pytest.raises(EngineCrashed):
            for _ in stream:
                got += 1
                if got == 3:
                    client.kill()
        assert client.generate(messages=HELLO, sampling=GREEDY).collect().completion_tokens > 0
    finally:
        client.close()


def test_abort_hook_is_off_by_default(engine_home: Path, default_model_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISHO_HOME", str(engine_home))
    with EngineClient() as client:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        with pytest.raises(EngineError) as info:
            client.call("abort")
        assert info.value.kind == "bad_request"
        assert client.running


def test_engine_exits_when_parent_closes_pipe(engine_home: Path, default_model_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISHO_HOME", str(engine_home))
    client = EngineClient()
    client.start()
    proc = client._process.popen
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is not None


def test_engine_log_keeps_llama_cpp_info_not_its_debug_lines(engine: EngineClient, engine_home: Path) -> None:
    list(engine.generate(messages=HELLO, sampling=GREEDY))
    text = (engine_home / "logs" / "engine.log").read_text(errors="replace")
    assert "print_info: " in text  # the load report (INFO) is kept
    assert "llama_graph_n_input_tensors" not in text  # a DEBUG line per decode step is not


def test_engine_refuses_another_protocol_version(engine: EngineClient) -> None:
    with pytest.raises(EngineError, match="reinstall") as info:
        engine.call(Hello(protocol=PROTOCOL_VERSION + 1))
    assert info.value.kind is ErrorKind.PROTOCOL
    assert engine.call(Hello(protocol=PROTOCOL_VERSION))["protocol"] == PROTOCOL_VERSION
    with pytest.raises(BadRequest, match="cannot be"):
        engine.call("seq_rm", {"seq": "zero"})  # checked before it is sent
