"""The process tests/test_schedule.py kills with SIGKILL while it delivers delayed messages.

Run as `python schedule_child.py JOB_JSON`: opens the store at `root` with the delay levels `levels` and
`flush_delay_offset_interval` = `interval` ms, puts `count` messages to topic `T` with delay levels cycling
over 1..3 (the store acknowledges each), prints "put", then sleeps until killed while the schedule service
delivers them.
"""

from __future__ import annotations

import json
import sys
import time

import rmq


def main() -> None:
    job = json.loads(sys.argv[1])
    cfg = rmq.StoreConfig(
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=512,
        max_index_num=2048,
        message_delay_level=job["levels"],
        flush_delay_offset_interval=job["interval"],
    )
    store = rmq.MessageStore(job["root"], cfg)
    for i in range(job["count"]):
        store.put("T", str(i).encode(), queue_id=i % 4, delay_level=1 + i % 3)
    print("put", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
