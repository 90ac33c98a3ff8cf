#!/usr/bin/env python3
"""
merge.py - one report from several runs of run.py on the same card: for
finishing a section that a run could not complete (a peer's call that
never returned, a time limit) without measuring everything again.

  python3 bench/peers/merge.py --out OUT RUN1.json RUN2.json ... [--preface FILE]
      [--row '{"peer": ..., "dtype": ..., "B": .., "T": .., "H": .., "mode": ..,
               "status": "fail", "short": "...", "why": "..."}' ...]

Each RUN is the NAME.json a run wrote (every section it ran, and its run
record). Rows are matched by case (peer, dtype, B, T, H, mode); a later
run's row replaces an earlier one's, except that a row without a number
never replaces one with a number. --row adds an observed outcome that no
run recorded (for instance a call seen to hang in a run whose harness did
not yet leave a row for it); its `why` must say so. Failures and notes of
all runs are kept. The report lists every run's command and time, then is
rendered as run.py renders it (OUT/NAME.md, plots, NAME.json).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import row_key  # noqa: E402

SECTIONS = ["scan", "layers", "wall", "train"]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="NAME.json files of run.py, oldest first")
    ap.add_argument("--out", required=True, help="report, plots and JSON go here")
    ap.add_argument("--name", default="peers_h200")
    ap.add_argument("--preface", default=None, help="a markdown file printed after the header: what the "
                    "reader must know about this merge")
    ap.add_argument("--row", action="append", default=[], help="an observed row (JSON) with its section: "
                    "{\"section\": \"layers\", ...}")
    a = ap.parse_args(argv)

    sections = {}
    merged = []
    for path in a.runs:
        with open(path) as f:
            d = json.load(f)
        run = d.get("run", {})
        secs = [s for s in SECTIONS if s in d.get("sections", {})]
        merged.append({"file": os.path.basename(path), "command": run.get("command", "?"),
                       "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(run.get("started", 0))),
                       "sections": secs})
        for s in secs:
            src = d["sections"][s]
            if s not in sections:
                sections[s] = {k: v for k, v in src.items() if k != "rows"}
                sections[s]["rows"] = []
                sections[s]["failures"] = list(src.get("failures", []))
                sections[s]["notes"] = list(src.get("notes", []))
            else:
                dst = sections[s]
                dst["failures"] += src.get("failures", [])
                dst["notes"] += [n for n in src.get("notes", []) if n not in dst["notes"]]
                dst["finished"] = src.get("finished", dst.get("finished"))
            rows = sections[s]["rows"]
            for r in src.get("rows", []):
                key = row_key(r)
                old = next((i for i, x in enumerate(rows) if row_key(x) == key), None)
                if old is None:
                    rows.append(r)
                elif r.get("status", "ok") == "ok" or rows[old].get("status", "ok") != "ok":
                    rows[old] = r
    for text in a.row:
        r = json.loads(text)
        s = r.pop("section")
        if s not in sections:
            sys.exit(f"--row for section {s}, which no run has")
        rows = sections[s]["rows"]
        key = row_key(r)
        if any(row_key(x) == key and x.get("status", "ok") == "ok" for x in rows):
            sys.exit(f"--row {text}: a run measured this case")
        sections[s]["rows"] = [x for x in rows if row_key(x) != key] + [r]

    import tempfile
    work = tempfile.mkdtemp(prefix="prnn-peers-merge-")
    for s, st in sections.items():
        with open(os.path.join(work, f"{s}.json"), "w") as f:
            json.dump(st, f, indent=1, default=str)
    run = {"command": "bench/peers/merge.py " + " ".join(m["file"] for m in merged), "merged": merged,
           "started": time.time(), "sections": {}, "notes": []}
    with open(os.path.join(work, "run.json"), "w") as f:
        json.dump(run, f, indent=1)
    import report
    preface = open(a.preface).read() if a.preface else None
    print(report.render(work, a.out, a.name, preface=preface))
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
