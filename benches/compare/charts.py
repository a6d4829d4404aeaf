"""The PNG charts of `make bench-compare` (benches/compare/run.py draws them after a run; `run.py --charts-only
RESULTS.json` redraws them from a results JSON), written beside the JSON:

- `<name>-ratios.png`: rmq / RocketMQ per workload (medians of the rounds; for latencies and seconds, Java's /
  rmq's), from Python and from Rust, on a log scale, with issue 19's goals as lines and parity at 1.
- `<name>-throughput.png`: msg/s per workload for RocketMQ and rmq from Python and Rust, and beside it the
  durable local logs a Python user would otherwise pick against rmq from Python (put + consume, 1 KiB).

Both carry the run's date and machine in their title. Uses matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SIDES = (("java", "RocketMQ 5.3.1 (Java)", "#9e9e9e"), ("rmq", "rmq from Python", "#1f77b4"),
         ("rust", "rmq from Rust", "#ff7f0e"))  # fmt: skip


def _label(measure: str) -> str:
    """A table row's measure, shortened for an axis."""
    return measure.replace(" (Python: `MessageExt`s)", "").replace(", 32 per call", "").replace(", msg/s", "")


def _subtitle(doc: dict[str, Any]) -> str:
    m = doc.get("machine", {})
    s = doc.get("settings", {})
    cpu = m.get("cpu_model") or m.get("platform", "")
    rounds = s.get("rounds", "?")
    return f"{doc.get('date', '')[:16].replace('T', ' ')} UTC, {m.get('cpus', '?')} CPUs {cpu}, {rounds} round(s)"


def draw(doc: dict[str, Any], json_path: Path) -> list[Path]:
    """Draws both charts for the results `doc` (as run.py writes it) next to `json_path`; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = json_path.with_suffix("")
    out = []
    # The "until dispatched" and p99 rows stay in the table and the JSON: the charts keep to the main figures.
    rows = [
        e for e in doc.get("table", [])
        if "java" in e and ("rmq" in e or "rust" in e) and "until dispatched" not in e["measure"]
        and "p99" not in e["measure"]
    ]  # fmt: skip
    if rows:
        fig, ax = plt.subplots(figsize=(10, 0.5 * len(rows) + 1.8))
        height = 0.38
        for i, e in enumerate(rows):
            y = len(rows) - 1 - i
            for j, (side, label, color) in enumerate(SIDES[1:]):
                c = e.get(side)
                if not c:
                    continue
                yy = y + (0.2 if j == 0 else -0.2)
                ax.barh(yy, c["ratio"], height=height, color=color, label=label if i == 0 else None)
                ax.text(c["ratio"] * 1.04, yy, f"{c['ratio']:.2f}", va="center", fontsize=7)
                if c.get("goal"):
                    ax.plot([c["goal"]] * 2, [yy - height / 2, yy + height / 2], color="#d62728", lw=2,
                            label="goal" if not any(t.get_label() == "goal" for t in ax.lines) else None)  # fmt: skip
        ax.axvline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xscale("log")
        xs = [e[side]["ratio"] for e in rows for side in ("rmq", "rust") if side in e]
        xs += [e[side]["goal"] for e in rows for side in ("rmq", "rust") if side in e and e[side].get("goal")]
        ax.set_xlim(min(min(xs), 1.0) / 1.5, max(max(xs), 1.0) * 2)
        ax.set_yticks(range(len(rows)), [_label(e["measure"]) for e in reversed(rows)], fontsize=7)
        ax.set_xlabel("rmq / RocketMQ (medians; latencies and seconds: RocketMQ's / rmq's), log scale")
        ax.set_title(f"rmq against RocketMQ 5.3.1's DefaultMessageStore\n{_subtitle(doc)}", fontsize=9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.6 / len(rows)), ncol=3)
        fig.tight_layout()
        path = Path(f"{stem}-ratios.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    rates = [e for e in rows if not e["plain"]]
    baselines = doc.get("baselines", [])
    if rates or baselines:
        fig, axes = plt.subplots(1, 2, figsize=(14, 0.45 * max(len(rates), len(baselines), 4) + 2),
                                 gridspec_kw={"width_ratios": [3, 2]})  # fmt: skip
        ax = axes[0]
        height = 0.27
        for i, e in enumerate(rates):
            y = len(rates) - 1 - i
            for j, (side, label, color) in enumerate(SIDES):
                c = e.get(side)
                if c:
                    ax.barh(y + (1 - j) * height, c["median"], height=height, color=color,
                            label=label if i == 0 else None)  # fmt: skip
        ax.set_xscale("log")
        ax.set_yticks(range(len(rates)), [_label(e["measure"]) for e in reversed(rates)], fontsize=7)
        ax.set_xlabel("msg/s (median of rounds), log scale")
        ax.set_title("RocketMQ and rmq", fontsize=9)
        if rates:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.6 / len(rates)), ncol=3)
        ax = axes[1]
        for i, e in enumerate(baselines):
            y = len(baselines) - 1 - i
            color = "#1f77b4" if e["kind"].startswith("rmq") else "#8c564b"
            ax.barh(y, e["rate"], color=color)
            ax.text(e["rate"] * 1.05, y, f"{e['rate']:,.0f}", va="center", fontsize=7)
        ax.set_xscale("log")
        ax.set_yticks(range(len(baselines)), [e["kind"] for e in reversed(baselines)], fontsize=7)
        ax.set_xlabel("msg/s, put then consume, 1 KiB, from Python, log scale")
        ax.set_title("durable local logs from Python", fontsize=9)
        fig.suptitle(f"Throughput\n{_subtitle(doc)}", fontsize=9)
        fig.tight_layout()
        path = Path(f"{stem}-throughput.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out
