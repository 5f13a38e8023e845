import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context.assembly import BRIDGE, PINNED_OPENING, Assembler, ContextOverflow, StaticPrefix
from context.compaction import CircuitBreaker, compact
from context.history import History
from context.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, assistant, user
from context.policy import Policy
from context.protocol import validate
from context.summary_schemas import ExecuteSummary, InitSummary
from tests.logs import messy_log


def step(i: int, text: str = "ok", name: str = "Bash") -> list[Message]:
    tid = f"toolu_{i:04d}"
    return [
        assistant(f"step {i}", ToolUseBlock(id=tid, name=name, input={"command": f"cat file{i}.txt"})),
        user(ToolResultBlock(tool_use_id=tid, content=text)),
    ]


def run_log(n_steps: int, result: str = "line\n" * 200, rounds: int = 1) -> History:
    h = History(redact=False)
    k = 0
    for r in range(rounds):
        h.append(user(f"task {r}"))
        for _ in range(n_steps):
            k += 1
            for m in step(k, result):
                h.append(m)
        if r < rounds - 1:
            h.append(assistant(f"round {r} done"))
    return h


def policy(**kw) -> Policy:
    """The mechanism without the cost gates (start size, payback), unless a test sets them."""
    return Policy(
        **{
            "window": 200_000,
            "threshold": 150_000,
            "keep_last_steps": 3,
            "batch": 1,
            "start_tokens": 0,
            "payback_calls": 0,
            **kw,
        }
    )


def test_policy_rejects_threshold_above_window():
    with pytest.raises(ValueError, match="threshold"):
        Policy(window=1000, threshold=2000)
    with pytest.raises(ValueError):
        Policy(keep_last_steps=0)


def test_single_round_compresses_all_but_last_n():
    h = run_log(10)
    a = Assembler(h, policy(), agent="execute").assemble()
    validate(a.messages)
    assert (a.compressed_steps, a.verbatim_steps) == (7, 3)
    assert a.messages[-6:] == h.view[-6:]  # last 3 steps, same objects
    old = a.messages[2].tool_results[0]
    assert "state/execute/tool_results/toolu_0001.txt" in old.text and len(old.text) < len(
        h.view[2].tool_results[0].text
    )
    assert a.messages[1] is h.view[1]  # assistant text and tool calls kept


def test_hysteresis_moves_steps_in_batches():
    h = History(redact=False)
    h.append(user("task"))
    asm = Assembler(h, policy(batch=4))
    seen = []
    for i in range(1, 16):
        for m in step(i):
            h.append(m)
        seen.append(asm.assemble().verbatim_steps)
    assert all(3 <= v < 3 + 4 for v in seen[2:])
    changes = sum(1 for x, y in zip(seen, seen[1:]) if y < x)
    assert changes == 3  # the prefix changed only when a batch of 4 moved out


def test_stable_prefix_is_reused_between_batches():
    h = History(redact=False)
    h.append(user("task"))
    asm = Assembler(h, policy(batch=5))
    prefixes = []
    for i in range(1, 13):
        for m in step(i):
            h.append(m)
        a = asm.assemble()
        prefixes.append([m.canonical for m in a.messages[: a.breakpoints[0] + 1]])
    # between two batch moves the prefix up to the first breakpoint is byte-identical
    assert prefixes[8] == prefixes[9] == prefixes[10] == prefixes[11]


def test_earlier_rounds_keep_only_opening_and_final():
    h = run_log(4, rounds=3)
    h.append(user("third question"))
    a = Assembler(h, policy()).assemble()
    validate(a.messages)
    texts = [m.text for m in a.messages]
    assert texts[:4] == ["task 0", "round 0 done", "task 1", "round 1 done"]
    assert a.layers["earlier_rounds"] > 0


def test_start_size_keeps_everything_verbatim_below_it():
    h = run_log(10)
    a = Assembler(h, policy(start_tokens=10**6)).assemble()
    assert not a.managed and a.messages == h.view
    b = Assembler(h, policy(start_tokens=10)).assemble()
    assert b.managed and b.compressed_steps == 7


