"""The `rmq` command: argument parsing, and errors as one line that says what to do. Each command lives in its
own module: `rmq demo` in `rmq.demo`, `rmq scan` in `rmq.scan`, `rmq describe` in `rmq.describe`, `rmq check` in
`rmq.check`, `rmq dump` in `rmq.dump`, `rmq export` and `rmq replay` in `rmq.export`, `rmq spark` in `rmq.spark`,
`rmq spark-env` in `rmq.spark_env`.

Exit status: 0 done; 1 done, but the store has problems (a message whose body CRC fails); 2 the command could not
run (bad arguments, a missing, unreadable or locked store, damage that stops opening); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import errno
import io
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import rmq
from rmq._paths import refuse_overlap, store_destination
from rmq.spark_env import add_arguments as spark_env_arguments

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
#: The largest commitlog offset (a Java long).
MAX_OFFSET = 2**63 - 1
#: The modules of the `spark` extra.
SPARK_EXTRA = ("pyspark", "pyarrow", "pandas")


class Parser(argparse.ArgumentParser):
    """argparse with errors on one line (argparse prints the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


class CommandError(Exception):
    """A command cannot run; the message says what to do."""


def _int_arg(low: int, high: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be between {low} and {high}, got {value}")
        return value

    return parse


offset_arg = _int_arg(0, MAX_OFFSET, "a commitlog offset")
count_arg = _int_arg(0, MAX_OFFSET, "a count")
size_arg = _int_arg(1, 2**31 - 1, "a size")


def existing_store(path: Path) -> Path:
    """`path` if it holds a store (a `commitlog/` directory), so that a mistyped path creates nothing."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CommandError(
                f"{path} is a symlink loop (it cannot be resolved): give the store's root directory (the one holding "
                "commitlog/)"
            ) from None
        if e.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise
        raise CommandError(
            f"{path} does not exist: give the store's root directory (the one holding commitlog/)"
        ) from None
    if not (path / "commitlog").is_dir():
        raise CommandError(f"{path} holds no store (no commitlog/ directory): give the store's root directory")
    return path


def missing_spark_extra() -> str | None:
    """The first module of the `spark` extra that cannot be imported, if any."""
    for name in SPARK_EXTRA:
        try:
            __import__(name)
        except ImportError:
            return name
    return None


def require_spark_extra(alternative: str) -> None:
    missing = missing_spark_extra()
    if missing is not None:
        raise CommandError(
            f"the Spark job needs the `spark` extra ({missing} is not installed): pip install 'rmq[spark]'{alternative}"
        )


def store_config(args: argparse.Namespace) -> rmq.StoreConfig:
    """The sizes read off the store's files, with the index sizes given on the command line, if any."""
    overrides = {k: v for k in ("max_hash_slot_num", "max_index_num") if (v := getattr(args, k, None)) is not None}
    return rmq.StoreConfig.from_files(args.store, **overrides)


def print_json(obj: object) -> None:
    print(json.dumps(obj, default=str, ensure_ascii=False, indent=1))


def cmd_demo(args: argparse.Namespace) -> int:
    if args.spark:
        require_spark_extra(", or run `rmq demo --no-spark`")
    from rmq.demo import run_demo

    prose = io.StringIO() if args.json else None
    summary = run_demo(args.store, args.messages, args.segment_size, args.fresh, out=prose)
    result: dict[str, Any] = {"demo": summary}
    if args.spark:
        from rmq.spark import run_spark

        result["spark"] = run_spark(args.store, args.spark_out, args.master, quiet=args.json)
    if args.json:
        print_json(result)
    return EXIT_OK


def cmd_spark(args: argparse.Namespace) -> int:
    require_spark_extra("")
    from rmq.spark import run_spark

    to_stdout = args.json == "-"
    if args.json is not None and not to_stdout:
        refuse_overlap(args.store, (args.json,), "the --json file")  # before the job, not after it
    result = run_spark(args.store, args.out, args.master, quiet=to_stdout)
    if to_stdout:
        print_json(result)
    elif args.json is not None:
        Path(args.json).write_text(json.dumps(result, default=str, ensure_ascii=False, indent=1), encoding="utf-8")
    return EXIT_OK


def cmd_spark_env(args: argparse.Namespace) -> int:
    from rmq.spark_env import SparkEnvError, build

    try:
        build(args.out, wheel=args.wheel, python=args.python, python_prefix=args.python_prefix)
    except SparkEnvError as e:
        raise CommandError(str(e)) from e
    return EXIT_OK


def cmd_scan(args: argparse.Namespace) -> int:
    from rmq.scan import BodyFormat, run_scan

    store = existing_store(args.store)
    body: BodyFormat | None = (args.body_format or "text") if args.body or args.body_format else None
    result = run_scan(
        store,
        args.from_offset,
        args.limit,
        config=store_config(args),
        body=body,
        json_lines=args.json,
        recovery=args.recovery,
    )
    verb = "read past" if args.recovery == "salvage" else "stopped at"  # strict: no damage, it raised
    for d in result.damage:
        print(
            f"rmq: {verb} {d['bytes']} damaged bytes at commitlog offset {d['offset']}: {d['reason']}", file=sys.stderr
        )
    if result.bad_crc_offsets:
        first = result.bad_crc_offsets[0]
        print(
            f"rmq: {len(result.bad_crc_offsets)} of {result.messages} messages have a body that fails its CRC"
            f" (the first at commitlog offset {first}): their bodies are damaged",
            file=sys.stderr,
        )
        return EXIT_PROBLEMS
    return EXIT_PROBLEMS if result.damage else EXIT_OK


def recovery_argument(parser: argparse.ArgumentParser) -> None:
    """`--recovery`: how a reading command's read-only open treats damage in the commitlog."""
    parser.add_argument(
        "--recovery",
        choices=("strict", "truncate", "salvage"),
        default="strict",
        help="how the read-only open treats damage: fail (strict), stop at it (truncate), read past it (salvage)",
    )


def cmd_describe(args: argparse.Namespace) -> int:
    from rmq.describe import run_describe

    run_describe(existing_store(args.store), store_config(args), recovery=args.recovery)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from rmq.check import run_check

    return run_check(existing_store(args.store), store_config(args), args.json)


def cmd_dump(args: argparse.Namespace) -> int:
    from rmq.dump import run_dump

    run_dump(existing_store(args.store), store_config(args), args.part or "records", recovery=args.recovery)
    return EXIT_OK


def when_arg(text: str) -> dt.datetime:
    """A store time given as epoch milliseconds or ISO 8601 (local time when no zone is given)."""
    try:
        if text.isdigit():
            return dt.datetime.fromtimestamp(int(text) / 1000, tz=dt.UTC)
        return dt.datetime.fromisoformat(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a time (ISO 8601 or epoch ms): {text!r}") from None


def cmd_export(args: argparse.Namespace) -> int:
    missing = missing_spark_extra()
    if missing is not None and missing != "pyspark":
        raise CommandError(f"export and replay need pyarrow ({missing} is not installed): pip install 'rmq[spark]'")
    from rmq.export import Selection, damaged_bodies, export, replay
    from rmq.store import SCHEDULE_TOPIC

    store = existing_store(args.store)
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
    from rmq._progress import Progress

    total = sum(p.stat().st_size for p in (store / "commitlog").iterdir() if p.is_file())
    progress = Progress(f"{args.command}ing", total=total)
    damaged: list[int] = []
    skipped: list[tuple[int, int, str]] | None = [] if args.skip_damage else None
    try:
        if args.command == "export":
            n = export(store, args.out, args.format, sel, skipped=skipped, damaged=damaged, progress=progress)
            result: dict[str, object] = {"exported": n, "out": str(args.out)}
            what = "were exported with body_crc_ok false"
        else:
            # Before the destination is opened: opening writes (lock, abort marker, directories).
            refuse_overlap(store, (args.dst,), "the destination store")
            if args.to_topic is not None:
                rmq._native.check_producer_topic(args.to_topic)
            store_destination(args.dst, "the destination")  # never a store among someone's files
            # No services while it is filled: a delayed message delivered in the middle would become the
            # destination's newest message, which `--resume` could not place. Dispatched before the close.
            left_out: dict[str, int] = {}
            with rmq.MessageStore(args.dst, store_config(args), start_services=False) as dst:
                before = dst.max_offset
                try:
                    n = replay(
                        store,
                        dst,
                        sel,
                        to_topic=args.to_topic,
                        skipped=skipped,
                        damaged=damaged,
                        progress=progress,
                        resume=args.resume,
                        left_out=left_out,
                    )
                except rmq.RmqError as e:
                    if dst.max_offset == before:
                        raise
                    # Rerunning the same command would append everything again after what was appended.
                    raise CommandError(
                        f"{error_line(e)}; the destination kept the messages appended before that: rerun with "
                        "--resume to go on after them (without it every message is appended again)"
                    ) from e
                dst.wait_dispatched(3600)
            result = {"replayed": n, "dst": str(args.dst), "left_out": left_out}
            what = "were not replayed"
    finally:
        progress.close()
    result["damaged_bodies"] = damaged
    if skipped is not None:
        result["skipped"] = [{"offset": o, "length": n_, "reason": r} for o, n_, r in skipped]
    if args.json:
        print_json(result)
    else:
        print(f"{args.command}ed {n} messages", file=sys.stderr)
        for topic, count in sorted(result.get("left_out", {}).items()):  # type: ignore[attr-defined]
            why = "delayed messages already delivered (their copies in their topics were replayed) or undeliverable"
            if topic != SCHEDULE_TOPIC:
                why = "a system topic's records, the source broker's bookkeeping (rmq export reads them)"
            print(f"left out {count} records of {topic}: {why}", file=sys.stderr)
    for offset, length, reason in skipped or ():
        print(f"rmq: left out {length} damaged bytes at commitlog offset {offset}: {reason}", file=sys.stderr)
    if damaged:
        print(f"rmq: {damaged_bodies(len(damaged), damaged[0], what)}: their bodies are damaged", file=sys.stderr)
    if damaged or skipped:
        return EXIT_PROBLEMS
    return EXIT_OK


def cmd_recover(args: argparse.Namespace) -> int:
    store = existing_store(args.store)
    # No services: a repair runs nothing of the store's own (a delayed message come due would be delivered, a
    # new record after the cut); dispatch happens in `wait_dispatched`, the flush in `close`.
    with rmq.MessageStore(store, store_config(args), recovery=args.mode, start_services=False) as s:
        report = s.open_report
        recovery = s.recovery_report
        s.wait_dispatched(3600)
    lines = []
    if report["torn_bytes"]:
        lines.append(f"discarded the unfinished append of a killed writer: {report['torn_bytes']} bytes")
    for d in report["damage"]:
        lines.append(
            f"cut the log at commitlog offset {d['offset']} ({d['bytes']} bytes, {d['dropped_records']} valid "
            f"records after the damage dropped): {d['reason']}"
        )
    # What the derived files lost with the cut (or had damaged): rebuilt from the log as it now is.
    lines += [
        f"consume queue {q}: {why}"
        for q, why in zip(recovery["rebuilt_queues"], recovery["rebuilt_reasons"], strict=True)
    ]
    lines += [f"index: {what}" for what in recovery["rebuilt_index_files"]]
    if recovery["redispatched_records"]:
        # A crash's dispatch backlog, or entries the derived files lost: taken in again from the log.
        lines.append(
            f"dispatched {recovery['redispatched_records']} records from commitlog offset "
            f"{recovery['dispatched_from']} again: {recovery['rebuilt_cq_entries']} consume-queue entries and "
            f"{recovery['reindexed_keys']} index keys that were missing"
        )
    if report["removed_files"]:
        lines.append(
            f"removed {report['removed_files']} segment file(s) after the end of the log "
            "(one made ahead of it holds nothing)"
        )
    if args.json:
        derived = {k: recovery[k] for k in ("rebuilt_queues", "rebuilt_reasons", "rebuilt_index_files")}
        print_json({"store": str(store), "mode": args.mode, "open_report": report, **derived})
    else:
        for line in lines or ["nothing to repair"]:
            print(line)
        print(f"the log ends at commitlog offset {report['end_offset']}; the store is closed cleanly")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="rmq", description="Apache RocketMQ's message store: tools for a store directory")
    p.add_argument("--version", action="version", version=f"rmq {rmq.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="write a realistic workload into a local store, read it back, run Spark")
    demo.add_argument("--store", type=Path, default=Path("rmq-demo-store"), help="store directory")
    demo.add_argument("--messages", type=count_arg, default=10_000, help="single puts to make")
    demo.add_argument(
        "--segment-size",
        type=size_arg,
        default=None,
        help="commitlog segment size of a new store, bytes (default 1 MiB; a store that exists keeps its own)",
    )
    demo.add_argument("--fresh", action="store_true", help="delete the store directory first")
    demo.add_argument("--no-spark", dest="spark", action="store_false", help="skip the Spark job at the end")
    demo.add_argument("--spark-out", type=Path, default=Path("rmq-demo-parquet"), help="the Spark job's output")
    demo.add_argument("--master", default=None, help="Spark master URL (default local[*] or $SPARK_MASTER)")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    demo.set_defaults(run=cmd_demo)

    scan = sub.add_parser("scan", help="print a store's messages, one line each")
    scan.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    scan.add_argument("--from", dest="from_offset", type=offset_arg, default=0, help="commitlog offset to start at")
    scan.add_argument("--limit", type=count_arg, default=None, help="stop after this many messages")
    scan.add_argument("--body", action="store_true", help="print bodies too (as text unless --body-format)")
    scan.add_argument("--body-format", choices=("text", "hex", "base64"), default=None, help="how to print bodies")
    scan.add_argument("--json", action="store_true", help="JSON lines with every field instead of text lines")
    recovery_argument(scan)
    scan.set_defaults(run=cmd_scan)

    spark = sub.add_parser("spark", help="Spark job: store -> Parquet by topic and day, plus summaries")
    spark.add_argument("store", type=Path, help="store root or commitlog directory")
    spark.add_argument("out", type=Path, help="output directory")
    spark.add_argument("--master", default=None, help="Spark master URL (default local[*] or $SPARK_MASTER)")
    spark.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="the summaries as JSON: on stdout, or in PATH",
    )
    spark.set_defaults(run=cmd_spark)
    senv = sub.add_parser("spark-env", help="pack a venv for Spark executors (rmq, pyarrow, pandas; not pyspark)")
    spark_env_arguments(senv)
    senv.set_defaults(run=cmd_spark_env)

    desc = sub.add_parser("describe", help="print a store's canonical description (tests/interop/README.md)")
    desc.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    desc.add_argument("--json", action="store_true", help="JSON lines (the only output of describe)")
    recovery_argument(desc)
    desc.set_defaults(run=cmd_describe)
    chk = sub.add_parser("check", help="read-only consistency report; exit 0 clean, 1 problems, 2 unreadable")
    chk.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    chk.add_argument("--json", action="store_true", help="one JSON object instead of text")
    chk.set_defaults(run=cmd_check)

    rec = sub.add_parser("recover", help="repair a store in place (open it writable, report, close it cleanly)")
    rec.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    rec.add_argument(
        "--mode",
        choices=("strict", "truncate"),
        default="strict",
        help="strict: only what a crash leaves (fails on damage); truncate: cut the log at damage as RocketMQ does",
    )
    rec.add_argument("--json", action="store_true", help="the open report as JSON")
    rec.set_defaults(run=cmd_recover)

    dump = sub.add_parser("dump", help="every field of every record as JSON lines (or --cq, --index, --checkpoint)")
    dump.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    part = dump.add_mutually_exclusive_group()
    for name in ("cq", "index", "checkpoint"):
        part.add_argument(f"--{name}", dest="part", action="store_const", const=name, help=f"the {name} files")
    dump.add_argument("--json", action="store_true", help="JSON lines (the only output of dump)")
    recovery_argument(dump)
    dump.set_defaults(run=cmd_dump)

    exp = sub.add_parser("export", help="selected messages to a JSON-lines, Parquet or CSV file")
    exp.add_argument("store", type=Path, help="store root (the directory holding commitlog/)")
    exp.add_argument("out", type=Path, help="output file")
    exp.add_argument("--format", choices=("jsonl", "parquet", "csv"), default="jsonl", help="file format")
    rep = sub.add_parser("replay", help="append selected messages of one store to another")
    rep.add_argument("store", type=Path, help="source store root")
    rep.add_argument("dst", type=Path, help="destination store root (created if missing)")
    rep.add_argument("--to-topic", default=None, help="put them into this topic instead of their own")
    rep.add_argument(
        "--resume",
        action="store_true",
        help="continue a replay that stopped part way: skip what the destination's newest message shows done",
    )
    for cmd in (exp, rep):
        cmd.add_argument("--topic", action="append", default=None, help="only this topic (repeatable)")
        cmd.add_argument("--queue", type=_int_arg(0, 2**31 - 1, "a queue id"), default=None, help="only this queue")
        cmd.add_argument("--tag", default=None, help="only messages with this tag")
        cmd.add_argument("--key", default=None, help="only messages with this key (a KEYS token or the UNIQ_KEY)")
        cmd.add_argument("--msg-id", default=None, help="only the message with this offsetMsgId or UNIQ_KEY")
        cmd.add_argument("--since", type=when_arg, default=None, help="store time from (ISO 8601 or epoch ms)")
        cmd.add_argument("--until", type=when_arg, default=None, help="store time before (ISO 8601 or epoch ms)")
        cmd.add_argument("--grep", default=None, help="only messages whose body matches this regular expression")
        cmd.add_argument("--from-offset", type=offset_arg, default=None, help="commitlog offset from")
        cmd.add_argument("--to-offset", type=offset_arg, default=None, help="commitlog offset before")
        cmd.add_argument(
            "--skip-damage",
            action="store_true",
            help="leave damaged bytes out (each listed on stderr, exit 1) instead of stopping at them",
        )
        cmd.add_argument("--json", action="store_true", help="print the count as JSON")
        cmd.set_defaults(run=cmd_export)
    for cmd in (scan, desc, chk, rec, dump, exp, rep):
        cmd.add_argument("--max-hash-slot-num", type=size_arg, default=None, help="index slots, if not read off")
        cmd.add_argument("--max-index-num", type=size_arg, default=None, help="index entries, if not read off")
    return p


def error_line(e: BaseException) -> str:
    """One line saying what went wrong and what to do."""
    if isinstance(e, PermissionError) or (isinstance(e, rmq.StoreIOError) and "(os error 13)" in str(e)):
        where = getattr(e, "filename", None) or getattr(e, "path", None) or ""
        return f"permission denied on {where}: run rmq as a user who may read and write the store, or fix its modes"
    if isinstance(e, rmq.DiskFullError):  # an OSError too: its message, not "[Errno 28] ...: 'path'"
        return e.strerror or str(e)
    if isinstance(e, rmq.CorruptionError) and 'recovery="salvage"' in str(e):
        return (
            f"{e} (from the command line: `rmq scan STORE --recovery salvage --json --body-format base64` reads every "
            "valid record, after the damage too, and changes nothing; `rmq recover STORE --mode truncate` cuts the "
            "log in place as RocketMQ does)"
        )
    if isinstance(e, rmq.RmqError):
        return str(e)
    if isinstance(e, FileNotFoundError):
        return f"{e.filename or e}: no such file or directory: check the path"
    if isinstance(e, OSError):
        return f"{e.strerror or e} on {e.filename}" if e.filename else str(e)
    return str(e)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `rmq scan STORE | head`: the reader left; say nothing more
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (CommandError, rmq.RmqError, OSError) as e:
        print(f"rmq: {error_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # a bug: still one line, the traceback on request
        if os.environ.get("RMQ_DEBUG"):
            traceback.print_exc()
        print(f"rmq: internal error ({type(e).__name__}: {e}); set RMQ_DEBUG=1 for the traceback", file=sys.stderr)
        return EXIT_ERROR


def entry_point() -> None:
    """The `rmq` console script: `main`, with Ctrl-C during start-up or exit quiet too."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    raise SystemExit(code)


if __name__ == "__main__":
    entry_point()
