"""Retention across Apache RocketMQ 5.3.1 and rmq (`tests/interop/README.md`): a store rmq's cleanup cleaned
opens in RocketMQ, and a store RocketMQ's own `CleanCommitLogService` / `CleanConsumeQueueService` cleaned opens
in rmq; on both, every read call (min and max offset of every queue, getMessage below, at and above each
queue's range, ...) answers the same on both sides. Needs Java and Maven as the other interop tests do."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from test_interop import CONFIG, LONG_TOPIC, Run, answer_probes, java, java_stores, rmq_answers, write_matrix

import rmq

__all__ = ["java", "java_stores"]  # fixtures used by name

TOPICS = ("TopicA", "TopicB", LONG_TOPIC)


def ranges(store_dir: Path) -> dict[tuple[str, int], tuple[int, int]]:
    with rmq.MessageStore(store_dir, CONFIG) as store:
        return {
            (t, q): (store.get_min_offset_in_queue(t, q), store.get_max_offset_in_queue(t, q))
            for t in TOPICS
            for q in store.queue_ids(t)
        }


def same_answers(java: Run, store_dir: Path, tmp_path: Path) -> dict[tuple[str, int], tuple[int, int]]:
    """RocketMQ's and rmq's answers to every probe on copies of `store_dir`; returns rmq's queue ranges. A
    probe on which RocketMQ itself throws (its by-time search on a queue its cleanup emptied) is left out of
    the comparison and reported; rmq must still answer it with an offset inside the queue's range."""
    theirs_dir, ours_dir = tmp_path / "java-read", tmp_path / "rmq-read"
    shutil.copytree(store_dir, theirs_dir)
    shutil.copytree(store_dir, ours_dir)
    queues = ranges(ours_dir)
    probes = answer_probes(queues)
    probe_file = tmp_path / "probes.txt"
    probe_file.write_text("".join(f"{c} {t.encode().hex()} {q} {a}\n" for c, t, q, a in probes))
    java("answers", theirs_dir, probe_file, tmp_path / "java.jsonl")
    theirs = [json.loads(line) for line in (tmp_path / "java.jsonl").read_text().splitlines() if line.strip()]
    ours: list[dict[str, Any]] = rmq_answers(ours_dir, probes)
    threw = [(o, t) for o, t in zip(ours, theirs, strict=True) if str(t["result"]).startswith("exception ")]
    for o, _ in threw:
        lo, hi = queues.get((o["topic"], o["queueId"]), (0, 0))
        assert o["call"] in ("lower", "upper") and lo <= o["result"] <= hi, o
    differ = [(o, t) for o, t in zip(ours, theirs, strict=True) if o != t and (o, t) not in threw]
    assert not differ, f"{len(differ)} of {len(probes)} answers differ, first: {differ[:5]}"
    print(f"\n{len(probes) - len(threw)} answers equal to RocketMQ's; RocketMQ threw on {len(threw)}: {threw[:2]}")
    return queues


def test_a_store_rmq_cleaned_answers_as_in_rocketmq(java: Run, tmp_path: Path) -> None:
    store_dir = tmp_path / "rmq"
    write_matrix(store_dir)
    segments = sorted((store_dir / "commitlog").iterdir())
    cq_files = sorted(p for p in (store_dir / "consumequeue").rglob("*") if p.is_file())
    before = ranges(store_dir)
    # Every segment but the active one is expired at once; a run deletes at most two.
    config = dataclasses.replace(
        CONFIG,
        file_reserved_time=0,
        delete_file_batch_max=2,
        delete_commit_log_files_interval=0,
        delete_consume_queue_files_interval=0,
    )
    with rmq.MessageStore(store_dir, config) as store:
        done = store.delete_expired_files_now()
    assert done["commitlog"] == [str(p) for p in segments[:2]]
    assert done["min_offset"] == int(segments[2].name) and "manual" in done["reasons"]
    assert done["consume_queue"] and all(Path(p) in cq_files and not Path(p).exists() for p in done["consume_queue"])
    queues = same_answers(java, store_dir, tmp_path)
    moved = [q for q, (lo, _) in queues.items() if lo > before[q][0]]
    assert moved and all(queues[q][1] == before[q][1] for q in queues), (before, queues)
    print(f"\nrmq cleaned {len(done['commitlog'])} segments; min offsets moved on {len(moved)} queues; RocketMQ agrees")


def test_a_store_rocketmq_cleaned_answers_as_in_rmq(java: Run, java_stores: dict[str, Path], tmp_path: Path) -> None:
    store_dir = tmp_path / "java"
    shutil.copytree(java_stores["clean"], store_dir)
    segments = sorted((store_dir / "commitlog").iterdir())
    java("clean", store_dir, "2")
    assert sorted((store_dir / "commitlog").iterdir()) == segments[2:], "RocketMQ deleted the first two segments"
    queues = same_answers(java, store_dir, tmp_path)
    assert any(lo > 0 for lo, _ in queues.values()), queues
    # rmq goes on with it: writes, cleans again with its own rules, and RocketMQ still agrees.
    config = dataclasses.replace(CONFIG, file_reserved_time=0, delete_commit_log_files_interval=0)
    with rmq.MessageStore(store_dir, config) as store:
        for i in range(200):
            store.put("TopicA", b"x" * 700, queue_id=i % 4)
        store.wait_dispatched(30)
        done = store.delete_expired_files_now()
    assert done["commitlog"] and not (store_dir / "commitlog" / segments[2].name).exists()
    same_answers(java, store_dir, tmp_path / "again")
