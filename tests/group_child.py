"""A member of consumer group G in its own process, for tests/test_group_kill.py.

Usage: group_child.py STORE LOG STOP MEMBER_ID [orderly]

Opens STORE read-only (the parent writes it), runs a PushConsumer of group G on topic T from the first offset, and
appends to LOG, one `os.write` a line, in the order things happen in this process:

    A <seq> <wall ns> <topic> <queue>          the registry granted the queue (seq: the registry's number)
    R <seq> <wall ns> <topic> <queue>          released (after consumption of it stopped and offsets persisted)
    C <wall ns> <topic> <queue> <queue offset> <body>   the listener consumed a message (before it returns)

It shuts down (finishing in-flight batches, committing and persisting offsets, leaving the group) when the file STOP
appears, then writes `X` and exits.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import rmq
import rmq.group
from rmq.orderly import ConsumeOrderlyStatus
from rmq.push import ConsumeFromWhere, ConsumeStatus, PushConsumer

rmq.group.HEARTBEAT_INTERVAL = 0.2
rmq.group.LEASE = 5.0


def main() -> None:
    store_dir, log_path, stop, member = sys.argv[1:5]
    # rmq's warnings (offsets moved without delivery, failed pulls) to stderr, which the test keeps in a file.
    logging.basicConfig(level=logging.WARNING, format="%(created).6f %(threadName)s %(name)s: %(message)s")
    orderly = sys.argv[5:] == ["orderly"]
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    store = rmq.MessageStore(store_dir, read_only=True)
    offsets = rmq.ConsumerOffsetManager(Path(store_dir) / "config" / "consumerOffset.json")
    offsets.load()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        for m in msgs:
            write(f"C {time.time_ns()} {m.topic} {m.queue_id} {m.queue_offset} {m.body.decode()}")
            time.sleep(0.004)
        return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        store,
        "G",
        "T",
        listener,
        offsets=offsets,
        consumer_id=member,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        consume_thread_nums=2,
        consume_message_batch_max_size=4,
        pull_batch_size=8,
        orderly=orderly,
    )

    def on_event(e: rmq.group.OwnershipEvent) -> None:
        kind = "A" if e.kind == "acquired" else "R"
        write(f"{kind} {e.seq} {time.time_ns()} {e.queue.topic} {e.queue.queue_id}")

    consumer._group.on_event = on_event
    consumer.start()
    while not os.path.exists(stop):
        time.sleep(0.05)
    consumer.shutdown()
    offsets.close()
    store.close()
    write("X")


if __name__ == "__main__":
    main()
