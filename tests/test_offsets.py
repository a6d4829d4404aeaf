"""`ConsumerOffsetManager` and `consumerOffset.json` (spec §9.2, §9.3, §16.10; tests spec §3.7, A.10).

`tests/data/consumerOffset-rocketmq-5.3.1.json` was written by Apache RocketMQ 5.3.1's own
`ConsumerOffsetManager.encode(true)` (fastjson 1.2.83) after these commits, in this order:
TopicTest@GID_A {0:250, 1:250, 2:249, 3:251}, %RETRY%GID_A@GID_A {0:0}, `T"xé\\n`@G2 {17:5}, Orders@G2 {100:7},
then one `DataVersion.nextVersion()`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmq
from conftest import SMALL
from rmq import _native
from rmq.offsets import ConsumerOffsetManager, DataVersion, OffsetFileError, decode_offsets, encode_offsets

DATA = Path(__file__).parent / "data"
JAVA_FILE = DATA / "consumerOffset-rocketmq-5.3.1.json"
JAVA_RELOADED = DATA / "consumerOffset-rocketmq-5.3.1-reloaded.json"  # JAVA_FILE after 5.3.1's load and persist
JAVA_COMMITS = [
    ("GID_A", "TopicTest", 0, 250),
    ("GID_A", "TopicTest", 1, 250),
    ("GID_A", "TopicTest", 2, 249),
    ("GID_A", "TopicTest", 3, 251),
    ("GID_A", "%RETRY%GID_A", 0, 0),
    ("G2", 'T"x\u00e9\n', 17, 5),
    ("G2", "Orders", 100, 7),
]

SPEC_EXAMPLE = """{
\t"dataVersion":{
\t\t"counter":3,
\t\t"stateVersion":0,
\t\t"timestamp":1700000000000
\t},
\t"groupTopicMap":{
\t\t"GID_A":["%RETRY%GID_A","TopicTest"]
\t},
\t"offsetTable":{
\t\t"TopicTest@GID_A":{0:250,1:250,2:249,3:251
\t\t},
\t\t"%RETRY%GID_A@GID_A":{0:0
\t\t}
\t}
}"""


def java_timestamp(text: str) -> int:
    m = re.search(r'"timestamp":(\d+)', text)
    assert m is not None
    return int(m.group(1))


# -- the file format -----------------------------------------------------------------------------------------


def test_encoding_is_byte_identical_to_rocketmq() -> None:
    java = JAVA_FILE.read_text(encoding="utf-8")
    table: dict[str, dict[int, int]] = {}
    for group, topic, q, o in JAVA_COMMITS:
        table.setdefault(f"{topic}@{group}", {})[q] = o
    assert encode_offsets(table, DataVersion(1, 0, java_timestamp(java))) == java


def test_empty_manager_matches_rocketmq() -> None:
    # ConsumerOffsetManager().encode(true) on RocketMQ 5.3.1.
    expected = '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":5\n\t},\n' + (
        '\t"groupTopicMap":{},\n\t"offsetTable":{}\n}'
    )
    assert encode_offsets({}, DataVersion(0, 0, 5)) == expected


def test_rocketmq_file_loads_and_persists_as_rocketmq_does(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_bytes(JAVA_FILE.read_bytes())
    m = ConsumerOffsetManager(path)
    assert m.load()
    assert m.query_offsets("GID_A", "TopicTest") == {0: 250, 1: 250, 2: 249, 3: 251}
    assert m.query_offset("G2", 'T"x\u00e9\n', 17) == 5
    assert m.query_offset("G2", "Orders", 100) == 7
    assert m.data_version.counter == 1
    assert m.groups() == {"GID_A", "G2"}
    assert m.topics_of("GID_A") == {"TopicTest", "%RETRY%GID_A"}
    # Nothing changed: persisting keeps the version and writes what RocketMQ 5.3.1 writes after loading the same
    # file (its reloaded table is a ConcurrentHashMap of 16 bins filled in file order, so the keys that share a
    # bin of 1 024 in the original come out in another order).
    m.persist()
    assert path.read_bytes() == JAVA_RELOADED.read_bytes() != JAVA_FILE.read_bytes()
    assert (tmp_path / "consumerOffset.json.bak").read_bytes() == JAVA_FILE.read_bytes()


def test_spec_example_with_unquoted_keys_decodes() -> None:
    table, version = decode_offsets(SPEC_EXAMPLE)
    assert table == {"TopicTest@GID_A": {0: 250, 1: 250, 2: 249, 3: 251}, "%RETRY%GID_A@GID_A": {0: 0}}
    assert version == DataVersion(3, 0, 1700000000000)


def test_strict_json_with_quoted_keys_decodes() -> None:
    text = '{"offsetTable": {"T@G": {"0": 5, "-1": 7}}, "dataVersion": {"counter": 2}, "extra": [1, 2.5, null]}'
    table, version = decode_offsets(text)
    assert table == {"T@G": {0: 5, -1: 7}}
    assert version.counter == 2


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"offsetTable":{"T@G":{0:}}}',
        '{"offsetTable":{"T@G":{x:1}}}',
        '{"offsetTable":{"T@G":{0:1.5}}}',
        '{"offsetTable":{"T@G":{0:9223372036854775808}}}',
        '{"offsetTable":{"T@G":{4294967296:1}}}',
        '{"offsetTable":[]}',
        '{"dataVersion":{"counter":"x"}}',
        '{"offsetTable":{}} trailing',
        '{"offsetTable":{"T@G":{0:1,}}}',
        "\x00\x00\x00",
    ],
)
def test_malformed_files_raise_typed_errors(text: str) -> None:
    with pytest.raises(OffsetFileError):
        decode_offsets(text)


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(lambda s: "@" not in s)
tables = st.dictionaries(
    st.tuples(names, names).map(lambda tg: f"{tg[0]}@{tg[1]}"),
    st.dictionaries(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1), max_size=6),
    max_size=8,
)


@given(tables, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
@settings(max_examples=300, deadline=None)
def test_encode_decode_round_trip(table: dict[str, dict[int, int]], counter: int, ts: int) -> None:
    version = DataVersion(counter, 0, ts)
    text = encode_offsets(table, version)
    assert decode_offsets(text) == (table, version)


# -- the manager (A.10) -------------------------------------------------------------------------------------


def test_commit_and_query(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "o.json")
    assert m.query_offset("G", "T", 0) == -1
    m.commit_offset("G", "T", 0, 100)
    assert m.query_offset("G", "T", 0) == 100
    assert m.query_offset("G", "T", 1) == -1
    assert m.query_offset("G", "Other", 0) == -1  # unknown topic of a known group
    m.commit_offset("G", "T", 0, 40)  # a smaller offset is accepted (a rewind)
    assert m.query_offset("G", "T", 0) == 40
    with pytest.raises(ValueError):
        m.commit_offset("", "T", 0, 1)
    assert m.table() == {"T@G": {0: 40}}


def test_clean_by_topic_is_exact(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "o.json")
    m.commit_offset("FooBarGroup", "FooBar", 1, 2)
    m.commit_offset("FooBarGroup", "FooBar", 2, 3)
    m.commit_offset("FooBarGroup", "FooBarBaz", 1, 9)
    m.clean_topic("InvalidTopic")
    assert m.query_offsets("FooBarGroup", "FooBar") == {1: 2, 2: 3}
    m.clean_topic("FooBar")
    assert m.table() == {"FooBarBaz@FooBarGroup": {1: 9}}


def test_remove_group_clears_committed_reset_and_pull_offsets(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "o.json")
    m.commit_offset("FooBarGroup", "FooBar", 0, 100)
    m.assign_reset_offset("FooBarGroup", "FooBar", 0, 100)
    m.commit_pull_offset("FooBarGroup", "FooBar", 0, 100)
    m.commit_offset("Other", "FooBar", 0, 5)
    m.remove_group("FooBarGroup")
    assert m.table() == {"FooBar@Other": {0: 5}}
    assert not m.has_reset_offset("FooBarGroup", "FooBar", 0)
    assert m.query_pull_offset("FooBarGroup", "FooBar", 0) == -1
    # A pull offset falls back to the committed one, and reads -1 once both are gone.
    m.commit_offset("G", "T", 0, 7)
    assert m.query_pull_offset("G", "T", 0) == 7
    m.commit_pull_offset("G", "T", 0, 9)
    assert m.query_pull_offset("G", "T", 0) == 9
    m.clear_pull_offset("G", "T")
    assert m.query_pull_offset("G", "T", 0) == 7
    m.remove_group("G")
    assert m.query_pull_offset("G", "T", 0) == -1


def test_reset_offset_wins_and_is_one_shot(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "o.json")
    m.commit_offset("G", "T", 0, 50)
    m.assign_reset_offset("G", "T", 0, 10)
    assert m.query_offset("G", "T", 0) == 10
    m.commit_offset("G", "T", 0, 60)
    assert m.query_offset("G", "T", 0) == 10  # the reset still wins until taken
    assert m.query_then_erase_reset_offset("G", "T", 0) == 10
    assert m.query_then_erase_reset_offset("G", "T", 0) is None
    assert m.query_offset("G", "T", 0) == 60
    for bad in (("", "T", 0, 1), ("G", "", 0, 1), ("G", "T", -1, 1), ("G", "T", 0, -1)):
        m.assign_reset_offset(*bad)
    assert not m.has_reset_offset("G", "T", 0)
    assert m.query_offset("G", "T", 0) == 60


def test_persist_and_load_in_a_fresh_manager(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("G1", "T", 0, 1)
    m.commit_offset("G1", "T", 1, 3)
    m.persist()
    assert m.data_version.counter == 1
    m.persist()  # unchanged: no new version
    assert m.data_version.counter == 1
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    assert fresh.table() == {"T@G1": {0: 1, 1: 3}}
    assert fresh.data_version == m.data_version


def test_persist_keeps_the_previous_file_as_bak(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("G", "T", 0, 1)
    m.persist()
    first = path.read_text()
    m.commit_offset("G", "T", 0, 2)
    m.persist(sync=False)
    assert (tmp_path / "o.json.bak").read_text() == first
    assert decode_offsets(path.read_text())[0] == {"T@G": {0: 2}}
    assert not (tmp_path / "o.json.tmp").exists()


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage", "truncated"])
def test_load_falls_back_to_bak(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("G", "T", 0, 1)
    m.persist()
    m.commit_offset("G", "T", 0, 2)
    m.persist()
    text = path.read_text()
    if damage == "missing":
        path.unlink()
    elif damage == "empty":
        path.write_text("")
    elif damage == "garbage":
        path.write_bytes(b"\xff\xfe not json")
    else:
        path.write_text(text[: len(text) // 2])
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    assert fresh.query_offset("G", "T", 0) == 1


def test_load_with_no_files_is_empty_and_both_bad_reports_failure(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "o.json")
    assert m.load()
    assert m.table() == {}
    (tmp_path / "o.json").write_text("{bad")
    (tmp_path / "o.json.bak").write_text("")
    assert not m.load()
    assert m.table() == {}


CRASH_CHILD = """
import os, signal, sys
import rmq.offsets as o
path, stage = sys.argv[1], sys.argv[2]
m = o.ConsumerOffsetManager(path)
assert m.load()
m.commit_offset("G", "T", 0, 2)
def die(s):
    if s == stage:
        os.kill(os.getpid(), signal.SIGKILL)
