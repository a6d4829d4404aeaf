"""`rmq demo`: a realistic workload written into a local store and read back every way the store allows (by
offset, by queue, by key, by time), a consumer group consuming it with retries, and a summary."""

from __future__ import annotations

import collections
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

import rmq
from rmq._paths import store_destination
from rmq._progress import Progress
from rmq.offsets import ConsumerOffsetManager
from rmq.push import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer, retry_topic
from rmq.store import SCHEDULE_TOPIC

DEMO_TOPICS = ("OrderCreated", "PaymentSettled", "InventoryReserved")
#: A retry topic long enough (200 chars) to need a v2 record.
DEMO_LONG_TOPIC = "%RETRY%" + "ConsumerGroup-" + "x" * (200 - len("%RETRY%ConsumerGroup-"))
DEMO_GROUP = "demo-order-consumers"
DEMO_CONSUMED_TOPIC = DEMO_TOPICS[0]


def consume_demo(store: rmq.MessageStore, timeout: float = 60.0) -> dict[str, object]:
    """A group of three push consumers consumes everything new on `OrderCreated`; one message in 250 fails its
    first delivery, so its batch of 8 comes back through the group's retry topic after 1 s (delay level 1,
    delivered by the store's schedule service). Offsets persist to
    `<store>/config/consumerOffset.json`, so a second run consumes only what was added since."""
    offsets = ConsumerOffsetManager(store.consumer_offset_path)
    offsets.load()
    lock = threading.Lock()
    deliveries: collections.Counter[str] = collections.Counter()
    retried_ok = 0

    def listener(msgs: list[rmq.MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        nonlocal retried_ok
        with lock:
            for m in msgs:
                deliveries[ctx.consumer_id] += 1
                retried_ok += m.reconsume_times > 0
        if any(m.reconsume_times == 0 and json.loads(m.body)["seq"] % 250 == 0 for m in msgs):
            ctx.delay_level_when_next_consume = 1  # back in 1 s rather than the broker's 10 s (level 3)
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    def caught_up() -> bool:
        # Everything appended is in the consume queues first (a send-back's scheduled copy included).
        if not store.wait_dispatched(1.0):
            return False
        delay = store.delay_offsets()
        scheduled = all(
            delay.get(q + 1, 0) >= store.get_max_offset_in_queue(SCHEDULE_TOPIC, q)
            for q in store.queue_ids(SCHEDULE_TOPIC)
        )
        topics = [DEMO_CONSUMED_TOPIC, retry_topic(DEMO_GROUP)]
        return scheduled and all(
            offsets.query_offset(DEMO_GROUP, t, q) >= store.get_max_offset_in_queue(t, q)
            for t in topics
            for q in store.queue_ids(t)
        )

    consumers = [
        PushConsumer(
            store,
            DEMO_GROUP,
            DEMO_CONSUMED_TOPIC,
            listener,
            offsets=offsets,
            consumer_id=f"demo-consumer-{i}",
            consume_thread_nums=2,
            consume_message_batch_max_size=8,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        for i in range(3)
    ]
    started = time.perf_counter()
    try:
        for c in consumers:
            c.start()
        owned = {c.consumer_id: [f"{q.topic}/{q.queue_id}" for q in c.assigned_queues()] for c in consumers}
        deadline = time.monotonic() + timeout
        while not caught_up() and time.monotonic() < deadline:
            time.sleep(0.01)
        done = caught_up()
    finally:  # also on Ctrl-C: the consumers' threads must not keep the process alive
        for c in consumers:
            c.shutdown()
    elapsed = time.perf_counter() - started
    return {
        "group": DEMO_GROUP,
        "consumers": len(consumers),
        "queues_owned": owned,
        "deliveries": dict(sorted(deliveries.items())),
        "consumed": sum(c.stats.consumed for c in consumers),
        "sent_to_retry": sum(c.stats.sent_to_retry for c in consumers),
        "retries_consumed": retried_ok,
        "caught_up": done,
        "committed": {f"{t}/{q}": n for t, tq in sorted(offsets.table().items()) for q, n in sorted(tq.items())},
        "offsets_file": str(offsets.path),
        "seconds": round(elapsed, 3),
    }


def put_workload(
    store: rmq.MessageStore, messages: int, rng: random.Random
) -> tuple[list[int], list[tuple[str, str, int, int]]]:
    """Puts `messages` orders over the demo topics; returns their commitlog offsets and three samples
    (topic, order key, commitlog offset, store time) for the lookups. Shows a bar on a terminal."""
    put_offsets: list[int] = []
    samples: list[tuple[str, str, int, int]] = []
    progress = Progress("writing", total=messages, unit="msg")
    try:
        for i in range(messages):
            topic = DEMO_TOPICS[i % len(DEMO_TOPICS)]
            order = f"order-{rng.randrange(10**6):06d}"
            ipv6 = i % 7 == 0
            result = store.put(
                topic,
                json.dumps({"order": order, "amount": rng.randrange(1, 10_000), "seq": i}).encode(),
                queue_id=i % 4,
                tags=rng.choice(["created", "paid", "shipped", "标签"]),
                keys=[order, f"customer-{rng.randrange(1000)}"],
                properties={"source": "demo", "region": rng.choice(["eu", "us", "ap"])},
                born_host="[2001:db8::17]:40123" if ipv6 else f"192.168.1.{i % 250 + 1}:5{i % 1000:03d}",
            )
            put_offsets.append(result.wrote_offset)
            if i % max(1, messages // 3) == 0:
                samples.append((topic, order, result.wrote_offset, result.store_timestamp))
            progress.update(messages=1)
    finally:
        progress.close()
    return put_offsets, samples


def delete_store(store_dir: Path) -> None:
    """`--fresh`: deletes `store_dir` if it holds nothing but a store's files (or nothing), and no process holds
    the store's lock (a running broker or rmq: `StoreLockedError`). Anything else is not the demo's to delete
    (`rmq._native.remove_store` refuses a directory holding anything a store does not): `InvalidArgumentError`,
    nothing deleted."""
    if not store_dir.is_dir():
        raise rmq.InvalidArgumentError(f"--fresh: {store_dir} is not a directory; nothing was deleted")
    rmq._native.remove_store(store_dir)  # with the store's lock held


#: Commitlog segment size of a store the demo creates when none is given.
DEFAULT_SEGMENT_SIZE = 1024 * 1024


def run_demo(
    store_dir: Path, messages: int, segment_size: int | None, fresh: bool, out: TextIO | None = None
) -> dict[str, object]:
    """Writes a realistic workload into `store_dir`, reads it back, and prints a summary. Returns the summary.
    A store that exists keeps the sizes of its files (a `segment_size` that differs is said and not used); a new
    one gets `segment_size`, 1 MiB segments when None."""

    def say(text: str) -> None:
        print(text, file=out if out is not None else sys.stdout)

    if fresh and store_dir.exists():
        delete_store(store_dir)
    store_destination(store_dir, "the demo's store")  # never a store among someone's files
    log = store_dir / "commitlog"
    if log.is_dir() and any(log.iterdir()):
        config = rmq.StoreConfig.from_files(store_dir)
        if segment_size is not None and segment_size != config.mapped_file_size_commit_log:
            say(
                f"the store exists with {config.mapped_file_size_commit_log}-byte segments, which it keeps: "
                f"--segment-size {segment_size} sets a new store's (--fresh starts over)"
            )
    else:
        config = rmq.StoreConfig(mapped_file_size_commit_log=segment_size or DEFAULT_SEGMENT_SIZE)
    segment_size = config.mapped_file_size_commit_log
    rng = random.Random(42)
    started = time.perf_counter()
    with rmq.MessageStore(store_dir, config) as store:
        existing = sum(1 for _ in store.scan())
        say(f"store {store_dir} opened: {existing} messages already stored, commitlog ends at {store.max_offset}")
        put_offsets, samples = put_workload(store, messages, rng)
        batch = store.put_batch(
            "InventoryReserved",
            [rmq.Message(f"sku-{n}".encode(), tags="batch", keys=f"sku-{n}") for n in range(32)],
            queue_id=1,
        )
        retry = store.put(DEMO_LONG_TOPIC, b"redelivered", tags="retry", reconsume_times=1)
        dispatched = store.wait_dispatched(60)

        # Look messages up by key (the index) and by time (binary search in a consume queue).
        by_key = []
        for topic, order, offset, _ in samples:
            hits = store.query_message(topic, order, 32).messages
            by_key.append((topic, order, [m.commitlog_offset for m in hits], offset))
        by_time = []
        for topic, _, offset, stamp in samples:
            msg = store.read(offset)
            assert msg is not None
            q = msg.queue_id
            lower = store.get_offset_in_queue_by_time(topic, q, stamp, rmq.BoundaryType.LOWER)
            upper = store.get_offset_in_queue_by_time(topic, q, stamp, rmq.BoundaryType.UPPER)
            by_time.append((topic, q, stamp, lower, upper, msg.queue_offset))
        cq_max = {(t, q): store.get_max_offset_in_queue(t, q) for t in store.topics() for q in store.queue_ids(t)}
        index_files = len(store.index_files())

        per_queue: collections.Counter[tuple[str, int]] = collections.Counter()
        total_bytes = 0
        ipv6_hosts = 0
        crc_ok = 0
        scanned = 0
        for msg in store.scan():
            scanned += 1
            per_queue[(msg.topic, msg.queue_id)] += 1
            total_bytes += msg.store_size
            ipv6_hosts += msg.born_host.startswith("[")
            crc_ok += msg.body_crc_ok
        consumed = consume_demo(store)
        first = store.read(put_offsets[0]) if put_offsets else None
        long_msg = store.read(retry.wrote_offset)
        assert long_msg is not None
        files = store.commitlog_files()
        elapsed = time.perf_counter() - started
        summary: dict[str, object] = {
            "store": str(store_dir),
            "messages_before": existing,
            "messages_written": messages + batch.msg_num + 1,
            "messages_scanned": scanned,
            "bytes": total_bytes,
            "segments": len(files),
            "queues": len(per_queue),
            "ipv6_born_hosts": ipv6_hosts,
            "body_crc_ok": crc_ok,
            "long_topic_record_version": long_msg.version,
            "max_offset": store.max_offset,
            "dispatched": dispatched,
            "consume_queue_max_offsets": {f"{t}/{q}": n for (t, q), n in sorted(cq_max.items())},
            "key_lookups_ok": all(offset in hit_offsets for _, _, hit_offsets, offset in by_key),
            "time_lookups_ok": all(lo <= qo <= up for *_, lo, up, qo in by_time),
            "index_files": index_files,
            "consumer_group": consumed,
        }
    say(f"wrote {summary['messages_written']} messages ({messages} single puts, a batch of {batch.msg_num}, ")
    say(f"  one {len(DEMO_LONG_TOPIC)}-char retry topic stored as a v{summary['long_topic_record_version']} record)")
    say(f"scanned {scanned} messages, {total_bytes} bytes in {len(files)} segment(s) of {segment_size} bytes")
    say(f"all body CRCs valid: {crc_ok == scanned}; IPv6 born hosts: {ipv6_hosts}")
    say("messages per (topic, queue), and the consume queue's max offset after dispatch:")
    for (topic, queue), count in sorted(per_queue.items()):
        shown = topic if len(topic) <= 40 else topic[:37] + "..."
        say(f"  {shown:<40} q{queue:<3} {count:>6}   cq max {cq_max.get((topic, queue), 0):>6}")
    say(f"index: {index_files} file(s); lookups by key:")
    for topic, order, hit_offsets, offset in by_key:
        say(f"  {topic}#{order} -> commitlog offsets {hit_offsets} (put at {offset})")
    say("lookups by store time (LOWER = first at/after, UPPER = last at/before):")
    for topic, q, stamp, lower, upper, qo in by_time:
        say(f"  {topic}/q{q} at {stamp}: LOWER {lower}, UPPER {upper} (the message put then: queue offset {qo})")
    if first is not None:
        say(f"first message of this run: msg_id={first.msg_id} uniq_key={first.uniq_key}")
        say(f"  topic={first.topic} queue={first.queue_id}/{first.queue_offset} tags={first.tags} keys={first.keys}")
        say(f"  born_host={first.born_host} store_host={first.store_host} properties={first.properties}")
    owned = consumed["queues_owned"]
    assert isinstance(owned, dict)
    say(f"consumer group {DEMO_GROUP}: {len(owned)} push consumers on {DEMO_CONSUMED_TOPIC}, queues shared:")
    for cid, queues in owned.items():
        say(f"  {cid}: {', '.join(queues) or '-'}")
    say(
        f"  consumed {consumed['consumed']} messages in {consumed['seconds']}s; {consumed['sent_to_retry']} (whole"
        f" batches around a failing message) went to {retry_topic(DEMO_GROUP)} 1 s later and were consumed again;"
        f" caught up: {consumed['caught_up']}"
    )
    say(f"  committed offsets in {consumed['offsets_file']}: {consumed['committed']}")
    say(f"done in {elapsed:.2f}s")
    return summary
