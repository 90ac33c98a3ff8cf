#!/usr/bin/env python3
"""Draws a prnn training log (the tab-separated log.tsv that `prnn train`
writes) as a PNG: training loss (each step, faint, and a moving average) and
validation loss against step, with bits per byte on the right-hand axis.

    python3 scripts/plot_loss.py out/log.tsv              # writes out/log.png
    python3 scripts/plot_loss.py out/log.tsv -o run.png --title "minGRU 2x128"
    python3 scripts/plot_loss.py a/log.tsv b/log.tsv -o compare.png

Several logs are drawn on one chart, one colour each. A resumed run appends
to its log; where a step appears more than once the last row wins, so the
plot shows the run as it continued. Needs python3 and matplotlib
(pip install matplotlib).
"""
import argparse
import math
import os
import sys

COLUMNS = ("step", "kind", "loss", "bits_per_byte", "grad_norm", "lr",
           "ms_per_step", "tokens_per_s")


def fail(msg):
    print(f"plot_loss.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_log(path):
    """Returns ({step: train loss}, {step: val loss}) with the last row of
    each step winning."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror}")
    header = None
    train, val = {}, {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if header is None:
            if fields[:3] != ["step", "kind", "loss"]:
                fail(f"{path}:{number}: not a prnn training log (expected the "
                     f"header '{chr(9).join(COLUMNS)}')")
            header = fields
            continue
        if fields == header:  # a second header, e.g. from a restarted log
            continue
        if len(fields) != len(header):
            fail(f"{path}:{number}: {len(fields)} fields, the header has {len(header)}")
        try:
            step = int(fields[0])
            loss = float(fields[2])
        except ValueError:
            fail(f"{path}:{number}: step '{fields[0]}' or loss '{fields[2]}' is not a number")
        if fields[1] == "train":
            train[step] = loss
        elif fields[1] == "val":
            val[step] = loss
        else:
            fail(f"{path}:{number}: unknown row kind '{fields[1]}' (train or val)")
    if header is None:
        fail(f"{path}: no header line: empty or not a prnn training log")
    if not train and not val:
        fail(f"{path}: the log has no rows yet")
    return train, val


def moving_average(xs, window):
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x
        if i >= window:
            total -= xs[i - window]
        out.append(total / min(i + 1, window))
    return out


def main():
    ap = argparse.ArgumentParser(
        description="Plot train and validation loss of prnn training logs.")
    ap.add_argument("logs", nargs="+", metavar="LOG", help="log.tsv written by prnn train")
    ap.add_argument("-o", "--output", help="PNG to write (default: the first log with .png)")
    ap.add_argument("--title", help="chart title (default: the log file names)")
    ap.add_argument("--smooth", type=int, default=0, metavar="N",
                    help="moving-average window in steps (default: 2%% of the steps, at least 1)")
    ap.add_argument("--ymax", type=float, help="upper limit of the loss axis")
    args = ap.parse_args()
    if args.smooth < 0:
        fail("--smooth wants a window of at least 0 steps")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("needs matplotlib: pip install matplotlib")

    output = args.output or os.path.splitext(args.logs[0])[0] + ".png"
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lo, hi = math.inf, -math.inf
    for i, path in enumerate(args.logs):
        train, val = read_log(path)
        color = colors[i % len(colors)]
        name = os.path.basename(os.path.dirname(os.path.abspath(path))) if len(args.logs) > 1 else ""
        prefix = f"{name}: " if name else ""
        if train:
            steps = sorted(train)
            losses = [train[s] for s in steps]
            window = args.smooth or max(1, len(steps) // 50)
            ax.plot(steps, losses, color=color, alpha=0.2, linewidth=0.8)
            ax.plot(steps, moving_average(losses, window), color=color, linewidth=1.6,
                    label=f"{prefix}train (average of {window})")
            lo, hi = min(lo, min(losses)), max(hi, max(losses))
        if val:
            steps = sorted(val)
            losses = [val[s] for s in steps]
            ax.plot(steps, losses, color=color, linestyle="--", marker="o", markersize=3.5,
                    linewidth=1.4, label=f"{prefix}validation (last {losses[-1]:.4f} nats, "
                    f"{losses[-1] / math.log(2):.3f} bits/byte)")
            lo, hi = min(lo, min(losses)), max(hi, max(losses))

    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per scored byte)")
    if args.ymax is not None:
        ax.set_ylim(top=args.ymax)
    elif hi > lo:
        ax.set_ylim(max(0.0, lo - 0.05 * (hi - lo)), hi + 0.05 * (hi - lo))
    ax.grid(True, alpha=0.3)
    right = ax.secondary_yaxis("right", functions=(lambda n: n / math.log(2),
                                                    lambda b: b * math.log(2)))
    right.set_ylabel("bits per byte")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(args.title or ", ".join(args.logs), fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(output)
    except OSError as e:
        fail(f"{output}: cannot write: {e.strerror}")
    print(output)


if __name__ == "__main__":
    main()