o._fault_point = die
m.persist()
"""


@pytest.mark.parametrize("stage", ["written", "rotated", "renamed"])
def test_crash_during_persist_never_leaves_an_unreadable_file(tmp_path: Path, stage: str) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("G", "T", 0, 1)
    m.persist()
    m.commit_offset("G", "T", 1, 5)
    m.persist()  # a .bak exists too
    proc = subprocess.run([sys.executable, "-c", CRASH_CHILD, str(path), stage], check=False)
    assert proc.returncode == -signal.SIGKILL
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    # Killed before the new file took the name: the old state; after: the new one. Never neither.
    assert fresh.query_offset("G", "T", 0) == (2 if stage == "renamed" else 1)
    if stage == "rotated":
        assert not path.exists()  # the window the .bak fallback exists for
    # The next persist recovers the normal layout.
    fresh.commit_offset("G", "T", 0, 3)
    fresh.persist()
    again = ConsumerOffsetManager(path)
    assert again.load() and again.query_offset("G", "T", 0) == 3


def test_background_thread_persists_periodically(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path, flush_interval_ms=20, start_thread=True)
    try:
        m.commit_offset("G", "T", 0, 42)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if path.exists() and decode_offsets(path.read_text())[0] == {"T@G": {0: 42}}:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the offset was not persisted by the background thread")
        m.commit_offset("G", "T", 0, 43)
    finally:
        m.close()  # stops the thread and persists the last commit
    assert decode_offsets(path.read_text())[0] == {"T@G": {0: 43}}
    assert not any(t.name == "ConsumerOffsetFlush" for t in threading.enumerate())
    with pytest.raises(ValueError):
        ConsumerOffsetManager(path, flush_interval_ms=0)


def test_concurrent_commits_and_persists_stay_consistent(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path)

    def committer(q: int) -> None:
        for off in range(1, 501):
            m.commit_offset("G", "T", q, off)
            if off % 50 == 0:
                m.persist(sync=False)

    threads = [threading.Thread(target=committer, args=(q,)) for q in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m.persist()
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    assert fresh.query_offsets("G", "T") == {0: 500, 1: 500, 2: 500, 3: 500}


def test_reset_offset_by_time(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", SMALL) as store:
        for i in range(20):
            store.put("T", b"m%d" % i, queue_id=i % 2)
            if i == 9:
                time.sleep(0.01)
        assert store.wait_dispatched()
        # Message 10 (queue 0, offset 5) is the first after the pause; millisecond clocks may put
        # message 11 in a later millisecond, so the cut is message 10's own time.
        cut = store.get_message_store_timestamp("T", 0, 5)
        m = ConsumerOffsetManager(tmp_path / "o.json")
        m.commit_offset("G", "T", 0, 8)
        m.commit_offset("G", "T", 1, 2)
        # Without force only queues whose target is behind the committed offset move back.
        assert m.reset_offset_by_time(store, "G", "T", cut, force=False) == {0: 5, 1: 2}
        assert m.query_offsets("G", "T") == {0: 5, 1: 2}
        # With force every queue goes to the timestamp.
        assert m.reset_offset_by_time(store, "G", "T", cut) == {0: 5, 1: 5}
        assert m.query_offset("G", "T", 1) == 5
        assert m.query_then_erase_reset_offset("G", "T", 1) == 5
        # -1 means the end; only the queues asked for change.
        assert m.reset_offset_by_time(store, "G", "T", -1, queue_ids=[0]) == {0: 10}
        assert m.query_offsets("G", "T") == {0: 10, 1: 5}
        # A timestamp before everything goes to the first message.
        assert m.reset_offset_by_time(store, "G", "T", 0) == {0: 0, 1: 0}


def test_persisted_file_is_readable_by_a_context_manager_exit(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    with ConsumerOffsetManager(path, flush_interval_ms=10_000, start_thread=True) as m:
        m.commit_offset("G", "T", 3, 9)
    assert decode_offsets(path.read_text(encoding="utf-8"))[0] == {"T@G": {3: 9}}
    os.remove(path)


# -- the commit journal -------------------------------------------------------------------------------------

JOURNAL_CHILD = """
import os, signal, sys
import rmq.offsets as o
m = o.ConsumerOffsetManager(sys.argv[1])
assert m.load()
for off in range(1, 101):
    m.commit_offset("G", "T", off % 4, off, journal=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_journaled_commits_survive_sigkill_without_a_persist(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    proc = subprocess.run([sys.executable, "-c", JOURNAL_CHILD, str(path)], check=False)
    assert proc.returncode == -signal.SIGKILL
    assert not path.exists() and (tmp_path / "config" / "consumerOffset.json.journal").exists()
    m = ConsumerOffsetManager(path)
    assert m.load()
    assert m.query_offsets("G", "T") == {1: 97, 2: 98, 3: 99, 0: 100}
    # A persist folds the journal into the snapshot and removes it.
    m.persist()
    assert not m.journal_path.exists()
    assert decode_offsets(path.read_text())[0] == {"T@G": {0: 100, 1: 97, 2: 98, 3: 99}}


def test_journal_replays_only_commits_after_the_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("G", "T", 0, 5, journal=True)
    m.persist()  # snapshot, data version 1; the journal is folded in
    m.commit_offset("G", "T", 0, 7, journal=True)
    m.commit_offset("G", "T", 1, 3, journal=True)
    with open(m.journal_path, "ab") as f:
        f.write(_native.encode_journal_entry(0, "G", "T", 0, 1))  # a stale line from before the snapshot: ignored
        f.write(_native.encode_journal_entry(1, "G", "T", 1, 4)[:-3])  # a torn last line: skipped
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    assert fresh.query_offsets("G", "T") == {0: 7, 1: 3}


def test_big_journal_is_folded_into_a_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rmq.offsets

    monkeypatch.setattr(rmq.offsets, "JOURNAL_COMPACT_BYTES", 200)
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path)
    for off in range(50):
        m.commit_offset("G", "T", 0, off, journal=True)
    assert path.exists()
    assert not m.journal_path.exists() or m.journal_path.stat().st_size <= 200
    fresh = ConsumerOffsetManager(path)
    assert fresh.load() and fresh.query_offset("G", "T", 0) == 49
    m.close()
    assert not m.journal_path.exists()


# -- argument checks and robust loading (issue 15) ------------------------------------------------------------

#: Arguments a careless or hostile caller may pass where a name, a queue id or an offset belongs.
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.sampled_from([-(2**63), 2**63 - 1, -(2**31), 2**31 - 1, 2**31, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["", "G", "T", "a@b", "\ud800", "x\udfff", 'q"\\\n', "\x00\x7f"]),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
)
commit_args = st.tuples(
    st.one_of(st.sampled_from(["G", "G2", "组"]), hostile),
    st.one_of(st.sampled_from(["T", "%RETRY%G", 'T"x\u00e9\n']), hostile),
    st.one_of(st.integers(0, 40), hostile),
    st.one_of(st.integers(-2, 1000), hostile),
)


@given(st.lists(commit_args, min_size=1, max_size=25), st.booleans())
@settings(max_examples=300, deadline=None)
def test_commits_either_raise_typed_or_round_trip_through_persist_and_load(
    tmp_path_factory: pytest.TempPathFactory, commits: list[tuple[object, object, object, object]], journal: bool
) -> None:
    """Every commit is either rejected with an rmq error (TypeError/ValueError too) that changes nothing, or
    accepted; then `persist()` writes a file that `load()` reads back whole, with nothing left out."""
    path = tmp_path_factory.mktemp("rt") / "consumerOffset.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("Keep", "Kept", 0, 7)
    for group, topic, queue_id, offset in commits:
        before = m.table()
        try:
            m.commit_offset(group, topic, queue_id, offset, journal=journal)  # type: ignore[arg-type]
        except (rmq.ArgumentTypeError, rmq.InvalidArgumentError) as e:
            assert isinstance(e, TypeError | ValueError)
            assert m.table() == before
    m.persist()
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    assert fresh.load_issues == []
    assert fresh.table() == m.table()
    assert fresh.query_offset("Keep", "Kept", 0) == 7


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("G", "T", 2**63, 1), rmq.InvalidArgumentError),
        (("G", "T", -1, 1), rmq.InvalidArgumentError),
        (("G", "T", None, 1), rmq.ArgumentTypeError),
        (("G", "T", True, 1), rmq.ArgumentTypeError),
        (("G", "T", 0, 1.5), rmq.ArgumentTypeError),
        (("G", "T", 0, None), rmq.ArgumentTypeError),
        (("G", "T", 0, 2**63), rmq.InvalidArgumentError),
        (("G\ud800", "T", 0, 1), rmq.InvalidArgumentError),
        (("G", "a@b", 0, 1), rmq.InvalidArgumentError),
        ((None, "T", 0, 1), rmq.ArgumentTypeError),
        (("", "T", 0, 1), rmq.InvalidArgumentError),
    ],
)
def test_one_bad_commit_no_longer_erases_every_group(tmp_path: Path, args: tuple[object, ...], error: type) -> None:
    """Issue 15, item 5: each of these was accepted, then persist() wrote it and load() dropped every group."""
    path = tmp_path / "consumerOffset.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("GID_A", "TopicTest", 0, 250)
    m.persist()
    with pytest.raises(error):
        m.commit_offset(*args)  # type: ignore[arg-type]
    with pytest.raises(error):
        m.commit_pull_offset(*args)  # type: ignore[arg-type]
    m.commit_offset("G2", "Orders", 1, 5)
    m.persist()
    m.persist()
    fresh = ConsumerOffsetManager(path)
    assert fresh.load() and fresh.load_issues == []
    assert fresh.table() == {"TopicTest@GID_A": {0: 250}, "Orders@G2": {1: 5}}


