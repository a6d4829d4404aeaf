"""The `rmq` command: `rmq demo` writes and reads back a workload, `rmq scan` prints a store as JSON lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import rmq
from rmq import cli
from rmq.offsets import ConsumerOffsetManager


def test_demo_writes_reads_back_and_appends_on_a_second_run(tmp_path: Path) -> None:
    store = tmp_path / "demo"
    first = cli.run_demo(store, messages=300, segment_size=64 * 1024, fresh=True, out=io.StringIO())
    assert first["messages_before"] == 0 and first["messages_written"] == 300 + 32 + 1
    assert first["messages_scanned"] == first["messages_written"] == first["body_crc_ok"]
    segments = first["segments"]
    assert first["long_topic_record_version"] == 2 and isinstance(segments, int) and segments > 1
    # Dispatch caught up: each consume queue holds every message of its queue; key and time lookups agree.
    assert first["dispatched"] and first["key_lookups_ok"] and first["time_lookups_ok"]
    cq_max = first["consume_queue_max_offsets"]
    assert isinstance(cq_max, dict) and sum(cq_max.values()) == first["messages_written"]
    assert first["index_files"] == 1
    out = io.StringIO()
    second = cli.run_demo(store, messages=10, segment_size=64 * 1024, fresh=False, out=out)
    g1 = first["consumer_group"]
    assert isinstance(g1, dict)
    retried = g1["sent_to_retry"]
    assert isinstance(retried, int)
    # The first run's consumers added its retried messages to the store after the scan.
    assert second["messages_before"] == first["messages_scanned"] + retried
    assert second["messages_scanned"] == second["messages_before"] + 10 + 32 + 1
    cq_max = second["consume_queue_max_offsets"]
    assert isinstance(cq_max, dict) and sum(cq_max.values()) == second["messages_scanned"]
    assert "v2 record" in out.getvalue()
    # The consumer group: a first run consumes all 100 OrderCreated messages; the second only the 4 new ones.
    g2 = second["consumer_group"]
    assert isinstance(g2, dict)
    assert g1["caught_up"] and g2["caught_up"]
    assert g1["consumed"] == 100 and g2["consumed"] == 4
    # seq 0 fails its first delivery (seq 250 is not an OrderCreated message of a 300-message run).
    sent = g1["sent_to_retry"]
    assert isinstance(sent, int) and 1 <= sent <= 8 and g1["retries_consumed"] == sent
    owned = g1["queues_owned"]
    assert isinstance(owned, dict) and len(owned) == 3
    all_owned = [q for qs in owned.values() for q in qs]
    assert sorted(all_owned) == sorted({*all_owned}) and len(all_owned) == 5  # 4 queues + the retry queue
    reloaded = ConsumerOffsetManager(store / "config" / "consumerOffset.json")
    assert reloaded.load()
    assert sum(reloaded.query_offsets("demo-order-consumers", "OrderCreated").values()) == 104
    assert reloaded.query_offsets("demo-order-consumers", "%RETRY%demo-order-consumers") == {
        0: sent + g2["sent_to_retry"]
    }


def scan_lines(store: Path, from_offset: int = 0, limit: int | None = None) -> list[dict[str, object]]:
    out = io.StringIO()
    count = cli.run_scan(store, from_offset, limit, out=out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == count
    return lines


def test_scan_prints_one_json_line_per_message(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s") as store:  # the default segment size, which `rmq scan` assumes
        offsets = [store.put("T", b"%d" % i, tags="标签", queue_id=i % 2).wrote_offset for i in range(5)]
    lines = scan_lines(tmp_path / "s")
    assert [x["commitlog_offset"] for x in lines] == offsets
    assert [x["queue_offset"] for x in lines] == [0, 0, 1, 1, 2]
    first = lines[0]
    assert isinstance(first["properties"], dict) and first["properties"]["TAGS"] == "标签"
    assert first["body_len"] == 1 and first["msg_id"] == "7F00000100002A9F0000000000000000"
    assert [x["commitlog_offset"] for x in scan_lines(tmp_path / "s", offsets[2], 2)] == offsets[2:4]
    assert cli.main(["scan", str(tmp_path / "s"), "--limit", "0"]) == 0


def test_scan_of_a_locked_store_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with rmq.MessageStore(tmp_path / "s"):
        assert cli.main(["scan", str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rmq: ") and "locked" in err


def test_scan_reads_the_store_the_demo_writes(tmp_path: Path) -> None:
    """README: `make run` writes ./rmq-demo-store with `rmq demo` (1 MiB segments by default), and
    `rmq scan STORE` prints a store's messages. The scan must work on that store."""
    store = tmp_path / "demo"
    assert cli.main(["demo", "--store", str(store), "--messages", "20", "--fresh", "--no-spark"]) == 0
    assert cli.main(["scan", str(store)]) == 0
    lines = scan_lines(store)
    retried = [x for x in lines if x["topic"] == "%RETRY%demo-order-consumers"]
    assert 1 <= len(retried) <= 8  # the consumer group's retries: the batch around seq 0
    assert len(lines) == 20 + 32 + 1 + len(retried)


def test_scan_of_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    """A typo in the path must not leave a new, empty store behind (a read command writes nothing)."""
    missing = tmp_path / "no-such-store"
    cli.main(["scan", str(missing)])
    assert not missing.exists()


FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-5.3.1"


def test_describe_of_a_rocketmq_store_infers_its_sizes_and_matches_rocketmq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rmq describe STORE` reads the file sizes off the store (64 KiB commitlog, 160-byte consume queues,
    64 slots / 128 entries index) and prints what RocketMQ itself printed for the same store."""
    import shutil

    shutil.copytree(FIXTURE / "store", tmp_path / "store")
    config = cli.existing_store_config(tmp_path / "store")
    assert (config.mapped_file_size_commit_log, config.mapped_file_size_consume_queue) == (65536, 160)
    assert (config.max_hash_slot_num, config.max_index_num) == (64, 128)
    assert cli.main(["describe", str(tmp_path / "store")]) == 0
    ours = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    theirs = [json.loads(line) for line in (FIXTURE / "describe.jsonl").read_text(encoding="utf-8").splitlines()]
    assert ours == theirs


def test_describe_writes_hosts_as_address_bytes() -> None:
    from rmq.describe import host_hex

    assert host_hex("10.0.0.2:10911") == "0A000002:10911"
    assert host_hex("[2001:db8::2]:10911") == "20010DB8000000000000000000000002:10911"
    assert host_hex("[::ffff:127.0.0.1]:1") == "00000000000000000000FFFF7F000001:1"