def test_breakpoints_mark_stable_prefix_and_last_message():
    h = run_log(10)
    a = Assembler(
        h, policy(), static=StaticPrefix(system="sys", tools=[{"name": "Bash", "input_schema": {}}])
    ).assemble()
    assert a.breakpoints[-1] == len(a.messages) - 1
    req = a.to_request(
        StaticPrefix(system="sys", tools=[{"name": "Bash", "input_schema": {}}]), model="m", max_tokens=100
    )
    marked = [i for i, m in enumerate(req["messages"]) if "cache_control" in m["content"][-1]]
    assert marked == a.breakpoints
    assert req["system"][0]["cache_control"] and "cache_control" not in req["tools"][-1]
    assert "cache_control" not in h.view[-1].api["content"][-1]  # cached forms untouched


def test_oversized_verbatim_result_is_cut_with_reference():
    h = run_log(2, result="x" * 100_000)
    a = Assembler(h, policy(result_cap_chars=10_000), agent="init").assemble()
    last = a.messages[-1].tool_results[0].text
    assert len(last) < 5_000 and "state/init/tool_results/toolu_0002.txt" in last


def test_emergency_trim_keeps_two_verbatim_steps_and_fits():
    h = run_log(6, result="word " * 4_500)
    pol = Policy(window=20_000, threshold=15_000, keep_last_steps=5, batch=1, max_tokens=1_000)
    a = Assembler(h, pol).assemble()
    validate(a.messages)
    assert a.trimmed_steps > 0 and a.verbatim_steps >= 2
    assert a.estimated_input + pol.max_tokens <= pol.window


def test_overflow_that_cannot_be_trimmed_raises_clearly():
    h = History(redact=False)
    h.append(user("x " * 50_000))
    with pytest.raises(ContextOverflow, match="over the window"):
        Assembler(h, Policy(window=5_000, threshold=4_000, max_tokens=100)).assemble()


def test_compaction_rebuilds_a_valid_context_with_summary_first():
    h = run_log(12)
    asm = Assembler(h, policy(), agent="execute")
    event = compact(
        schema=ExecuteSummary, assembler=asm, previous=None, prompt="Summarise.", call=None, breaker=CircuitBreaker()
    )
    a = asm.assemble(event)
    validate(a.messages)
    assert a.messages[0].text == "Summarise." and "<compact_summary>" in a.messages[1].text
    # the kept steps start mid-round: the round's opening is pinned before the bridge (docs/context.md)
    assert [b.text for b in a.messages[2].content] == [PINNED_OPENING.format(text="task 0"), BRIDGE]
    assert a.messages[-6:] == h.view[-6:]
    assert event.fallback and event.tokens_after < event.tokens_before


def test_kept_step_results_over_5000_chars_are_cut_after_compaction():
    h = run_log(8, result="y" * 9_000)
    asm = Assembler(h, policy(result_cap_chars=50_000))
    event = compact(
        schema=ExecuteSummary, assembler=asm, previous=None, prompt="Summarise.", call=None, breaker=CircuitBreaker()
    )
    a = asm.assemble(event)
    kept = [b for m in a.messages[3:] for b in m.tool_results]
    assert kept and all(len(b.text) < 5_000 for b in kept)


policies = st.builds(
    Policy,
    window=st.just(400_000),
    threshold=st.just(300_000),
    keep_last_steps=st.integers(1, 6),
    batch=st.integers(1, 6),
    start_tokens=st.sampled_from([0, 0, 50, 500, 10**9]),
    payback_calls=st.sampled_from([0, 0, 1, 30]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=messy_log(), pol=policies, cut_points=st.lists(st.integers(0, 60), max_size=3))
def test_property_assembled_requests_are_valid_and_end_verbatim(log, pol, cut_points):
    h = History(redact=False)
    asm = Assembler(h, pol, agent="execute")
    event = None
    for k, msg in enumerate(log):
        h.append(msg)
        if h.pending_tool_ids or not h.view or h.view[-1].role != "user":
            continue
        if k in cut_points:
            event = compact(
                schema=ExecuteSummary,
                assembler=asm,
                previous=event,
                prompt="Summarise.",
                call=None,
                breaker=CircuitBreaker(),
            )
        a = asm.assemble(event)
        validate(a.messages)
        # the last N steps of the current round are the log's own messages, unchanged
        base = event.in_view(h).kept_from if event else 0
        starts = [s for s in h.rounds_in(base)] or [base]
        steps = h.steps_in(max(starts[-1], base))
        n = min(pol.keep_last_steps, len(steps))
        if n:
            tail = h.view[steps[-n] :]
            assert [m.canonical for m in a.messages[-len(tail) :]] == [m.canonical for m in tail]
        assert a.breakpoints and a.breakpoints[-1] == len(a.messages) - 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=messy_log(), keep=st.integers(1, 6))
