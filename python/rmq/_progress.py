"""Progress of long commands on a terminal: a bar on stderr with bytes (or messages) per second, messages per
second and the time left; nothing at all when stderr is not a terminal (piped, redirected, in tests)."""

from __future__ import annotations

import sys
import time
from typing import Never, TextIO

from tqdm import tqdm

#: Messages between two bar refreshes: tqdm's own throttle costs a clock read per call.
_BATCH = 256


class Progress:
    """Counts work done; shows it on `stream` (stderr) when that is a terminal and `output` (where the command
    prints its results, if it prints them while it works) is not: results scrolling by on the terminal show the
    progress themselves, and a bar would be torn by them.

    `unit` is what `total` counts: "B" (bytes; shown scaled, KiB/s, MiB/s) or "msg". Messages per second are
    shown beside the bar in both cases.
    """

    def __init__(
        self,
        desc: str,
        total: int | None,
        unit: str = "B",
        *,
        stream: TextIO | None = None,
        output: TextIO | None = None,
    ) -> None:
        stream = stream if stream is not None else sys.stderr
        self._bar: tqdm[Never] | None = None
        if _isatty(stream) and not (output is not None and _isatty(output)):
            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                unit_scale=unit == "B",
                unit_divisor=1024,
                file=stream,
                dynamic_ncols=True,
                mininterval=0.25,
                leave=False,
            )
        self._started = time.monotonic()
        self._pending = 0
        self._messages = 0
        self._pending_messages = 0

    @property
    def active(self) -> bool:
        """Whether a bar is shown."""
        return self._bar is not None

    def update(self, nbytes: int = 0, messages: int = 0) -> None:
        """Adds `nbytes` (or, with unit "msg", nothing: messages count) and `messages` done."""
        if self._bar is None:
            return
        self._pending += nbytes if self._bar.unit == "B" else messages
        self._pending_messages += messages
        if self._pending_messages >= _BATCH or (nbytes and self._pending >= 1 << 20):
            self._flush()

    def _flush(self) -> None:
        if self._bar is None:
            return
        self._messages += self._pending_messages
        elapsed = max(time.monotonic() - self._started, 1e-9)
        # The first count is drawn at once; later ones when tqdm redraws (at most every 0.25 s).
        first = self._messages == self._pending_messages
        self._bar.update(self._pending)
        self._bar.set_postfix_str(f"{self._messages / elapsed:,.0f} msg/s", refresh=first)
        self._pending = 0
        self._pending_messages = 0

    def close(self) -> None:
        """Removes the bar."""
        if self._bar is not None:
            self._flush()
            self._bar.close()
            self._bar = None


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except ValueError:  # closed
        return False