def test_lookups_and_maintenance_reject_wrong_types(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "o.json")
    m.commit_offset("G", "T", 0, 1)
    calls = [
        (lambda: m.query_offset("G", "T", "0"), rmq.ArgumentTypeError),
        (lambda: m.query_offset(1, "T", 0), rmq.ArgumentTypeError),
        (lambda: m.query_offsets("G", None), rmq.ArgumentTypeError),
        (lambda: m.has_reset_offset("G", "T", 2**40), rmq.InvalidArgumentError),
        (lambda: m.assign_reset_offset("G", "T", 0, 1.0), rmq.ArgumentTypeError),
        (lambda: m.assign_reset_offset("G", "T", 2**31, 1), rmq.InvalidArgumentError),
        (lambda: m.remove_group(b"G"), rmq.ArgumentTypeError),
        (lambda: m.clean_topic(None), rmq.ArgumentTypeError),
        (lambda: m.topics_of(3), rmq.ArgumentTypeError),
        (lambda: m.persist(sync="no"), rmq.ArgumentTypeError),
        (lambda: m.commit_offset("G", "T", 0, 1, journal=1), rmq.ArgumentTypeError),
        (lambda: ConsumerOffsetManager(tmp_path / "x", flush_interval_ms=float("nan")), rmq.ArgumentTypeError),
        (lambda: ConsumerOffsetManager(tmp_path / "x", flush_interval_ms=-5), rmq.InvalidArgumentError),
        (lambda: ConsumerOffsetManager(None), rmq.ArgumentTypeError),
    ]
    for call, error in calls:
        with pytest.raises(error):
            call()
    assert m.table() == {"T@G": {0: 1}} and not m.has_reset_offset("G", "T", 0)