def test_property_repeated_compaction_output_is_valid_and_carries_key_paths(log, keep):
    h = History(redact=False)
    asm = Assembler(h, Policy(window=400_000, threshold=300_000, keep_last_steps=keep), agent="init")
    events = []
    for msg in log:
        h.append(msg)
        if h.pending_tool_ids or not h.view or h.view[-1].role != "user":
            continue
        prev = events[-1] if events else None
        ev = compact(
            schema=InitSummary, assembler=asm, previous=prev, prompt="Summarise.", call=None, breaker=CircuitBreaker()
        )
        validate(asm.assemble(ev).messages)
        assert ev.summary["key_paths"]["tool_results_archive"] == "state/init/tool_results/"
        if prev:
            assert ev.in_view(h).kept_from >= prev.in_view(h).kept_from and ev.id == prev.id + 1
        events.append(ev)


def test_assembly_does_not_retokenise_history(monkeypatch):
    import context.tokens as tokens

    h = run_log(30)
    asm = Assembler(h, policy(batch=5))
    asm.assemble()
    calls = []
    original = tokens.block_tokens
    monkeypatch.setattr(tokens, "block_tokens", lambda b: calls.append(b) or original(b))
    for i in range(31, 41):
        for m in step(i):
            h.append(m)
        asm.assemble()
    # only the new blocks (and compressed forms of steps leaving the window) are counted
    assert len(calls) <= 10 * 2 + 10 * 2


def test_compressed_form_is_cached_and_deterministic():
    h = run_log(10)
    a1 = Assembler(h, policy()).assemble()
    a2 = Assembler(h, policy()).assemble()
    assert [m.canonical for m in a1.messages] == [m.canonical for m in a2.messages]


def test_messages_from_odd_tool_results():
    h = History(redact=False)
    h.append(user("go"))
    h.append(assistant(ToolUseBlock(id="t1", name="Read", input={"file_path": "a.bin"})))
    h.append(Message(role="user", content=[ToolResultBlock(tool_use_id="t1", content=b"\xff\xfe\x00binary")]))
    h.append(assistant(ToolUseBlock(id="t2", name="lookup", input={})))
    h.append(
        Message(role="user", content=[ToolResultBlock(tool_use_id="t2", content={"status": "ok", "data": [1, 2]})])
    )
    a = Assembler(h, policy(keep_last_steps=1)).assemble()
    validate(a.messages)
    assert isinstance(a.messages[-1].tool_results[0].content, str)
    TextBlock(
        text=a.to_request(StaticPrefix(), model="m", max_tokens=10)["messages"][2]["content"][0]["content"]
    ).text.encode()


def test_empty_log_gives_a_clear_error():
    with pytest.raises(ValueError, match="log is empty"):
        Assembler(History(), policy()).assemble()


def test_a_50_mb_tool_result_is_cut_in_the_request_and_kept_whole_in_the_log():
    huge = ("log line with a value 12345\n" * 2_000_000)[: 50 * 1024 * 1024]
    h = History()  # with redaction, as agents use it
    h.append(user("go"))
    h.append(assistant(ToolUseBlock(id="big", name="Bash", input={"command": "cat huge.log"})))
    h.append(user(ToolResultBlock(tool_use_id="big", content=huge)))
    asm = Assembler(h, Policy(), agent="execute")
    a = asm.assemble()
    validate(a.messages)
    sent = a.messages[-1].tool_results[0].text
    assert len(sent) < 50_000 and "state/execute/tool_results/big.txt" in sent
    assert h.view[-1].tool_results[0].text == huge  # the log keeps everything
    event = compact(
        schema=ExecuteSummary, assembler=asm, previous=None, prompt="Summarise.", call=None, breaker=CircuitBreaker()
    )
    validate(asm.assemble(event).messages)


