"""kill -9 with the transient store pool on: a child puts into a store whose commit service copies the pooled
buffer into the files every 20 ms, acknowledging each put in an ack file, and is killed at a random moment
(mid-put, mid-commit, between commits). The store it leaves must open with strict recovery and no damage
(an unfinished commit is discarded like an unfinished append), and hold a prefix of the acknowledged puts,
each byte-identical where the store said it put it: what was lost is what was not yet committed, as in
RocketMQ. `RMQ_POOL_KILLS` sets the number of kills (default 6)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import rmq

KILLS = int(os.environ.get("RMQ_POOL_KILLS", "6"))
CONFIG = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 2000,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
    "transient_store_pool_enable": True,
    "transient_store_pool_size": 2,
    "commit_interval_commit_log": 20,
}
CHILD = """
import sys
import rmq
store = rmq.MessageStore(sys.argv[1], rmq.StoreConfig(**eval(sys.argv[2])))
store.start_services()
with open(sys.argv[3], "w") as acks:
    i = 0
    while True:
        body = (b"%d:" % i) * (1 + i % 200)
        r = store.put("Pool", body, queue_id=i % 2)
        acks.write("%d %d\\n" % (r.offsets[0], i))
        acks.flush()
        i += 1
"""


def body(i: int) -> bytes:
    return (b"%d:" % i) * (1 + i % 200)


def test_a_killed_pooled_store_opens_strictly_with_a_prefix_of_the_acknowledged_puts(tmp_path: Path) -> None:
    rng = random.Random(1717)
    for k in range(KILLS):
        store_dir, acks = tmp_path / f"s{k}", tmp_path / f"acks{k}"
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(store_dir), repr(CONFIG), str(acks)])
        # Wait until the child has acknowledged a few puts, then let it run a random while and kill it.
        while not acks.exists() or acks.stat().st_size < 200:
            assert child.poll() is None, "the child died on its own"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        acked = [tuple(map(int, line.split())) for line in acks.read_text().splitlines() if len(line.split()) == 2]
        image = tmp_path / f"image{k}"
        shutil.copytree(store_dir, image)
        with rmq.MessageStore(image, rmq.StoreConfig(**CONFIG), recovery="strict") as store:  # type: ignore[arg-type]
            assert store.unclean_shutdown
            assert store.open_report["damage"] == [], store.open_report
            found = [(m.commitlog_offset, m.body) for m in store.scan(0)]
        print(f"kill {k}: {len(acked)} acknowledged, {len(found)} found, torn {store.open_report['torn_bytes']}")
        assert len(found) <= len(acked) + 1, "nothing beyond the put in flight"
        for n, (offset, got) in enumerate(found):
            if n < len(acked):
                assert acked[n] == (offset, n), f"kill {k}: record {n} at {offset} is not the one acknowledged"
            assert got == body(n), f"kill {k}: record {n} at {offset} has another body"
