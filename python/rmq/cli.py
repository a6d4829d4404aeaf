"""The `rmq` command: `rmq demo` (the end-to-end demo), `rmq scan` (print a store's messages) and `rmq describe`
(a store's canonical description, as the interop harness prints it)."""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import rmq
from rmq.offsets import ConsumerOffsetManager
from rmq.push import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer, retry_topic

DEMO_TOPICS = ("OrderCreated", "PaymentSettled", "InventoryReserved")
#: A retry topic long enough (200 chars) to need a v2 record.
DEMO_LONG_TOPIC = "%RETRY%" + "ConsumerGroup-" + "x" * (200 - len("%RETRY%ConsumerGroup-"))
DEMO_GROUP = "demo-order-consumers"
DEMO_CONSUMED_TOPIC = DEMO_TOPICS[0]


def consume_demo(store: rmq.MessageStore, timeout: float = 60.0) -> dict[str, object]:
    """A group of three push consumers consumes everything new on `OrderCreated`; one message in 250 fails its
    first delivery, so its batch of 8 comes back through the group's retry topic. Offsets persist to
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
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    def caught_up() -> bool:
        topics = [DEMO_CONSUMED_TOPIC, retry_topic(DEMO_GROUP)]
        return all(
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
    for c in consumers:
        c.start()
    owned = {c.consumer_id: [f"{q.topic}/{q.queue_id}" for q in c.assigned_queues()] for c in consumers}
    deadline = time.monotonic() + timeout
    while not caught_up() and time.monotonic() < deadline:
        time.sleep(0.01)
    done = caught_up()
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


def run_demo(
    store_dir: Path, messages: int, segment_size: int, fresh: bool, out: TextIO | None = None
) -> dict[str, object]:
    """Writes a realistic workload into `store_dir`, reads it back, and prints a summary. Returns the summary."""

    def say(text: str) -> None:
        print(text, file=out if out is not None else sys.stdout)

    if fresh and store_dir.exists():
        shutil.rmtree(store_dir)
    config = rmq.StoreConfig(mapped_file_size_commit_log=segment_size)
    rng = random.Random(42)
    started = time.perf_counter()
    with rmq.MessageStore(store_dir, config) as store:
        existing = sum(1 for _ in store.scan())
        say(f"store {store_dir} opened: {existing} messages already stored, commitlog ends at {store.max_offset}")
        put_offsets: list[int] = []
        samples: list[tuple[str, str, int, int]] = []  # (topic, order key, commitlog offset, store time)
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
        f" batches around a failing message) went to {retry_topic(DEMO_GROUP)} and were consumed again;"
        f" caught up: {consumed['caught_up']}"
    )
    say(f"  committed offsets in {consumed['offsets_file']}: {consumed['committed']}")
    say(f"done in {elapsed:.2f}s")
    return summary


def run_spark(store: Path, out: Path, master: str | None, json_out: Path | None = None) -> dict[str, object]:
    """The Spark pipeline job (`rmq.spark.run_pipeline`) in a session of its own; prints the summary."""
    from rmq import spark as rspark  # needs the `spark` extra; imported only here

    print(f"Spark job over {store} (master {master or os.environ.get('SPARK_MASTER', 'local[*]')}) ...")
    started = time.perf_counter()
    session = rspark.session(master)
    try:
        result = rspark.run_pipeline(session, store, out)
        result["executors"] = rspark.executor_ids(session)
    finally:
        session.stop()
    rspark.print_summary(result, out)
    print(f"Spark job done in {time.perf_counter() - started:.1f}s")
    if json_out is not None:
        json_out.write_text(json.dumps(result, default=str, ensure_ascii=False, indent=1), encoding="utf-8")
    return result


def existing_segment_size(store_dir: Path) -> int:
    """The segment size of an existing store (the size of its first commitlog file).

    Raises `FileNotFoundError` when `store_dir` holds no commitlog, so a mistyped path creates nothing.
    """
    files = sorted(p for p in (store_dir / "commitlog").glob("*") if p.is_file()) if store_dir.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no commitlog segments under {store_dir / 'commitlog'}")
    return files[0].stat().st_size


def existing_store_config(
    store_dir: Path, max_hash_slot_num: int | None = None, max_index_num: int | None = None
) -> rmq.StoreConfig:
    """The file sizes of an existing store, read off its files.

    The commitlog and consume-queue sizes are those of the first files. An index file's size is
    40 + 4 * slots + 20 * entries. A full index file (any but the newest) has indexCount = maxIndexNum in its
    header, which fixes both; with only one file, RocketMQ's default ratio (entries = 4 * slots) is assumed.
    Give them when neither applies.
    """
    kwargs: dict[str, object] = {"mapped_file_size_commit_log": existing_segment_size(store_dir)}
    cq = sorted(p for p in (store_dir / "consumequeue").glob("*/*/*") if p.is_file())
    if cq:
        kwargs["mapped_file_size_consume_queue"] = cq[0].stat().st_size
    index = sorted(p for p in (store_dir / "index").glob("*") if p.is_file() and p.stat().st_size > 0)
    if max_hash_slot_num is None and max_index_num is None and index:
        body = index[0].stat().st_size - 40
        with open(index[0], "rb") as f:
            header = f.read(40)
        full_count = int.from_bytes(header[36:40], "big", signed=True) if len(index) > 1 and len(header) == 40 else 0
        if full_count > 0 and body - 20 * full_count > 0 and (body - 20 * full_count) % 4 == 0:
            max_hash_slot_num, max_index_num = (body - 20 * full_count) // 4, full_count
        elif body > 0 and body % 84 == 0:
            max_hash_slot_num, max_index_num = body // 84, body // 84 * 4
        else:
            raise rmq.InvalidConfigError(
                f"cannot tell the index sizes from {index[0]}: give --max-hash-slot-num and --max-index-num"
            )
    if max_hash_slot_num is not None:
        kwargs["max_hash_slot_num"] = max_hash_slot_num
    if max_index_num is not None:
        kwargs["max_index_num"] = max_index_num
    return rmq.StoreConfig(**kwargs)  # type: ignore[arg-type]


def run_describe(store_dir: Path, config: rmq.StoreConfig, out: TextIO | None = None) -> int:
    """Prints the canonical description of a store (`rmq.describe`) as JSON lines; returns the line count."""
    from rmq.describe import describe

    out = out if out is not None else sys.stdout
    count = 0
    with rmq.MessageStore(store_dir, config, read_only=True) as store:
        for obj in describe(store):
            print(json.dumps(obj, ensure_ascii=False, sort_keys=True), file=out)
            count += 1
    return count


def run_scan(
    store_dir: Path,
    from_offset: int,
    limit: int | None,
    out: TextIO | None = None,
    config: rmq.StoreConfig | None = None,
) -> int:
    """Prints one JSON line per stored message of an existing store; returns the number printed."""
    out = out if out is not None else sys.stdout
    count = 0
    config = config if config is not None else existing_store_config(store_dir)
    with rmq.MessageStore(store_dir, config, read_only=True) as store:
        for msg in store.scan(from_offset):
            if limit is not None and count >= limit:
                break
            line = {
                "topic": msg.topic,
                "queue_id": msg.queue_id,
                "queue_offset": msg.queue_offset,
                "commitlog_offset": msg.commitlog_offset,
                "store_size": msg.store_size,
                "msg_id": msg.msg_id,
                "born_host": msg.born_host,
                "store_host": msg.store_host,
                "born_timestamp": msg.born_timestamp,
                "store_timestamp": msg.store_timestamp,
                "sys_flag": msg.sys_flag,
                "properties": msg.properties,
                "body_len": len(msg.body_view),
            }
            print(json.dumps(line, ensure_ascii=False), file=out)
            count += 1
    return count


def _when(text: str) -> dt.datetime:
    """A store time given as epoch milliseconds or ISO 8601 (local time when no zone is given)."""
    try:
        if text.isdigit():
            return dt.datetime.fromtimestamp(int(text) / 1000, tz=dt.UTC)
        return dt.datetime.fromisoformat(text)
    except (ValueError, OverflowError) as e:
        raise argparse.ArgumentTypeError(f"not a time (ISO 8601 or epoch ms): {text!r}") from e


def _run_export(args: argparse.Namespace, config: rmq.StoreConfig) -> int:
    from rmq.export import Selection, export, replay

    sel = Selection(
        topics=args.topic,
        queue_id=args.queue,
        tag=args.tag,
        key=args.key,
        msg_id=args.msg_id,
        since=args.since,
        until=args.until,
        grep=args.grep,
        from_offset=args.from_offset,
        to_offset=args.to_offset,
    )
    if args.command == "export":
        n = export(args.store, args.out, args.format, sel)
        print(f"exported {n} messages to {args.out}", file=sys.stderr)
        return 0
    with rmq.MessageStore(args.dst, config) as dst:
        n = replay(args.store, dst, sel, to_topic=args.to_topic)
    print(f"replayed {n} messages into {args.dst}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmq", description="RocketMQ-compatible message store")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="write a realistic workload into a local store and read it back")
    demo.add_argument("--store", type=Path, default=Path("rmq-demo-store"), help="store directory")
    demo.add_argument("--messages", type=int, default=10_000, help="single puts to make")
    demo.add_argument("--segment-size", type=int, default=1024 * 1024, help="commitlog segment size, bytes")
    demo.add_argument("--fresh", action="store_true", help="delete the store directory first")
    scan = sub.add_parser("scan", help="print every message of a store as JSON lines")
    scan.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    scan.add_argument("--from", dest="from_offset", type=int, default=0, help="commitlog offset to start at")
    scan.add_argument("--limit", type=int, default=None, help="stop after this many messages")
    demo.add_argument("--no-spark", dest="spark", action="store_false", help="skip the Spark job at the end")
    demo.add_argument("--spark-out", type=Path, default=Path("rmq-demo-parquet"), help="the Spark job's output")
    demo.add_argument("--master", default=None, help="Spark master URL (default local[*] or $SPARK_MASTER)")
    spark = sub.add_parser("spark", help="Spark job: store -> Parquet by topic and day, plus summaries")
    spark.add_argument("store", type=Path, help="store root or commitlog directory")
    spark.add_argument("out", type=Path, help="output directory")
    spark.add_argument("--master", default=None, help="Spark master URL (default local[*] or $SPARK_MASTER)")
    spark.add_argument("--json", type=Path, default=None, help="also write the summaries as JSON here")
    desc = sub.add_parser("describe", help="print a store's canonical description (tests/interop/README.md)")
    desc.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    chk = sub.add_parser("check", help="read-only consistency report; exit 0 clean, 1 problems, 2 unreadable")
    chk.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    chk.add_argument("--json", action="store_true", help="one JSON object instead of text")
    dump = sub.add_parser("dump", help="every field of every record as JSON lines (or --cq, --index, --checkpoint)")
    dump.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    part = dump.add_mutually_exclusive_group()
    for name in ("cq", "index", "checkpoint"):
        part.add_argument(f"--{name}", dest="part", action="store_const", const=name, help=f"dump the {name} files")
    exp = sub.add_parser("export", help="selected messages to a JSON-lines, Parquet or CSV file")
    exp.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    exp.add_argument("out", type=Path, help="output file")
    exp.add_argument("--format", choices=("jsonl", "parquet", "csv"), default="jsonl")
    rep = sub.add_parser("replay", help="append selected messages of one store to another")
    rep.add_argument("store", type=Path, help="source store root")
    rep.add_argument("dst", type=Path, help="destination store root (created if missing)")
    rep.add_argument("--to-topic", default=None, help="put them into this topic instead of their own")
    for p in (exp, rep):
        p.add_argument("--topic", action="append", default=None, help="only this topic (repeatable)")
        p.add_argument("--queue", type=int, default=None, help="only this queue id")
        p.add_argument("--tag", default=None, help="only messages with this tag")
        p.add_argument("--key", default=None, help="only messages with this key (KEYS token or UNIQ_KEY)")
        p.add_argument("--msg-id", default=None, help="only the message with this offsetMsgId or UNIQ_KEY")
        p.add_argument("--since", type=_when, default=None, help="store time from (ISO 8601 or epoch ms)")
        p.add_argument("--until", type=_when, default=None, help="store time before (ISO 8601 or epoch ms)")
        p.add_argument("--grep", default=None, help="only messages whose body matches this regular expression")
        p.add_argument("--from-offset", type=int, default=None, help="commitlog offset from")
        p.add_argument("--to-offset", type=int, default=None, help="commitlog offset before")
    for p in (scan, desc, chk, dump, exp, rep):
        p.add_argument("--max-hash-slot-num", type=int, default=None, help="index slots (if not the default ratio)")
        p.add_argument("--max-index-num", type=int, default=None, help="index entries (if not the default ratio)")
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            run_demo(args.store, args.messages, args.segment_size, args.fresh)
            if args.spark:
                run_spark(args.store, args.spark_out, args.master)
        elif args.command == "spark":
            run_spark(args.store, args.out, args.master, args.json)
        else:
            config = existing_store_config(args.store, args.max_hash_slot_num, args.max_index_num)
            if args.command in ("export", "replay"):
                return _run_export(args, config)
            if args.command == "dump":
                from rmq.dump import run_dump

                run_dump(args.store, config, args.part or "records")
                return 0
            if args.command == "check":
                from rmq.check import UNREADABLE, run_check

                try:
                    return run_check(args.store, config, args.json)
                except rmq.RmqError as e:
                    print(f"rmq: {e}", file=sys.stderr)
                    return UNREADABLE
            if args.command == "scan":
                run_scan(args.store, args.from_offset, args.limit, config=config)
            else:
                run_describe(args.store, config)
    except (rmq.RmqError, FileNotFoundError) as e:
        print(f"rmq: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `rmq describe STORE | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