def _two_groups(path: Path) -> ConsumerOffsetManager:
    m = ConsumerOffsetManager(path)
    m.commit_offset("GA", "T", 0, 10)
    m.commit_offset("GA", "T", 1, 11)
    m.commit_offset("GB", "T", 0, 20)
    m.persist()  # the .bak-to-be
    m.commit_offset("GA", "T", 0, 12)
    m.commit_offset("GA", "T", 1, 13)
    m.commit_offset("GB", "T", 0, 22)
    m.persist()
    return m


def test_one_damaged_entry_keeps_every_good_one_and_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "consumerOffset.json"
    _two_groups(path)
    text = path.read_text()
    assert "{0:12,1:13" in text
    path.write_text(text.replace("{0:12,1:13", "{0:12,1:1x3".replace("x", ".")))  # queue 1 of GA: 1.3
    fresh = ConsumerOffsetManager(path)
    with caplog.at_level("WARNING", logger="rmq.offsets"):
        assert fresh.load()
    # GB and GA's queue 0 come from the file; GA's damaged queue 1 from the backup (older: redelivery, no loss).
    assert fresh.table() == {"T@GA": {0: 12, 1: 11}, "T@GB": {0: 22}}
    assert [(i.file, i.key) for i in fresh.load_issues] == [(str(path), "T@GA")]
    assert "1.3" in fresh.load_issues[0].reason
    assert any("T@GA" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t.replace('"T@GB":{0:22\n\t\t}', '"T@GB":[0,22]'),  # an entry that is not an object
        lambda t: t.replace('"T@GB":{0:22', '"T@GB":{0:"x"'),  # an offset that is a string
        lambda t: t.replace('"T@GB":{0:22', '"T@GB":{99999999999:22'),  # a queue id beyond a Java int
        lambda t: t.replace('"T@GB"', '"T@G\\uD800"'),  # a key holding a lone surrogate
    ],
)
def test_damaged_entries_of_every_kind_are_reported(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "consumerOffset.json"
    _two_groups(path)
    path.write_text(damage(path.read_text()))  # type: ignore[operator]
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    assert fresh.query_offsets("GA", "T") == {0: 12, 1: 13}
    assert len(fresh.load_issues) == 1 and fresh.load_issues[0].file == str(path)
    assert fresh.query_offset("GB", "T", 0) in (20, -1)  # from the backup where the damaged key is still found


def test_damaged_bak_and_missing_main_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    _two_groups(path)
    bak = tmp_path / "consumerOffset.json.bak"
    # The main file is intact: the damaged .bak is not read at all.
    bak.write_bytes(b"\x00garbage")
    fresh = ConsumerOffsetManager(path)
    assert fresh.load() and fresh.load_issues == [] and fresh.query_offset("GA", "T", 0) == 12
    # No main file and a damaged .bak: both facts reported, no crash, False (nothing loadable).
    path.unlink()
    assert not fresh.load()
    assert {i.file for i in fresh.load_issues} == {str(bak)} and fresh.table() == {}


def journal_record(payload: bytes) -> bytes:
    """A version-1 journal line for `payload`, checksum included (the format of src/offsets/journal.rs)."""
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def test_journal_format_is_header_then_checksummed_lines(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "o.json")
    m.commit_offset("G\u00e9", "T", 0, 5, journal=True)
    m.commit_offset("G", "T", 1, 6, journal=True)
    payloads = ['[0,"G\u00e9","T",0,5]'.encode(), b'[0,"G","T",1,6]']
    assert m.journal_path.read_bytes() == b"rmq-offsets-journal 1\n" + b"".join(map(journal_record, payloads))


def test_damaged_journal_lines_are_reported_and_the_good_ones_applied(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("G", "T", 0, 5, journal=True)
    m.commit_offset("G", "T", 1, 6, journal=True)
    damaged = [
        journal_record(b'[0,"G","T",2**63,1]'),  # not JSON
        journal_record(b'[0,"G","T",0,1.5]'),  # an offset that commit_offset refuses
        journal_record(b'[0,"G","T",-3,1]'),  # a negative queue id
        journal_record(b'[0,"G\\ud800","T",0,1]'),  # a lone surrogate
        journal_record(b'[0,"G@H","T",0,1]'),  # an ambiguous key
        journal_record(b"\xff\xfe"),  # not UTF-8
        journal_record(b'[0,"G","T",2,7]').replace(b",7]", b",8]"),  # a changed digit: the checksum fails
        b'[0,"G","T",2,9]\n',  # no checksum
    ]
    with open(m.journal_path, "ab") as f:
        at = f.tell()
        starts = []
        for line in damaged:
            starts.append(at)
            f.write(line)
            at += len(line)
        f.write(journal_record(b'[0,"G","T",3,9]'))  # good
        f.write(journal_record(b'[0,"G","T",4,1]')[:-1])  # torn last line
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    assert fresh.query_offsets("G", "T") == {0: 5, 1: 6, 3: 9}
    issues = fresh.load_issues
    assert all(i.file == str(m.journal_path) for i in issues)
    assert [i.offset for i in issues[:-1]] == starts
    assert all("damaged line" in i.reason for i in issues[:-1])
    assert "torn last line" in issues[-1].reason and issues[-1].offset == at + len(journal_record(b'[0,"G","T",3,9]'))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_damaged_journal_never_yields_an_offset_nobody_committed(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Flip, zero or scribble over any bytes of a journal: every offset loads as committed or as the snapshot had
    it (older), and whatever went back is reported with the journal's name and a byte offset."""
    path = tmp_path_factory.mktemp("journal") / "o.json"
    m = ConsumerOffsetManager(path)
    for q in range(4):
        m.commit_offset("G", "T", q, 100 + q)
    m.persist()
    for q in range(4):
        m.commit_offset("G", "T", q, 200 + q, journal=True)
    raw = bytearray(m.journal_path.read_bytes())
    at = data.draw(st.integers(0, len(raw) - 1), label="at")
    how = data.draw(st.sampled_from(["flip", "zero", "garbage"]), label="how")
    if how == "flip":
        raw[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    else:
        n = min(16, len(raw) - at)
        raw[at : at + n] = bytes(n) if how == "zero" else data.draw(st.binary(min_size=n, max_size=n), label="bytes")
    m.journal_path.write_bytes(bytes(raw))
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    got = fresh.query_offsets("G", "T")
    assert all(got[q] in (100 + q, 200 + q) for q in range(4)), got
    if any(got[q] != 200 + q for q in range(4)):
        assert any(i.file == str(m.journal_path) and i.offset is not None for i in fresh.load_issues)


def test_journal_written_before_version_1_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    journal = tmp_path / "o.json.journal"
    journal.write_bytes(b'[0,"G","T",0,5]\n[0,"G","T",1,6]\n')  # bare JSON lines, no header, no checksum
    m = ConsumerOffsetManager(path)
    assert m.load() and m.load_issues == []
    assert m.query_offsets("G", "T") == {0: 5, 1: 6}
    m.commit_offset("G", "T", 2, 7, journal=True)  # appended as a version-1 record
    fresh = ConsumerOffsetManager(path)
    assert fresh.load() and fresh.load_issues == []
    assert fresh.query_offsets("G", "T") == {0: 5, 1: 6, 2: 7}


def test_a_torn_tail_is_cut_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("G", "T", 0, 5, journal=True)
    with open(m.journal_path, "ab") as f:
        f.write(b"0123abcd [0,")  # what a kill during an append leaves
    for torn_header in (False, True):
        if torn_header:
            m.journal_path.write_bytes(b"rmq-offsets-jou")
        after = ConsumerOffsetManager(path)
        assert after.load()
        assert len(after.load_issues) == 1 and "torn" in after.load_issues[0].reason
        after.commit_offset("G", "T", 1, 6, journal=True)
        fresh = ConsumerOffsetManager(path)
        assert fresh.load() and fresh.load_issues == []
        assert fresh.query_offsets("G", "T") == ({1: 6} if torn_header else {0: 5, 1: 6})
        after.stop()


def test_background_flush_survives_failures_and_reports_them(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    m = ConsumerOffsetManager(path, flush_interval_ms=5)
    failed = threading.Event()
    real_persist = m.persist
    calls = {"n": 0}

    def flaky(*, sync: bool = True) -> None:
        calls["n"] += 1
        if calls["n"] <= 3:
            if calls["n"] == 3:
                failed.set()
            raise RuntimeError(f"disk on fire #{calls['n']}")
        real_persist(sync=sync)

    m.persist = flaky  # type: ignore[method-assign]
    m.commit_offset("G", "T", 0, 1)
    m.start()
    try:
        assert failed.wait(60)
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        m.stop()
    assert m.flush_failures == 3
    assert isinstance(m.last_flush_error, RuntimeError) and "#3" in str(m.last_flush_error)
    fresh = ConsumerOffsetManager(path)
    assert fresh.load() and fresh.query_offset("G", "T", 0) == 1


def test_strict_decoder_and_lenient_reader_agree_on_good_files() -> None:
    from rmq.offsets import read_offsets

    java = JAVA_FILE.read_bytes()
    decoded = read_offsets(java)
    assert decoded.issues == []
    assert (decoded.table, decoded.version) == decode_offsets(java)
    bad = read_offsets(b'{"offsetTable":{"A@G":{0:1,1:-0.5},"B@G":{2:3}}}')
    assert bad.table == {"A@G": {0: 1}, "B@G": {2: 3}} and [k for k, _ in bad.issues] == ["A@G"]
    with pytest.raises(OffsetFileError) as info:
        read_offsets(b'{"offsetTable":{"A@G":{0:1,}}}', "x.json")
    assert isinstance(info.value, rmq.CorruptionError) and (info.value.path, info.value.offset) == ("x.json", 27)


def test_a_torn_file_without_a_backup_keeps_the_entries_before_the_tear(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    m = ConsumerOffsetManager(path)
    for i in range(8):
        m.commit_offset(f"G{i}", "T", 0, 100 + i)
    m.persist()
    text = path.read_bytes()
    cut = text.index(b'"T@G5"') + 9  # inside entry G5
    path.write_bytes(text[:cut])
    fresh = ConsumerOffsetManager(path)
    assert fresh.load()
    before = text[:cut].decode()
    kept = {f"T@G{i}": {0: 100 + i} for i in range(8) if f'"T@G{i}":{{0:{100 + i}\n' in before}
    assert fresh.table() == kept and len(kept) >= 1
    assert any("salvaged" in i.reason for i in fresh.load_issues)
    # Both files torn: the main file's entries first, then what only the (older) backup still has.
    m.persist()
    m.commit_offset("G0", "T", 0, 500)
    m.persist()  # the previous file (G0 at 100) becomes .bak
    main, bak = path.read_bytes(), (tmp_path / "consumerOffset.json.bak").read_bytes()
    path.write_bytes(main[: main.index(b'"T@G1"')])
    (tmp_path / "consumerOffset.json.bak").write_bytes(bak[: bak.index(b'"T@G6"')])
    both = ConsumerOffsetManager(path)
    assert both.load()
    got = both.table()
    in_main = {k for k in got if f'"{k}"'.encode() in main[: main.index(b'"T@G1"')]}
    assert all(got[k] == m.table()[k] for k in in_main)  # newest offsets where the main file has them
    assert "T@G6" not in got or b'"T@G6"' in main[: main.index(b'"T@G1"')]
    assert len(got) > len(in_main)  # the backup filled in keys the tear took
    # Nothing readable anywhere: False, empty, and both files reported.
    path.write_bytes(b"\x00" * 40)
    (tmp_path / "consumerOffset.json.bak").write_bytes(b"{")
    nothing = ConsumerOffsetManager(path)
    assert not nothing.load() and nothing.table() == {}
    assert {i.file for i in nothing.load_issues} == {str(path), str(tmp_path / "consumerOffset.json.bak")}