def test_no_compaction_when_it_would_cover_nothing_new():
    h = History(redact=False)
    h.append(user("Fix the bug."))
    h.append(assistant("Thinking aloud. " * 6000))  # a looping model answer, over the threshold alone
    h.append(user("Please use a tool."))
    for i in range(3):
        for m in step(i):
            h.append(m)
    asm = Assembler(h, Policy(window=40_000, threshold=10_000, keep_last_steps=5), agent="execute")
    first = asm.assemble()
    assert first.estimated_input > 10_000 and not asm.should_compact(first, None)
    for i in range(3, 8):
        for m in step(i):
            h.append(m)
    assert asm.should_compact(asm.assemble(), None)  # now the long answer can be summarised away
    ev = compact(schema=ExecuteSummary, assembler=asm, previous=None, prompt="S", call=None, breaker=CircuitBreaker())
    after = asm.assemble(ev)
    assert after.estimated_input < 10_000 and not asm.should_compact(after, ev)


def test_older_calls_keep_short_arguments_and_cut_bulky_ones():
    h = History(redact=False)
    h.append(user("write it"))
    big = "def f():\n    return 1\n" * 500
    h.append(assistant(ToolUseBlock(id="w", name="Write", input={"file_path": "src/app.py", "content": big})))
    h.append(user(ToolResultBlock(tool_use_id="w", content="File created successfully at: src/app.py")))
    for i in range(1, 6):
        for m in step(i):
            h.append(m)
    a = Assembler(h, policy()).assemble()
    call = a.messages[1].tool_uses[0]
    assert call.input["file_path"] == "src/app.py" and len(call.input["content"]) < 500
    assert "full call is in the agent log" in call.input["content"]
    assert h.view[1].tool_uses[0].input["content"] == big


def test_breakpoints_include_the_previous_batch_end():
    h = run_log(14)
    a = Assembler(h, policy(batch=5, keep_last_steps=3)).assemble()
    assert a.compressed_steps == 10 and len(a.breakpoints) == 3
    prev, stable, last = a.breakpoints
    assert stable - prev == 10 and last == len(a.messages) - 1
    req = a.to_request(StaticPrefix(system="s", tools=[{"name": "t"}]), model="m", max_tokens=1)
    marks = (
        sum("cache_control" in m["content"][-1] for m in req["messages"]) + 1 + ("cache_control" in req["tools"][-1])
    )
    assert marks <= 4


def test_payback_compresses_only_batches_that_repay_the_cache_rewrite():
    h = History(redact=False)
    h.append(user("task"))
    k = 0
    for size in ["ok"] * 5 + ["line of output\n" * 2_000] * 5 + ["ok"] * 5:  # small, big, small batches
        k += 1
        for m in step(k, size):
            h.append(m)
    a = Assembler(h, policy(batch=5, keep_last_steps=3, payback_calls=30)).assemble()
    validate(a.messages)
    # batch 1 (tiny results) saves nothing and stays verbatim; batch 2 (big results) is compressed
    assert a.compressed_steps == 5 and a.verbatim_steps == 10
    assert a.messages[2] is h.view[2] and a.messages[12].tool_results[0].text != h.view[12].tool_results[0].text
    assert a.layers["kept_batches"] > 0
    always = Assembler(h, policy(batch=5, keep_last_steps=3, payback_calls=0)).assemble()
    assert always.compressed_steps == 10


def test_defaults_come_from_the_benchmark():
    p = Policy()
    assert (p.batch, p.start_tokens, p.payback_calls, p.keep_last_steps) == (5, 10_000, 30, 5)


def test_a_merged_opening_message_is_not_served_stale_from_the_prefix_memo():
    h = run_log(3)
    h.append(assistant("done"))
    h.append(user("new question"))  # opens a round: the last view message is its opening message
    asm = Assembler(h, policy())
    first = asm.assemble()
    h.append(user("also this"))  # merges into that opening message
    second = asm.assemble()
    validate(second.messages)
    assert second.messages[-1].text == "new question\nalso this" and first.messages[-1].text == "new question"
