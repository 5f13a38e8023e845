"""The incremental JSONL reader gives what a whole parse gives, whatever happened to the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.disk import AgentDisk
from agents.events import WarningEvent, append_event, read_events
from scenarios.folder import Folder
from scenarios.jsonl_cache import JsonlCache, Problem
from scenarios.store import Layout


def _numbered(number: int, raw: Any) -> tuple[int, Any] | Problem:
    if isinstance(raw, dict) and raw.get("bad"):
        return Problem(f"record {number} refused")
    return (number, raw)


def whole(path: Path) -> tuple[list, list[str], list, bool]:
    """What a fresh parse of the whole file says: the reference."""
    lines = Folder(path.parent).read_jsonl(path)
    items, problems = [], []
    for number, raw in enumerate(lines.records, start=1):
        item = _numbered(number, raw)
        (problems if isinstance(item, Problem) else items).append(item)
    return items, problems, lines.bad_lines, lines.torn_tail


def cached(cache: JsonlCache, path: Path) -> tuple[list, list[str], list, bool]:
    parsed = cache.read(path)
    return parsed.items, parsed.record_problems, parsed.bad_lines, parsed.torn_tail


line = st.one_of(
    st.builds(lambda n: json.dumps({"n": n}), st.integers(0, 99)),
    st.just(json.dumps({"bad": True})),
    st.just("{not json"),
    st.just(""),
    st.just("[1, 2]"),
)
change = st.one_of(
    st.tuples(st.just("append"), st.lists(line, min_size=1, max_size=3), st.booleans()),  # bool: end with newline
    st.tuples(st.just("truncate"), st.integers(0, 200), st.just(True)),
    st.tuples(st.just("edit"), st.integers(0, 200), st.just(True)),
    st.tuples(st.just("rewrite"), st.lists(line, max_size=4), st.booleans()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(change, min_size=1, max_size=12))
def test_every_read_equals_a_whole_parse(tmp_path_factory, changes):
    path = tmp_path_factory.mktemp("jsonl") / "f.jsonl"
    cache = JsonlCache(_numbered)
    for kind, arg, newline in changes:
        data = path.read_bytes() if path.exists() else b""
        if kind == "append":
            data += ("\n".join(arg) + ("\n" if newline else "")).encode()
        elif kind == "truncate":
            data = data[:arg]
        elif kind == "edit" and data:  # one byte changed in place: same length, same file
            at = arg % len(data)
            data = data[:at] + (b"X" if data[at:at + 1] != b"X" else b"Y") + data[at + 1:]
        elif kind == "rewrite":
            data = ("\n".join(arg) + ("\n" if newline else "")).encode()
        path.write_bytes(data)
        assert cached(cache, path) == whole(path)


def test_a_torn_line_is_reported_then_ended_like_a_whole_parse(tmp_path):
    path = tmp_path / "f.jsonl"
    cache = JsonlCache(_numbered)
    path.write_bytes(b'{"n": 1}\n{"n": 2')  # a crash mid-append
    assert cached(cache, path) == whole(path) and cache.read(path).torn_tail
    path.write_bytes(b'{"n": 1}\n{"n": 2}')  # the same line, finished without its newline
    assert cache.read(path).items == [(1, {"n": 1}), (2, {"n": 2})] and not cache.read(path).torn_tail
    path.write_bytes(b'{"n": 1}\n{"n": 2\n{"n": 3}\n')  # append_jsonl ends the torn line first
    assert cached(cache, path) == whole(path) and len(cache.read(path).bad_lines) == 1


def test_only_new_lines_are_parsed(tmp_path):
    path, seen = tmp_path / "f.jsonl", []
    cache = JsonlCache(lambda number, raw: seen.append(number) or raw)
    path.write_text('{"a": 1}\n{"a": 2}\n')
    cache.read(path)
    with path.open("a") as fh:
        fh.write('{"a": 3}\n')
    assert [r["a"] for r in cache.read(path).items] == [1, 2, 3]
    assert seen == [1, 2, 3]  # records 1 and 2 were not parsed again
    path.write_text('{"a": 9}\n{"a": 2}\n{"a": 3}\n')  # same length, first record edited: parsed whole again
    assert [r["a"] for r in cache.read(path).items] == [9, 2, 3] and seen == [1, 2, 3, 1, 2, 3]


def test_what_a_cache_keeps_is_bounded(tmp_path):
    cache = JsonlCache(_numbered, max_bytes=100)
    for i in range(10):
        (tmp_path / f"{i}.jsonl").write_text(json.dumps({"n": "x" * 30}) + "\n")
        cache.read(tmp_path / f"{i}.jsonl")
    assert cache._bytes <= 100 and len(cache._kept) <= 3
    assert cache.read(tmp_path / "0.jsonl").items == [(1, {"n": "x" * 30})]  # dropped, read again whole


def test_an_agent_disk_and_its_events_reload_what_was_appended(tmp_path):
    layout = Layout(tmp_path)
    log = layout.log("init")
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"seq": 1, "kind": "note", "step": 0, "iteration": 0,
                               "message": {"role": "user", "content": "hi"}}) + "\n{torn")
    first = AgentDisk.load(tmp_path, "init")
    assert len(first.records) == 1 and any("not valid JSON" in p for p in first.problems)
    with log.open("a") as fh:
        fh.write("\n" + json.dumps({"seq": 2, "kind": "note", "step": 0, "iteration": 0,
                                    "message": {"role": "user", "content": "again"}}) + "\n" + '{"seq": "x"}\n')
    second = AgentDisk.load(tmp_path, "init")
    assert [r.seq for r in second.records] == [1, 2]
    assert any("log record 3 is not a valid record" in p for p in second.problems)
    assert second.records is not first.records and len(first.records) == 1  # each load has its own list
    events = layout.events("init")
    append_event(events, WarningEvent(after_step=1, reason="one"))
    assert len(read_events(events)[0]) == 1
    append_event(events, WarningEvent(after_step=2, reason="two"))
    with events.open("a") as fh:
        fh.write('{"kind": "nonsense"}\n')
    found, problems = read_events(events)
    assert [e.after_step for e in found] == [1, 2] and problems == [
        "events.jsonl record 3 (kind 'nonsense') is not a known event (1 problem(s)); ignored"]


def test_a_shared_message_is_parsed_and_redacted_once_and_its_result_is_the_same(tmp_path):
    from context.identity_memo import IdentityMemo
    from context.messages import parse_message
    from context.redaction import redact_message

    calls = []
    memo = IdentityMemo(lambda obj: calls.append(obj) or len(obj), size=2)
    a, b, c = [1], [1, 2], [1, 2, 3]
    assert [memo(a), memo(a), memo(b), memo(c), memo(a)] == [1, 1, 2, 3, 1]
    assert calls == [a, b, c, a]  # a was dropped (size 2) and computed again; equal values are not shared
    assert memo([1]) == 1 and len(calls) == 5
    key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
    secret = parse_message({"role": "user", "content": f"export AWS_SECRET_ACCESS_KEY={key}"})
    once = redact_message(secret)
    assert redact_message(secret) is once and "wJalr" not in once.text  # memoised, and still redacted
    clean = parse_message({"role": "user", "content": "nothing to hide"})
    assert redact_message(clean) is clean
