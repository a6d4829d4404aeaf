"""Torn writes in any byte order: what a killed process can leave of an unacknowledged `put_batch`.

The bytes a batch appends are found by doing it on a live store and diffing its commitlog before and after;
a copy of the store as it was just before the batch (taken while it was open: abort marker, lock, derived
files as dispatched) then gets those bytes in a random order, stopping after every prefix length (a dense
sample for large batches). With the store's write protocol (a blank filler and a segment roll first, then
the records except the first 8 bytes of the first one, TOTALSIZE and MAGIC, which go last as the commit
point) every image must open with exactly the acknowledged messages, report the discarded bytes as torn,
and hand out the batch's queue offsets again. In an unconstrained order (the commit word anywhere) the store
must still open with every acknowledged message, or refuse with `CorruptionError` naming file and offset and
then open with `recovery="truncate"`; the test prints how often the default did which.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import rmq

SEG = 64 * 1024
CFG = rmq.StoreConfig(
    mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=20 * 40, max_hash_slot_num=64, max_index_num=256
)
TOPIC = "Torn"


@dataclass
class Case:
    """A store just before an unacknowledged batch, and the bytes the batch writes."""

    template: Path
    acked: list[tuple[int, str]]  # (offset, UNIQ_KEY) of every acknowledged message, in log order
    next_offsets: dict[int, int]  # queue id -> next queue offset before the batch
    batch: list[tuple[int, str]]
    queue_id: int
    writes: dict[int, int]  # commitlog offset -> byte value written by the batch (only bytes that change)
    new_files: list[int]  # segments the batch's roll created
    blank: list[int]  # offsets of the blank filler's bytes (a roll)
    commit: list[int]  # offsets of the changed bytes among the first 8 of the batch's first record


def commitlog(root: Path) -> dict[int, bytes]:
    return {int(p.name): p.read_bytes() for p in sorted((root / "commitlog").iterdir())}


def make_case(root: Path, batch_bodies: list[int], roll: bool, seed: int) -> Case:
    rng = random.Random(seed)
    live, template = root / "live", root / "template"
    acked: list[tuple[int, str]] = []
    with rmq.MessageStore(live, CFG) as store:
        i = 0
        while True:
            q = i % 2
            r = store.put(TOPIC, rng.randbytes(rng.randint(1, 1500)), queue_id=q, tags=f"t{i % 3}", keys=[f"key{i}"])
            acked.append((r.wrote_offset, r.uniq_key))
            i += 1
            room = SEG - store.max_offset % SEG  # the batch rolls when it needs more than this
            if i >= 30 and (room < sum(batch_bodies) + 150 * len(batch_bodies) if roll else room > 2 * SEG // 3):
                break
        assert store.wait_dispatched()
        nexts = {q: store.next_queue_offset(TOPIC, q) for q in (0, 1)}
        shutil.copytree(live, template)  # the store as a process killed now would leave it
        before = commitlog(live)
        msgs = [rmq.Message(rng.randbytes(n), tags="b", keys=[f"bk{k}"]) for k, n in enumerate(batch_bodies)]
        r = store.put_batch(TOPIC, msgs, queue_id=1)
        batch = list(zip(r.offsets, r.uniq_keys, strict=True))
        after = commitlog(live)
    writes: dict[int, int] = {}
    for base, data in after.items():
        old = before.get(base, bytes(len(data)))
        writes.update((base + k, b) for k, (a, b) in enumerate(zip(old, data, strict=True)) if a != b)
    first = r.offsets[0]
    # The segment the batch rolls into: new, or made ahead by the warm service (all zeros) before it.
    new_files = sorted(b for b, data in after.items() if any(data) and not any(before.get(b, b"")))
    assert bool(new_files) == roll and (first % SEG == 0) == roll
    blank = sorted(o for o in writes if o < first)
    assert len(blank) <= 8 and (bool(blank) == roll)
    commit = [o for o in range(first, first + 8) if o in writes]
    assert commit and max(writes) < first + r.wrote_bytes
    return Case(template, acked, nexts, batch, 1, writes, new_files, blank, commit)


def write_image(case: Case, image: Path, order: list[int], length: int) -> None:
    shutil.rmtree(image, ignore_errors=True)
    shutil.copytree(case.template, image)
    for base in case.new_files:
        (image / "commitlog" / f"{base:020d}").write_bytes(bytes(SEG))
    by_file: dict[int, list[int]] = {}
    for o in order[:length]:
        by_file.setdefault(o - o % SEG, []).append(o)
    for base, offsets in by_file.items():
        path = image / "commitlog" / f"{base:020d}"
        data = bytearray(path.read_bytes())
        for o in offsets:
            data[o - base] = case.writes[o]
        path.write_bytes(bytes(data))


def check_acknowledged(store: rmq.MessageStore, case: Case, with_batch: bool) -> None:
    """Exactly the acknowledged messages (plus the batch when all of it was written), queue offsets unused."""
    want = case.acked + (case.batch if with_batch else [])
    assert [(m.commitlog_offset, m.uniq_key) for m in store.scan()] == want
    extra = len(case.batch) if with_batch else 0
    assert store.next_queue_offset(TOPIC, 0) == case.next_offsets[0]
    assert store.next_queue_offset(TOPIC, case.queue_id) == case.next_offsets[case.queue_id] + extra


def protocol_order(case: Case, rng: random.Random) -> list[int]:
    """Blank filler first, then the records without the commit word, the commit word last; each in random order."""
    records = [o for o in case.writes if o not in case.blank and o not in case.commit]
    parts = [list(case.blank), records, list(case.commit)]
    for p in parts:
        rng.shuffle(p)
    return parts[0] + parts[1] + parts[2]


def prefix_lengths(total: int, rng: random.Random, dense: int) -> list[int]:
    """Every prefix length up to `dense` bytes; beyond, a dense sample that keeps both ends."""
    if total <= dense:
        return list(range(total + 1))
    middle = sorted(rng.sample(range(24, total - 24), dense - 48))
    return [*range(24), *middle, *range(total - 24, total + 1)]


CASES = {
    "3 messages": ([1, 17, 40], False),
    "3 messages after a roll": ([5, 60, 9], True),
    "64 messages after a roll": ([random.Random(n).randint(1, 300) for n in range(64)], True),
    "1 message of 20 KiB": ([20 * 1024], False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_torn_batch_in_protocol_order_opens_with_exactly_the_acknowledged(fast_tmp: Path, name: str) -> None:
    bodies, roll = CASES[name]
    case = make_case(fast_tmp, bodies, roll, seed=len(name))
    rng = random.Random(name)
    order = protocol_order(case, rng)
    image = fast_tmp / "image"
    for length in prefix_lengths(len(order), rng, dense=500):
        write_image(case, image, order, length)
        complete = length == len(order)
        records_written = any(o not in case.blank for o in order[:length])
        with rmq.MessageStore(image, CFG, start_reput=False) as store:
            report = store.open_report
            check_acknowledged(store, case, with_batch=complete)
            assert report["recovery"] == "strict" and report["damage"] == [], (length, report)
            if not complete and records_written:
                assert report["torn_bytes"] > 0, (length, report)
            if not complete:
                r = store.put(TOPIC, b"after", queue_id=case.queue_id)
                assert r.queue_offset == case.next_offsets[case.queue_id], length
        shutil.rmtree(image)


@pytest.mark.parametrize("name", ["3 messages", "3 messages after a roll", "64 messages after a roll"])
def test_torn_batch_in_any_byte_order_keeps_every_acknowledged_message(fast_tmp: Path, name: str) -> None:
    bodies, roll = CASES[name]
    case = make_case(fast_tmp, bodies, roll, seed=len(name))
    rng = random.Random(f"any {name}")
    outcomes: Counter[str] = Counter()
    image = fast_tmp / "image"
    for attempt in range(3):
        order = list(case.writes)
        rng.shuffle(order)
        for length in prefix_lengths(len(order), rng, dense=200):
            write_image(case, image, order, length)
            complete = length == len(order)
            try:
                store = rmq.MessageStore(image, CFG, start_reput=False)
            except rmq.CorruptionError as e:
                assert e.path is not None and e.path in str(e) and e.offset is not None and str(e.offset) in str(e)
                outcomes["default refused with CorruptionError"] += 1
                store = rmq.MessageStore(image, CFG, start_reput=False, recovery="truncate")
                outcome = "truncate"
            else:
                outcome = "default"
            with store:
                stored = [(m.commitlog_offset, m.uniq_key) for m in store.scan()]
                assert stored[: len(case.acked)] == case.acked, (attempt, length)
                has_batch = stored[len(case.acked) :] == case.batch
                assert has_batch or len(stored) == len(case.acked) or not complete, (attempt, length)
                if complete:
                    check_acknowledged(store, case, with_batch=True)
                report = store.open_report
                said = "damage" if report["damage"] else "torn" if report["torn_bytes"] else "nothing"
                n = len(stored) - len(case.acked)
                kept = "whole" if has_batch else "altered" if n == len(case.batch) else f"{n} records"
                outcomes[f"{outcome}: opened, batch kept: {kept}, reported {said}"] += 1
                if n < len(case.batch) and any(o not in case.blank for o in order[:length]):
                    assert said != "nothing", (attempt, length, report)  # written bytes were discarded
                # Out of protocol order a record can validate with bytes missing where no checksum looks (header
                # fields, properties), so what is kept of the batch is not decidable; an acknowledged message's
                # queue offset must still never be handed out again.
                r = store.put(TOPIC, b"after", queue_id=case.queue_id)
                assert r.queue_offset >= case.next_offsets[case.queue_id], (attempt, length)
            shutil.rmtree(image)
    print(f"\n{name}, any byte order: {dict(sorted(outcomes.items()))}")
