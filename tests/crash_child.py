"""The writer process of the kill -9 suite (tests/test_kill.py), and the message generator both sides share.

Every message is a pure function of (seed, child, put, index in the put), and its UNIQ_KEY names those four
numbers, so the parent can check any message it finds in the store, acknowledged or not, against what the
child was asked to write. After each put returns, the child appends one JSON line to the ack file with a single
`write(2)` (the kernel keeps it when the process is killed): the ack file is the oracle of what the store
acknowledged.

Run as `python crash_child.py STORE ACK_FILE JOB_JSON`. The job says which config to open the store with, the
seed and child number, and the phase the parent means to kill in (so the child announces it on stdout):

- "opening" and "opened" are printed around `MessageStore(...)`, always;
- with `announce_rolls`, "roll" is printed before a put that will cross a segment end;
- with `puts`, makes that many puts, prints "closing", closes the store, prints "closed" and waits to be killed
  (else it puts until it is killed).

"opened" and "closed" carry the seconds the open or close took, so the parent can aim its next kill.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass

TOPICS = ("KillA", "KillB")
QUEUES = 3
TAGS = (None, "TagA", "TagB", "TagC")
MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class MessageSpec:
    """One message a child writes."""

    uniq: str
    body: bytes
    tags: str | None
    keys: tuple[str, ...]


@dataclass(frozen=True)
class PutSpec:
    """One put: a single message (`batch` False) or a `put_batch` of 1-64 messages, all to one queue."""

    topic: str
    queue_id: int
    batch: bool
    messages: tuple[MessageSpec, ...]


def uniq_key(seed: int, child: int, put: int, index: int) -> str:
    return f"u{seed}.{child}.{put}.{index}"


def parse_uniq(uniq: str) -> tuple[int, int, int, int]:
    """(seed, child, put, index) from a UNIQ_KEY made by `uniq_key`; ValueError for any other string."""
    if not uniq.startswith("u"):
        raise ValueError(uniq)
    seed, child, put, index = (int(x) for x in uniq[1:].split("."))
    return seed, child, put, index


def message_spec(uniq: str) -> MessageSpec:
    """The body (1 B - 64 KiB, log-uniform), tags and keys of the message with this UNIQ_KEY."""
    rng = random.Random(uniq)
    size = min(MAX_BODY, max(1, int(2 ** rng.uniform(0, 16))))
    keys = (f"k.{uniq}",) if rng.random() < 0.7 else (f"k.{uniq}", f"k2.{uniq}")
    return MessageSpec(uniq, rng.randbytes(size), rng.choice(TAGS), keys)


def put_spec(seed: int, child: int, put: int, segment_size: int) -> PutSpec:
    """Put number `put` of child `child`. A batch's bodies stay under a third of a segment (a batch never spans
    segments), so batches of 64 messages are made of small ones."""
    rng = random.Random(f"{seed}/{child}/{put}")
    topic, queue_id = rng.choice(TOPICS), rng.randrange(QUEUES)
    if rng.random() < 0.5:
        return PutSpec(topic, queue_id, False, (message_spec(uniq_key(seed, child, put, 0)),))
    count = rng.randint(1, 64)
    messages: list[MessageSpec] = []
    total = 0
    for i in range(count):
        m = message_spec(uniq_key(seed, child, put, i))
        if messages and total + len(m.body) + 256 > segment_size // 3:
            break
        messages.append(m)
        total += len(m.body) + 256
    return PutSpec(topic, queue_id, True, tuple(messages))


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


def do_put(store: object, spec: PutSpec) -> dict[str, object]:
    """Writes `spec` and returns its ack record (what the store answered)."""
    import rmq

    assert isinstance(store, rmq.MessageStore)
    if spec.batch:
        msgs = [
            rmq.Message(m.body, tags=m.tags, keys=list(m.keys), properties={"UNIQ_KEY": m.uniq}) for m in spec.messages
        ]
        r = store.put_batch(spec.topic, msgs, queue_id=spec.queue_id)
        offsets = list(r.offsets)
    else:
        m = spec.messages[0]
        r = store.put(
            spec.topic, m.body, queue_id=spec.queue_id, tags=m.tags, keys=list(m.keys), properties={"UNIQ_KEY": m.uniq}
        )
        offsets = [r.wrote_offset]
    if r.status != rmq.PutMessageStatus.PUT_OK:
        raise RuntimeError(f"put returned {r.status.name}")
    return {
        "o": offsets,
        "t": spec.topic,
        "q": spec.queue_id,
        "qo": r.queue_offset,
        "u": [m.uniq for m in spec.messages],
        "sha": [body_digest(m.body) for m in spec.messages],
    }


def main() -> None:
    import rmq

    store_dir, ack_path, job_text = sys.argv[1:4]
    job = json.loads(job_text)
    seed, child, segment = job["seed"], job["child"], job["config"]["mapped_file_size_commit_log"]
    ack = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    print("opening", flush=True)
    start = time.monotonic()
    store = rmq.MessageStore(store_dir, rmq.StoreConfig(**job["config"]))
    print("opened %.6f" % (time.monotonic() - start), flush=True)
    put = 0
    limit = job.get("puts", -1)
    while put != limit:
        spec = put_spec(seed, child, put, segment)
        if job.get("announce_rolls"):
            need = sum(len(m.body) + 300 for m in spec.messages)
            end = store.max_offset
            if end % segment + need > segment:
                print("roll", flush=True)
        record = do_put(store, spec)
        record["c"], record["p"] = child, put
        os.write(ack, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        put += 1
    print("closing", flush=True)
    start = time.monotonic()
    store.close()
    print("closed %.6f" % (time.monotonic() - start), flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
