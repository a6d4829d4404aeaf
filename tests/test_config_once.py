"""The configuration is defined once, in the Rust core's table of settings: Python's `StoreConfig` is a view of
it. These tests pin the view (names, order, types, defaults, RocketMQ names) to the table and prove that every
setting reaches the core with the value given, from keywords and from `broker.conf` properties."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

import rmq
from rmq import _native
from rmq.store import SETTINGS, StoreConfig

# Values to use instead of the default where "the default, changed a little" would not be valid.
ALTERNATES: dict[str, Any] = {
    "mapped_file_size_commit_log": 1 << 20,
    "mapped_file_size_consume_queue": 20 * 1000,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
    "store_host": "10.1.2.3:10999",
    "broker_cluster_name": "OtherCluster",
    "message_delay_level": "1s 2s",
    "delete_when": "05;17",
}


def _alternate(s: rmq.store.Setting) -> Any:
    """A valid value of setting `s` other than its default."""
    if s.name in ALTERNATES:
        return ALTERNATES[s.name]
    if s.kind == "bool":
        return not s.default
    if s.kind == "int":
        return s.default + 1
    if s.kind.startswith("choice:"):
        return next(c for c in s.kind.removeprefix("choice:").split("|") if c != s.default)
    raise AssertionError(f"no alternate value for {s.name} ({s.kind}): add one to ALTERNATES")


def _python_kind(annotation: object) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return "choice:" + "|".join(typing.get_args(annotation))
    return {int: "int", bool: "bool", str: "str", str | None: "str?"}[annotation]  # type: ignore[index]


def test_store_config_fields_are_the_core_settings_in_order_with_their_types_and_defaults() -> None:
    hints = typing.get_type_hints(StoreConfig)
    fields = dataclasses.fields(StoreConfig)
    assert [f.name for f in fields] == [s[0] for s in _native.config_settings()]
    for f in fields:
        s = SETTINGS[f.name]
        assert _python_kind(hints[f.name]) == s.kind, f.name
        assert f.default == s.default, f.name
        assert s.java_name and s.doc.strip(), f.name
        assert f"{f.name} (`{s.java_name}`" in (StoreConfig.__doc__ or ""), "help(StoreConfig) lists every setting"


def test_rocketmq_defaults_are_pinned() -> None:
    # A few of RocketMQ's defaults, spelled out once more on purpose: a changed default must be a decision.
    c = StoreConfig()
    assert c.mapped_file_size_commit_log == 1024 * 1024 * 1024
    assert c.mapped_file_size_consume_queue == 300_000 * 20
    assert (c.max_hash_slot_num, c.max_index_num, c.max_msgs_num_batch) == (5_000_000, 20_000_000, 64)
    assert c.flush_disk_type == "ASYNC_FLUSH" and c.broker_role == "ASYNC_MASTER"
    assert SETTINGS["mapped_file_size_commit_log"].java_name == "mappedFileSizeCommitLog"
    assert SETTINGS["check_crc_on_recover"].java_name == "checkCRCOnRecover"


def test_every_setting_reaches_the_core_with_the_value_given(tmp_path: Path) -> None:
    changed = {s.name: _alternate(s) for s in SETTINGS.values()}
    cfg = StoreConfig(**changed)
    with rmq.MessageStore(tmp_path / "s", cfg, start_reput=False) as store:
        assert store.settings == changed


def test_broker_conf_properties_set_every_setting_by_its_rocketmq_name() -> None:
    changed = {s.name: _alternate(s) for s in SETTINGS.values()}
    props = {}
    for name, value in changed.items():
        if name == "store_host":
            continue  # brokerIP1 + listenPort, below
        if name == "broker_cluster_name":
            props[SETTINGS[name].java_name] = value
            continue
        props[SETTINGS[name].java_name] = str(value).lower() if isinstance(value, bool) else str(value)
    props |= {"brokerIP1": "10.1.2.3", "listenPort": " 10999", "namesrvAddr": "ignored:9876"}
    assert StoreConfig.from_properties(props) == StoreConfig(**changed)
    assert StoreConfig.from_properties({"checkCRCOnRecover": "FALSE", "maxMessageSize": " 1024 "}) == StoreConfig(
        check_crc_on_recover=False, max_message_size=1024
    )
    with pytest.raises(rmq.InvalidConfigError, match="maxMessageSize"):
        StoreConfig.from_properties({"maxMessageSize": "big"})
    with pytest.raises(rmq.InvalidConfigError, match="flushDiskType"):
        StoreConfig.from_properties({"flushDiskType": "SOMETIMES"})


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"max_message_size": "4"}, rmq.ArgumentTypeError),
        ({"message_index_enable": 1}, rmq.ArgumentTypeError),
        ({"max_message_size": 2**31}, rmq.InvalidConfigError),
        ({"flush_disk_type": "SOMETIMES"}, rmq.InvalidConfigError),
        ({"store_host": "nope"}, rmq.InvalidInputError),
        ({"no_such_setting": 1}, rmq.InvalidConfigError),
    ],
)
def test_a_bad_setting_is_a_typed_error_naming_it_and_creates_nothing(
    tmp_path: Path, settings: dict[str, Any], error: type[Exception]
) -> None:
    native = {**StoreConfig().to_native(), **settings}
    with pytest.raises(error, match=next(iter(settings))) as info:
        _native.MessageStore(str(tmp_path / "s"), native, "strict", False)
    assert not (tmp_path / "s").exists()
    assert "Str(" not in str(info.value) and "Int(" not in str(info.value)  # no Rust spelling of the value
    if settings == {"flush_disk_type": "SOMETIMES"}:
        assert str(info.value).endswith('got "SOMETIMES"'), info.value
