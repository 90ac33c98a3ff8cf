#!/usr/bin/env python3
"""
run.py - prnn against what users would pick instead, on the GPU: one entry
point that measures four sections and writes a markdown report with PNG plots.

  1. scan    the scan alone, forward and forward+backward, fp32 and bf16,
             against the copy roofline: prnn (chunked, tree, serial),
             accelerated-scan (CUDA and Triton kernels), PyTorch log-space
             scan (eager, compiled)
  2. layers  one layer's training step at D = H = 1024: prnn minGRU, minLSTM,
             QRNN, SRU against cuDNN LSTM / GRU and a PyTorch minGRU
  3. wall    time against T at B = 1 (cuDNN LSTM, prnn serial scan, prnn
             parallel scan, prnn minGRU layer): the O(T) wall, log-log
  4. train   `prnn train` tokens/s against the same model in PyTorch

Each section runs in its own process with its own share of the time budget
(--budget seconds in all), so a crash, a CUDA error that poisons the context
or a hang costs that section only; each writes its rows to WORK/<section>.json
after every measurement, and the report is rendered again after every
section from whatever is there. Output in OUT: NAME.md, NAME_scan.png,
NAME_layers.png, NAME_wall.png and NAME.json (all rows).

  python3 bench/peers/run.py --lib build-gpu/libprnn_shared.so --prnn build-gpu/prnn --out OUT
  python3 bench/peers/run.py --dry-run --out /tmp/peers   # no GPU: synthetic rows, same report
  python3 bench/peers/run.py --render-only --out OUT      # the report from WORK's files again

scripts/bench_peers.sh builds what this needs and runs it on the GPU machine.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

SECTIONS = ["scan", "layers", "wall", "train"]
WEIGHTS = {"scan": 0.36, "layers": 0.30, "wall": 0.12, "train": 0.22}
GRACE_S = 30.0     # past its share a section is killed
RESERVE_S = 10.0   # kept for the last rendering


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "gpu-out", "peers"), help="report, plots and JSON go here")
    ap.add_argument("--work", default=None, help="per-section result files (default OUT/../peers-work)")
    ap.add_argument("--name", default="peers_h200", help="file name stem of the report")
    ap.add_argument("--lib", default=None, help="libprnn_shared.so (default build-gpu/ or build/)")
    ap.add_argument("--prnn", default=os.path.join(ROOT, "build-gpu", "prnn"), help="the prnn program")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for all sections together")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of " + ",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="fewer shapes and lengths")
    ap.add_argument("--layer-configs", default=None,
                    help="layers section: only these dtype:B:T cases, comma-separated (e.g. bf16:1:4096)")
    ap.add_argument("--layer-peers", default=None,
                    help="layers section: only these peers, comma-separated (ids as in the JSON)")
    ap.add_argument("--command", default=None, help="the command line to print in the report")
    ap.add_argument("--dry-run", action="store_true", help="synthetic rows instead of measurements (no GPU, no torch)")
    ap.add_argument("--render-only", action="store_true", help="only write the report from the files in WORK")
    # internal: one section in this process
    ap.add_argument("--section", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--in-child", action="store_true", help=argparse.SUPPRESS)  # a section's own child
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.work = a.work or os.path.join(os.path.dirname(os.path.abspath(a.out)), "peers-work")
    return a


def child(args):
    """One section, in this process."""
    from common import Budget, Store
    store = Store(args.store, args.section, fake=args.dry_run)
    budget = Budget(args.deadline or time.time() + 600)
    try:
        if args.dry_run:
            import fake
            fake.run(args.section, store, budget, args)
        else:
            mod = __import__({"scan": "sec_scan", "layers": "sec_layers", "wall": "sec_wall",
                              "train": "sec_train"}[args.section])
            mod.run(store, budget, args)
    except Exception as e:
        store.fail(f"section {args.section}", e)
    finally:
        store.finish()
    return 0


def render(args, run_meta):
    import report
    try:
        path = report.render(args.work, args.out, args.name, command=run_meta.get("command"))
        print(f"report: {path}", flush=True)
    except Exception as e:
        import traceback
        traceback.print_exc()
        print(f"report failed: {type(e).__name__}: {e}", flush=True)


def save_run(args, run_meta):
    p = os.path.join(args.work, "run.json")
    with open(p + ".tmp", "w") as f:
        json.dump(run_meta, f, indent=1)
    os.replace(p + ".tmp", p)


def main(argv):
    args = parse(argv)
    if args.section:
        return child(args)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    if args.render_only:
        p = os.path.join(args.work, "run.json")
        run_meta = json.load(open(p)) if os.path.exists(p) else {}
        render(args, run_meta)
        return 0
    sections = [s for s in args.sections.split(",") if s]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        print(f"unknown section(s): {', '.join(bad)}", file=sys.stderr)
        return 2
    for s in SECTIONS:  # results of an earlier run would mix with this one's
        p = os.path.join(args.work, f"{s}.json")
        if os.path.exists(p):
            os.remove(p)
    cmd = args.command or " ".join(["python3", os.path.relpath(os.path.abspath(__file__), ROOT)] + argv)
    run_meta = {"command": cmd, "started": time.time(), "budget_s": args.budget, "sections": {}, "notes": []}
    save_run(args, run_meta)
    t_end = time.time() + args.budget
    print(f"peers: sections {', '.join(sections)}, {args.budget:.0f} s in all, results in {args.work}, report in {args.out}", flush=True)
    passthrough = ["--out", args.out, "--work", args.work, "--name", args.name, "--prnn", args.prnn]
    if args.lib:
        passthrough += ["--lib", args.lib]
    if args.quick:
        passthrough.append("--quick")
    if args.layer_configs:
        passthrough += ["--layer-configs", args.layer_configs]
    if args.layer_peers:
        passthrough += ["--layer-peers", args.layer_peers]
    if args.dry_run:
        passthrough.append("--dry-run")
    for i, s in enumerate(sections):
        left = t_end - time.time() - RESERVE_S
        share = max(15.0, left * WEIGHTS[s] / sum(WEIGHTS[x] for x in sections[i:]))
        t0 = time.time()
        deadline = t0 + share
        print(f"== section {s}: {share:.0f} s (killed at {share + GRACE_S:.0f} s)", flush=True)
        store = os.path.join(args.work, f"{s}.json")
        proc = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "--section", s, "--store", store,
                                 "--deadline", repr(deadline)] + passthrough,
                                start_new_session=True)  # its own group: a kill takes its helpers too
        info = {"share_s": round(share, 1)}
        try:
            info["rc"] = proc.wait(timeout=share + GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            info["rc"] = "killed"
            run_meta["notes"].append(f"section {s} ran past its share ({share:.0f} s + {GRACE_S:.0f} s) and was killed; "
                                     "its rows up to then are kept")
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        info["wall_s"] = round(time.time() - t0, 1)
        if info["rc"] not in (0, "killed"):
            run_meta["notes"].append(f"section {s} exited with code {info['rc']} (a crash: the rows written before it are kept)")
        if not os.path.exists(store):
            run_meta["notes"].append(f"section {s} wrote no results")
        run_meta["sections"][s] = info
        run_meta["finished"] = time.time()
        save_run(args, run_meta)
        print(f"== section {s} done: {info}", flush=True)
        render(args, run_meta)
    print(f"peers: done in {time.time() - run_meta['started']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
