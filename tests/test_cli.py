"""The `rmq` command: `rmq demo` writes and reads back a workload, `rmq scan` prints a store as JSON lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import rmq
from rmq import cli


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
    assert second["messages_before"] == first["messages_scanned"]
    assert second["messages_scanned"] == first["messages_scanned"] + 10 + 32 + 1
    cq_max = second["consume_queue_max_offsets"]
    assert isinstance(cq_max, dict) and sum(cq_max.values()) == second["messages_scanned"]
    assert "v2 record" in out.getvalue()


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
    assert cli.main(["demo", "--store", str(store), "--messages", "20", "--fresh"]) == 0
    assert cli.main(["scan", str(store)]) == 0
    assert len(scan_lines(store)) == 20 + 32 + 1


def test_scan_of_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    """A typo in the path must not leave a new, empty store behind (a read command writes nothing)."""
    missing = tmp_path / "no-such-store"
    cli.main(["scan", str(missing)])
    assert not missing.exists()
