"""bench/request_prefix.py: the chain digest says "same prefix up to here" exactly when the messages are equal there,
whatever the breakpoints and key order."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from context.messages import Message
from tests.bench_scripts import load_bench

_digest = load_bench("request_prefix")
block_digest, canonical_message, chain, seed = (_digest.block_digest, _digest.canonical_message, _digest.chain,
                                                _digest.seed)

TEXT = st.text(alphabet="ab \n\"é", max_size=6)
BLOCK = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
    st.builds(lambda i, x: {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"path": x}},
              st.integers(0, 3), TEXT),
    st.builds(lambda i, t: {"type": "tool_result", "tool_use_id": f"t{i}", "content": t}, st.integers(0, 3), TEXT),
)
MESSAGE = st.builds(lambda role, blocks: {"role": role, "content": blocks},
                    st.sampled_from(["user", "assistant"]), st.lists(BLOCK, min_size=1, max_size=3))
MESSAGES = st.lists(MESSAGE, max_size=6)


def digests(messages, system="sys", tools=()):
    return chain(seed(system, tools), [canonical_message(m) for m in messages])


def marked(message: dict, rng: random.Random) -> dict:
    """The same message as a request may send it: a breakpoint on one block, keys in another order."""
    blocks = [dict(reversed(list(b.items()))) for b in message["content"]]
    blocks[rng.randrange(len(blocks))]["cache_control"] = {"type": "ephemeral"}
    return {"content": blocks, "role": message["role"]}


@settings(max_examples=200, deadline=None)
@given(MESSAGES, MESSAGES, st.integers(0, 2**32))
def test_digests_agree_exactly_where_the_prefixes_do(a, b, salt):
    rng = random.Random(salt)
    da, db = digests(a), digests([marked(m, rng) for m in b])
    for i in range(min(len(a), len(b)) + 1):
        assert (da[i] == db[i]) == (a[:i] == b[:i])


@settings(max_examples=100, deadline=None)
@given(MESSAGES, TEXT.filter(bool), TEXT)
def test_the_static_prefix_is_part_of_every_digest(messages, system, other):
    same = digests(messages, system) == digests(messages, [{"type": "text", "text": system}])
    changed = digests(messages, system)[-1] == digests(messages, other)[-1]
    assert same and changed == (system == other)
    tools = [{"name": "Read", "input_schema": {"type": "object"}}]
    assert digests(messages, system, tools)[-1] != digests(messages, system)[-1]
    marked_tools = [{**tools[0], "cache_control": {"type": "ephemeral"}}]
    assert digests(messages, system, tools) == digests(messages, system, marked_tools)


def test_a_message_digests_as_the_engine_serialises_it():
    msg = Message(role="user", content="hello")  # the string shorthand becomes one text block
    assert canonical_message(msg.api) == msg.canonical == canonical_message({"role": "user", "content": "hello"})


def test_a_block_inside_a_message_is_bound_to_the_blocks_before_it():
    start = digests([{"role": "user", "content": "go"}])[-1]
    use = {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}
    assert block_digest(start, "assistant", [use]) != block_digest(start, "assistant", [])
    assert block_digest(start, "assistant", [use]) == block_digest(start, "assistant", [{**use, "cache_control": {}}])
    assert block_digest(start, "assistant", []) != block_digest(start, "user", [])
