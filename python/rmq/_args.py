"""Argument checks for the Python-level public calls, with the same rules and errors as the native ones.

Ints are `int`s and never `bool`s, in the range of the Java type they stand for; timeouts are finite,
non-negative seconds; names are non-empty `str`s that can be stored as UTF-8. A value of the wrong type raises
`ArgumentTypeError` (also a `TypeError`), a value out of range `InvalidArgumentError` (also a `ValueError`).
"""

from __future__ import annotations

import math
import operator

from rmq import _native
from rmq._native import ArgumentTypeError, InvalidArgumentError

JAVA_INT_MIN, JAVA_INT_MAX = -(1 << 31), (1 << 31) - 1
JAVA_LONG_MIN, JAVA_LONG_MAX = -(1 << 63), (1 << 63) - 1


def _type_name(value: object) -> str:
    return type(value).__name__


def integer(value: object, name: str, lo: int, hi: int) -> int:
    """`value` as an int in `[lo, hi]` (an int, not a bool, or an integer with `__index__`, such as NumPy's)."""
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be an int, got bool")
    if not isinstance(value, int):
        try:
            index = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            raise ArgumentTypeError(f"{name} must be an int, got {_type_name(value)}") from None
        if isinstance(index, bool):
            raise ArgumentTypeError(f"{name} must be an int, got {_type_name(value)}")
        value = index
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} = {value} is out of range [{lo}, {hi}]")
    return int(value)


def java_int(value: object, name: str) -> int:
    """A Java `int` (queue ids)."""
    return integer(value, name, JAVA_INT_MIN, JAVA_INT_MAX)


def java_long(value: object, name: str) -> int:
    """A Java `long` (offsets, timestamps)."""
    return integer(value, name, JAVA_LONG_MIN, JAVA_LONG_MAX)


def queue_id(value: object, name: str = "queue_id") -> int:
    """A queue id: a non-negative Java `int`."""
    return integer(value, name, 0, JAVA_INT_MAX)


def positive(value: object, name: str, hi: int = JAVA_INT_MAX) -> int:
    """A count of at least 1."""
    return integer(value, name, 1, hi)


def seconds(value: object, name: str = "timeout") -> float:
    """A timeout: an int or float of seconds, finite and not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentTypeError(f"{name} must be a number of seconds, got {_type_name(value)}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise InvalidArgumentError(f"{name} must be finite and not negative, got {value!r}")
    return v


def text(value: object, name: str) -> str:
    """A `str` that can be stored as UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str, got {_type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{name} {value!r} holds a lone surrogate, which cannot be stored") from None
    return value


def name(value: object, what: str) -> str:
    """A non-empty `str` (see `text`)."""
    s = text(value, what)
    if not s:
        raise InvalidArgumentError(f"{what} must not be empty")
    return s


#: `Validators.CHARACTER_MAX_LENGTH`: the longest group name RocketMQ's client takes.
GROUP_MAX_LEN = 255
_NAME_CHARS = frozenset("%|-_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def group(value: object, what: str = "group") -> str:
    """A consumer or producer group name as RocketMQ's client checks it (`Validators.checkGroup`): a non-empty
    `str` of at most 255 characters from `[%|a-zA-Z0-9_-]` (so never a path: the group registry is a file named
    after it)."""
    s = name(value, what)
    if len(s) > GROUP_MAX_LEN:
        raise InvalidArgumentError(f"{what} {s[:40]!r}... is {len(s)} characters, the limit is {GROUP_MAX_LEN}")
    bad = next((c for c in s if c not in _NAME_CHARS), None)
    if bad is not None:
        raise InvalidArgumentError(f"{what} {s!r} contains {bad!r}; groups may only use [%|a-zA-Z0-9_-]")
    return s


def topic(value: object, what: str = "topic") -> str:
    """A topic name a put would take (`TopicValidator.validateTopic`; system topics too): a non-empty `str` of
    `[%|a-zA-Z0-9_-]`, at most 127 characters (255 for retry and dead-letter topics)."""
    s = name(value, what)
    _native.check_topic_name(s)
    return s


def boolean(value: object, name: str) -> bool:
    """A `bool` (not an int)."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be a bool, got {_type_name(value)}")
    return value
