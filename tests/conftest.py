"""Fixtures and byte-level helpers shared by the pytest suites.

The helpers decode records with `struct`, independently of the Rust decoder, so a test can check what is on
disk rather than what rmq reads back (spec section 1.2: all integers big-endian).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import rmq

SEGMENT = 4096
#: Consume-queue and index sizes small enough that tests cross file boundaries and hash files quickly
#: (the defaults make a 420 MB index file).
SMALL_DERIVED: dict[str, int] = {
    "mapped_file_size_consume_queue": 6000,
    "max_hash_slot_num": 512,
    "max_index_num": 2048,
}


def small_config(**overrides: object) -> rmq.StoreConfig:
    """A config with SEGMENT-byte commitlog segments and small consume-queue and index files."""
    kwargs: dict[str, object] = {"mapped_file_size_commit_log": SEGMENT, **SMALL_DERIVED, **overrides}
    return rmq.StoreConfig(**kwargs)  # type: ignore[arg-type]


SMALL = small_config()

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def small_store(store_dir: Path) -> Iterator[rmq.MessageStore]:
    with rmq.MessageStore(store_dir, SMALL) as store:
        yield store


def tree_digest(root: Path) -> dict[str, str]:
    """Hash of every file under `root` except the lock and abort markers."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("lock", "abort", "abort.bak")
    }


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root`, directories included: a file maps to its SHA-256, a directory to "dir"."""
    out = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        out[key] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def host_text(ip: bytes, port: int) -> str:
    """`ip:port` or `[ipv6]:port`, as MessageExt renders hosts."""
    addr = ipaddress.ip_address(ip)
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


@dataclass(frozen=True)
class Parsed:
    """One record decoded from its bytes by the layout table of spec section 1.2."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: bytes


def parse_record(raw: bytes) -> Parsed:
    """Decodes a commitlog record; asserts that its lengths add up to TOTALSIZE and to len(raw)."""
    total, magic, body_crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = struct.unpack_from(
        ">iIiiiqqiq", raw, 0
    )
    pos = 48
    bh = 16 if sys_flag & 0x10 else 4
    born = host_text(raw[pos : pos + bh], struct.unpack_from(">i", raw, pos + bh)[0])
    pos += bh + 4
    (store_ts,) = struct.unpack_from(">q", raw, pos)
    pos += 8
    sh = 16 if sys_flag & 0x20 else 4
    store = host_text(raw[pos : pos + sh], struct.unpack_from(">i", raw, pos + sh)[0])
    pos += sh + 4
    reconsume, prepared, body_len = struct.unpack_from(">iqi", raw, pos)
    pos += 16
    body = raw[pos : pos + body_len]
    pos += body_len
    if magic == MAGIC_V2:
        (topic_len,) = struct.unpack_from(">h", raw, pos)
        pos += 2
    else:
        assert magic == MAGIC_V1, hex(magic)
        (topic_len,) = struct.unpack_from(">b", raw, pos)
        pos += 1
    topic = raw[pos : pos + topic_len].decode()
    pos += topic_len
    (props_len,) = struct.unpack_from(">h", raw, pos)
    pos += 2
    props = raw[pos : pos + props_len]
    pos += props_len
    assert pos == total == len(raw)
    return Parsed(
        total,
        magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born,
        store_ts,
        store,
        reconsume,
        prepared,
        body,
        topic,
        props,
    )


def parse_properties(blob: bytes) -> dict[str, str]:
    """`string2messageProperties` for well-formed blobs: `name 0x01 value 0x02` pairs."""
    out = {}
    for seg in blob.split(b"\x02"):
        name, sep, value = seg.partition(b"\x01")
        if sep and name and value:
            out[name.decode()] = value.decode()
    return out


def encoded_properties_len(props: dict[str, str]) -> int:
    """Bytes of `props` serialized as `name 0x01 value 0x02` pairs (any order)."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in props.items())


def segment_bytes(store: rmq.MessageStore, offset: int) -> bytes:
    """The bytes of the segment file holding commitlog `offset` (read from disk, not through rmq)."""
    size = store.config.mapped_file_size_commit_log
    start = offset - offset % size
    return (Path(store.path) / "commitlog" / f"{start:020d}").read_bytes()


#: Topics RocketMQ's producers may not send to (`TopicValidator.isNotAllowedSendTopic`), spelled out here
#: independently of the implementation.
NOT_ALLOWED_SEND_TOPICS = (
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
)


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A temporary directory on tmpfs (`/dev/shm`) where there is one, else `tmp_path`: for tests that open
    hundreds of store images, where each close's fsyncs would otherwise dominate. A killed process leaves the
    page cache as it was on any file system, so crash images mean the same there."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    work = Path(tempfile.mkdtemp(prefix="rmq-test-", dir="/dev/shm"))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] Spark session for every Spark test of the run (starting one costs 10-30 s)."""
    pytest.importorskip("pyspark")
    import rmq.spark as rs

    session = rs.session(
        "local[2]", conf={"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"}
    )
    yield session
    session.stop()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path | None]:
    """A 16 MiB tmpfs under tmp_path, or None where mounting is not possible (never on CI)."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    on_ci = bool(os.environ.get("CI"))
    why = None
    if os.geteuid() != 0:
        why = "not root"
    else:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            why = f"mount failed: {proc.stderr.strip()}"
    if why is not None:
        if on_ci:
            pytest.fail(f"CI must mount a tmpfs for this test ({why})")
        yield None
        return
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)


LIVE_WRITER = """
import sys, time, rmq
from conftest import small_config
store = rmq.MessageStore(sys.argv[1], small_config(mapped_file_size_commit_log=64 << 10))
i = 0
while True:
    time.sleep(0.0005)  # a few 64 KiB segments a second: the store stays small
    if i % 3:
        store.put("T", b"w" * (50 + i % 300), keys=f"w{i}", queue_id=i % 2)
    else:
        store.put_batch("T", [b"v" * (40 + j) for j in range(1 + i % 9)], keys=[f"v{i}-{j}" for j in range(1 + i % 9)])
    i += 1
    if i == 50:
        print("ready", flush=True)
"""


@contextlib.contextmanager
def live_writer(root: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process appending to the store at `root` (single puts and batches of 1-9, 64 KiB segments) from
    its 50th append on, until the block ends; then it is killed with SIGKILL, leaving whatever a kill leaves."""
    writer = subprocess.Popen(
        [sys.executable, "-c", LIVE_WRITER, str(root)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        yield writer
    finally:
        writer.kill()
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()


def load_beside_a_persist_between_its_renames(tmp_path: Path, path: Path, hook: str, change: str, load: Any) -> None:
    """Runs `load()` while another process's persist of `path` stands between its two renames (the file moved to
    `.bak`, the new one not in yet), holding the file lock: the child runs `hook` (which makes the persist call
    `stop(stage)` after each step) and then `change` (Python that persists), and stops at the "rotated" step until
    `load` has had a second to finish without waiting for the lock. A load that reads under the lock waits, and
    sees the new file."""
    import threading
    import time

    between, go = tmp_path / "between", tmp_path / "go"
    child = (
        "import os, time\n"
        "def stop(stage):\n"
        "    if stage == 'rotated':\n"
        f"        open({str(between)!r}, 'w').close()\n"
        "        end = time.monotonic() + 120\n"
        f"        while not os.path.exists({str(go)!r}) and time.monotonic() < end: time.sleep(0.01)\n"
        f"{hook}\n{change}\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", child])
    try:
        deadline = time.monotonic() + 120
        while not between.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the child never reached its rename"
            time.sleep(0.01)
        assert not path.exists()  # the moment between the renames
        loader = threading.Thread(target=load)
        loader.start()
        loader.join(1.0)  # a load that does not wait for the lock is done by now, with the backup
        go.touch()
        loader.join(120)
        assert not loader.is_alive()
        assert proc.wait(120) == 0
    finally:
        go.touch()
        proc.kill()
        proc.wait()
