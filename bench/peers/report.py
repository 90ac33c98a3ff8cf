"""
report.py - turns the sections' result files into the markdown report and
its PNG plots (matplotlib, Agg). Needs neither torch nor a GPU; every part
is drawn from whatever rows exist, so a section that failed or ran out of
time still leaves its table, with the reason in each empty cell.
"""
import json
import os
import time

import sec_layers
import sec_scan
import sec_train
import sec_wall

SECTIONS = ["scan", "layers", "wall", "train"]
STATUS_WORD = {"skip": "skipped", "unsupported": "cannot run", "fail": "failed", "budget": "not run (time)",
               "running": "no result"}


def load(work):
    stores = {}
    for s in SECTIONS:
        p = os.path.join(work, f"{s}.json")
        if os.path.exists(p):
            try:
                with open(p) as f:
                    stores[s] = json.load(f)
            except Exception as e:  # a file cut short by a kill
                stores[s] = {"section": s, "rows": [], "failures": [{"what": "reading results", "error": str(e)}],
                             "notes": [], "env": {}, "meta": {}}
    run = {}
    p = os.path.join(work, "run.json")
    if os.path.exists(p):
        with open(p) as f:
            run = json.load(f)
    return stores, run


def fmt_ms(ms):
    if ms is None:
        return "-"
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    if ms >= 0.1:
        return f"{ms:.3f}"
    return f"{ms:.4f}"


def fmt_T(T):
    if T >= 1 << 20 and T % (1 << 20) == 0:
        return f"{T >> 20}M"
    if T >= 1024 and T % 1024 == 0:
        return f"{T >> 10}K"
    return str(T)


def cell_text(row, value=None):
    if row is None:
        return "—"
    if row.get("status", "ok") == "ok":
        return value if value is not None else fmt_ms(row.get("ms"))
    return f"{STATUS_WORD.get(row['status'], row['status'])}: {row.get('short') or row.get('why', '')}"


def index(rows, *keys):
    out = {}
    for r in rows:
        out[tuple(r.get(k) for k in keys)] = r  # a later row (a deferred pass) wins
    return out


def ok_ms(r):
    return r.get("ms") if r and r.get("status", "ok") == "ok" and r.get("ms") else None


def noise(r1, r2):
    """' (within the spread)' when each row's median lies within the other's
    [min, max] over its repetitions (overlapping ranges alone would let one
    slow outlier call cover a 1.5x difference)."""
    a, b = (r1 or {}).get("extra", {}), (r2 or {}).get("extra", {})
    ma, mb = (r1 or {}).get("ms"), (r2 or {}).get("ms")
    if (ma is not None and mb is not None and all(k in a and k in b for k in ("min_ms", "max_ms"))
            and b["min_ms"] <= ma <= b["max_ms"] and a["min_ms"] <= mb <= a["max_ms"]):
        return " (within the spread of the repetitions)"
    return ""


def peer_labels(store, fallback):
    m = {p["id"]: p for p in (store or {}).get("meta", {}).get("peers", [])}
    return {pid: m.get(pid, {"label": lab, "setting": st}) for pid, lab, st, *_ in fallback}


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |" for r in rows]
    return "\n".join(out)


def gaps(store, labels):
    """Rows without a number, grouped by reason (peers and places listed), then failures and notes."""
    out = []
    groups = {}
    for r in store.get("rows", []):
        if r.get("status", "ok") == "ok":
            continue
        g = groups.setdefault((r.get("status"), r.get("why", "")), ([], []))
        lab = labels.get(r.get("peer"), {}).get("label", r.get("peer"))
        if lab not in g[0]:
            g[0].append(lab)
        where = " ".join(str(x) for x in (r.get("dtype", ""), r.get("mode", ""), f"B={r.get('B')}",
                                          f"T={fmt_T(r.get('T', 0))}", f"H={r.get('H')}"))
        if where not in g[1]:
            g[1].append(where)
    for (st, why), (peers, places) in groups.items():
        out.append(f"- {', '.join(peers)}: {STATUS_WORD.get(st, st)}: {why} ({'; '.join(places)})")
    for f in store.get("failures", []):
        out.append(f"- error in {f.get('what')}: `{f.get('error', '')[:400]}`")
    for n in store.get("notes", []):
        out.append(f"- note: {n}")
    return out


# ---------------------------------------------------------------------------
# Plots

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_scan(store, path):
    plt = _plt()
    rows = store["rows"]
    bw = store["meta"].get("copy_gbps")
    labels = peer_labels(store, sec_scan.PEERS)
    idx = index(rows, "peer", "dtype", "B", "T", "H", "mode")
    shapes = sorted({(r["B"], r["H"], r["T"]) for r in rows if ok_ms(r)}, key=lambda s: (s[0] * s[1], s[2]))
    fig, axes = plt.subplots(2, 2, figsize=(15, 8.5), sharey=True)
    peers = sec_scan.PEER_IDS
    width = 0.8 / len(peers)
    for i, mode in enumerate(sec_scan.MODES):
        for j, dt in enumerate(sec_scan.DTYPES):
            ax = axes[i][j]
            for k, p in enumerate(peers):
                xs, ys = [], []
                for si, (B, H, T) in enumerate(shapes):
                    r = idx.get((p, dt, B, T, H, mode))
                    ms = ok_ms(r)
                    if ms and bw:
                        xs.append(si + (k - len(peers) / 2 + 0.5) * width)
                        ys.append(B * T * H * sec_scan.BYTES_PER_ELEM[(dt, mode)] / (ms * 1e-3) / (bw * 1e9))
                ax.bar(xs, ys, width, label=labels[p]["label"])
            ax.set_xticks(range(len(shapes)))
            ax.set_xticklabels([f"B*H={B * H}\nT={fmt_T(T)}" for B, H, T in shapes], fontsize=8)
            ax.set_title(f"{dt}, {'forward' if mode == 'fwd' else 'forward + backward'}")
            ax.set_ylim(0, 1.05)
            ax.axhline(1.0, color="k", lw=0.6, ls=":")
            ax.grid(axis="y", alpha=0.3)
            if j == 0:
                ax.set_ylabel("fraction of the copy roofline")
    axes[0][0].legend(fontsize=8, ncol=2, loc="upper left")
    fig.suptitle("The scan alone: achieved bytes/s over device-to-device copy bandwidth (higher is better; missing bar = no number, see the tables)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_wall(store, path):
    plt = _plt()
    labels = peer_labels(store, sec_wall.PEERS)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for p in sec_wall.PEER_IDS:
        pts = sorted((r["T"], r["ms"]) for r in store["rows"] if r.get("peer") == p and ok_ms(r))
        if pts:
            ax.loglog([t for t, _ in pts], [m for _, m in pts], "o-", label=labels[p]["label"])
    ax.axhline(2000, color="k", lw=0.6, ls=":")
    ax.text(300, 1200, "2 s: a peer stops here", fontsize=8)
    m = store.get("meta", {})
    ax.set_xlabel(f"T (time steps), B = {m.get('B', 1)}, H = D = {m.get('H', 1024)}, {m.get('dtype', 'bf16')}")
    ax.set_ylabel("ms per forward + backward")
    ax.set_title("The O(T) wall: time against sequence length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_layers(store, path):
    plt = _plt()
    labels = peer_labels(store, sec_layers.PEERS)
    idx = index(store["rows"], "peer", "dtype", "B", "T")
    cfgs = sorted({(r["B"], r["T"]) for r in store["rows"]}, key=lambda c: (-c[0], c[1]))
    peers = sec_layers.PEER_IDS
    fig, axes = plt.subplots(2, 1, figsize=(14, 9))
    width = 0.8 / len(peers)
    for ax, dt in zip(axes, sec_layers.DTYPES):
        for k, p in enumerate(peers):
            xs, ys = [], []
            for ci, (B, T) in enumerate(cfgs):
                ms = ok_ms(idx.get((p, dt, B, T)))
                if ms:
                    xs.append(ci + (k - len(peers) / 2 + 0.5) * width)
                    ys.append(ms)
            ax.bar(xs, ys, width, label=labels[p]["label"])
        ax.set_yscale("log")
        ax.set_xticks(range(len(cfgs)))
        ax.set_xticklabels([f"B={B}\nT={fmt_T(T)}" for B, T in cfgs], fontsize=8)
        ax.set_ylabel("ms per training step (log)")
        ax.set_title(f"One layer, forward + backward, D = H = 1024, {dt} (lower is better)")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------
# Markdown

def env_lines(stores, run):
    env = {}
    for s in SECTIONS:
        if stores.get(s, {}).get("env", {}).get("gpu") or (stores.get(s, {}).get("env") and not env):
            env = stores[s]["env"]
            if env.get("gpu"):
                break
    smi = env.get("nvidia_smi", {})
    out = []
    gpu = env.get("gpu") or smi.get("name") or "unknown"
    out.append(f"- GPU: {gpu}" + (f", {env['sms']} SMs" if env.get("sms") else "")
               + (f", {env['l2_bytes'] / 2**20:.0f} MiB L2" if env.get("l2_bytes") else "")
               + (f", {env['gpu_mem_gib']} GiB" if env.get("gpu_mem_gib") else "")
               + (f", compute capability {env['cc']}" if env.get("cc") else ""))
    if smi:
        out.append(f"- Driver {smi.get('driver_version', '?')}; clocks when the first section started: SM "
                   f"{smi.get('clocks.sm', '?')} (max {smi.get('clocks.max.sm', '?')}), memory {smi.get('clocks.mem', '?')} "
                   f"(max {smi.get('clocks.max.mem', '?')}); power limit {smi.get('power.limit', '?')}; "
                   f"{smi.get('temperature.gpu', '?')} C")
    last = {}
    for s in reversed(SECTIONS):
        last = stores.get(s, {}).get("env", {}).get("nvidia_smi") or {}
        if last:
            break
    if last and last is not smi:
        out.append(f"- Clocks when the last section started: SM {last.get('clocks.sm', '?')}, memory "
                   f"{last.get('clocks.mem', '?')}, {last.get('power.draw', '?')}, {last.get('temperature.gpu', '?')} C")
    sw = [f"Python {env.get('python', '?')}", f"PyTorch {env.get('torch', 'missing')} (CUDA {env.get('torch_cuda', '?')}, cuDNN {env.get('cudnn', '?')})",
          f"Triton {env.get('triton') or 'missing'}", f"accelerated-scan {env.get('accelerated_scan') or 'missing'}",
          f"numpy {env.get('numpy') or 'missing'}", f"nvcc: {env.get('nvcc', '?')}"]
    pv = stores.get("scan", {}).get("meta", {}).get("prnn_version")
    if pv:
        sw.insert(0, f"prnn {pv}")
    out.append("- Software: " + ", ".join(sw))
    out.append(f"- PyTorch defaults left as they are: matmul TF32 {env.get('matmul_allow_tf32', '?')}, "
               f"cuDNN TF32 {env.get('cudnn_allow_tf32', '?')}")
    if env.get("torch_error"):
        out.append(f"- PyTorch could not be loaded: {env['torch_error']}")
    return out


def section_scan(st, name, lines, loses):
    labels = peer_labels(st, sec_scan.PEERS)
    meta = st.get("meta", {})
    bw = meta.get("copy_gbps")
    lines.append("## 1. The scan alone\n")
    roof = f"Copy roofline: {bw:.0f} GB/s" if bw else "Copy roofline: not measured"
    lines.append(f"h_t = a_t h_(t-1) + b_t over B*H sequences of length T, forward and forward + backward. {roof} "
                 "(a 1 GiB device-to-device copy, bytes read + written, median of 25, in the same run). "
                 "Bytes per element: fp32 12 forward (read a, b; write h), 32 forward + backward (the backward "
                 "reads a, h, dh and writes da, db); bf16 half of that. A cell is ms (fraction of the roofline). "
                 "Inputs are random: a in (0.5, 1), b in (0.01, 1) (positive, so that the log-space scan "
                 "applies), dh in (-1, 1); no initial or final states for anyone. Where one input set is "
                 "smaller than 4x the L2 cache, calls rotate through up to 16 copies. "
                 "The last column is the fastest other peer's time over prnn AUTO's "
                 "(above 1: prnn is faster).\n")
    lines.append("Each peer's setting:\n")
    for pid in sec_scan.PEER_IDS:
        lines.append(f"- **{labels[pid]['label']}**: {labels[pid]['setting']}")
    lines.append("")
    rows = st.get("rows", [])
    idx = index(rows, "peer", "dtype", "B", "T", "H", "mode")
    shapes = sorted({(r["dtype"], r["B"], r["H"], r["T"]) for r in rows},
                    key=lambda s: (sec_scan.DTYPES.index(s[0]) if s[0] in sec_scan.DTYPES else 9, s[1] * s[2], s[3]))
    for mode in sec_scan.MODES:
        lines.append(f"### {'Forward' if mode == 'fwd' else 'Forward + backward'}\n")
        head = ["dtype", "B", "T", "H"] + [labels[p]["label"] for p in sec_scan.PEER_IDS] + ["fastest other / prnn AUTO"]
        body = []
        for dt, B, H, T in shapes:
            cells = []
            for p in sec_scan.PEER_IDS:
                r = idx.get((p, dt, B, T, H, mode))
                ms = ok_ms(r)
                frac = (B * T * H * sec_scan.BYTES_PER_ELEM[(dt, mode)] / (ms * 1e-3) / (bw * 1e9)) if ms and bw else None
                cells.append(cell_text(r, f"{fmt_ms(ms)} ({100 * frac:.0f}%)" if frac is not None else None))
            mine = ok_ms(idx.get(("prnn-chunked", dt, B, T, H, mode)))
            others = [(ok_ms(idx.get((p, dt, B, T, H, mode))), p) for p in sec_scan.PEER_IDS if not p.startswith("prnn-")]
            others = [(m, p) for m, p in others if m]
            best = min(others) if others else None
            if mine and best:
                cells.append(f"{best[0] / mine:.2f} ({labels[best[1]]['label']})")
                if best[0] < mine:
                    nz = noise(idx.get(("prnn-chunked", dt, B, T, H, mode)), idx.get((best[1], dt, B, T, H, mode)))
                    loses.append(f"scan {dt} {'forward' if mode == 'fwd' else 'forward + backward'} B={B} T={fmt_T(T)} H={H}: "
                                 f"{labels[best[1]]['label']} {fmt_ms(best[0])} ms against prnn AUTO {fmt_ms(mine)} ms "
                                 f"(prnn {mine / best[0]:.2f}x slower{nz})")
            else:
                cells.append("—")
            body.append([dt, B, fmt_T(T), H] + cells)
        lines.append(table(head, body))
        lines.append("")
    # accelerated-scan's CUDA kernel runs in child processes: where it failed
    warp_bad = sorted({(dt, B, H, T) for (p, dt, B, T, H, m), r in idx.items()
                       if p == "acc-warp" and r.get("status") == "fail"
                       and r.get("short") not in ("not built", "extension build failed", "build not done in time")},
                      key=lambda s: (sec_scan.DTYPES.index(s[0]) if s[0] in sec_scan.DTYPES else 9, s[1] * s[2], s[3]))
    if warp_bad:
        whys = {}
        for dt, B, H, T in warp_bad:
            for m in sec_scan.MODES:
                r = idx.get(("acc-warp", dt, B, T, H, m))
                if r and r.get("status") == "fail":
                    whys.setdefault(r.get("why") or r.get("short") or "?", []).append(f"{dt} B={B} T={fmt_T(T)} H={H} {m}")
        lines.append(f"{labels['acc-warp']['label']} failed at " + "; ".join(
            f"{', '.join(where)} ({why[:200]})" for why, where in whys.items()) + ". "
            "It runs in child processes of the section (an illegal memory access breaks a process's CUDA "
            "context for good: on an H200 its bf16 kernel made one at T = 64K, H = 64 and at T = 4K, H = 256 "
            "in earlier runs), so a failure costs that peer's rows at that shape only.\n")
    # accuracy
    acc_rows = []
    for dt, B, H, T in shapes:
        vals = []
        any_ = False
        for p in sec_scan.PEER_IDS:
            r = idx.get((p, dt, B, T, H, "fwd"))
            e = (r or {}).get("extra", {}).get("relerr") if r else None
            if e is not None:
                any_ = True
                vals.append("inf/NaN" if e == float("inf") or e != e else f"{e:.1e}")
            else:
                vals.append("—")
        if any_:
            acc_rows.append([dt, B, fmt_T(T), H] + vals)
    if acc_rows:
        lines.append("### Forward accuracy\n")
        lines.append("||h - h_ref|| / ||h_ref|| against prnn's float64 CPU serial scan of the same (rounded) inputs, "
                     f"for shapes up to {sec_scan.ACC_MAX_N >> 20}M elements. bf16 outputs carry bf16 rounding (about 2e-3).\n")
        lines.append(table(["dtype", "B", "T", "H"] + [labels[p]["label"] for p in sec_scan.PEER_IDS], acc_rows))
        lines.append("")
    lines.append(f"![scan against the roofline]({name}_scan.png)\n")


def section_layers(st, name, lines, loses):
    labels = peer_labels(st, sec_layers.PEERS)
    meta = st.get("meta", {})
    lines.append("## 2. One layer's training step\n")
    lines.append("Forward + backward of one recurrent layer with D = H = 1024 (input gradient and all weight "
                 "gradients), GEMMs included, in ms (median). Inputs random in (-1, 1), the same inputs for every "
                 "peer and no rotation between calls (the smallest cases fit in L2, as they would in training). "
                 "The ratio columns are the "
                 "peer's time over prnn minGRU's (above 1: prnn is faster); minGRU against minGRU is the same "
                 "function, the cuDNN cells are what a user would otherwise train.\n")
    if meta.get("mingru_agreement_relerr") is not None:
        lines.append(f"prnn's minGRU and the PyTorch minGRU compute the same function: on the same weights (fp32, "
                     f"B = 2, T = 1024) their outputs differ by {meta['mingru_agreement_relerr']:.1e} (relative).\n")
    for pid in sec_layers.PEER_IDS:
        lines.append(f"- **{labels[pid]['label']}**: {labels[pid]['setting']}")
    lines.append("")
    rows = st.get("rows", [])
    idx = index(rows, "peer", "dtype", "B", "T")
    for dt in sec_layers.DTYPES:
        cfgs = sorted({(r["B"], r["T"]) for r in rows if r.get("dtype") == dt}, key=lambda c: (-c[0], c[1]))
        if not cfgs:
            continue
        lines.append(f"### {dt}\n")
        head = ["B", "T"] + [labels[p]["label"] for p in sec_layers.PEER_IDS] + \
               ["PyTorch minGRU (best) / prnn minGRU", "cuDNN LSTM / prnn minGRU", "cuDNN GRU / prnn minGRU"]
        body = []
        for B, T in cfgs:
            cells = [cell_text(idx.get((p, dt, B, T))) for p in sec_layers.PEER_IDS]
            mine = ok_ms(idx.get(("prnn-mingru", dt, B, T)))
            tm = [m for m in (ok_ms(idx.get(("torch-mingru", dt, B, T))), ok_ms(idx.get(("torch-mingru-compiled", dt, B, T)))) if m]
            tbest = min(("torch-mingru", "torch-mingru-compiled"), key=lambda p: ok_ms(idx.get((p, dt, B, T))) or 1e30)
            for other, pid, lab in ((min(tm) if tm else None, tbest, "PyTorch minGRU (best of eager, compiled)"),
                                    (ok_ms(idx.get(("cudnn-lstm", dt, B, T))), "cudnn-lstm", "cuDNN LSTM"),
                                    (ok_ms(idx.get(("cudnn-gru", dt, B, T))), "cudnn-gru", "cuDNN GRU")):
                if mine and other:
                    cells.append(f"{other / mine:.2f}")
                    if other < mine:
                        nz = noise(idx.get(("prnn-mingru", dt, B, T)), idx.get((pid, dt, B, T)))
                        loses.append(f"layer step {dt} B={B} T={fmt_T(T)}: {lab} {fmt_ms(other)} ms against prnn minGRU "
                                     f"{fmt_ms(mine)} ms (prnn {mine / other:.2f}x slower{nz})")
                else:
                    cells.append("—")
            body.append([B, fmt_T(T)] + cells)
        lines.append(table(head, body))
        lines.append("")
    lines.append(f"![layer step times]({name}_layers.png)\n")


def section_wall(st, name, lines, loses):
    labels = peer_labels(st, sec_wall.PEERS)
    lines.append("## 3. The O(T) wall\n")
    m = st.get("meta", {})
    lines.append(f"One forward + backward at B = {m.get('B', 1)}, H = D = {m.get('H', 1024)}, {m.get('dtype', 'bf16')}, "
                 "against T. cuDNN's LSTM and prnn's serial "
                 "kernel take a step per time step whatever the card's width; the parallel scan and the minGRU "
                 "layer built on it grow with the bytes. A peer stops at its first point over 2 s (measured, or "
                 "predicted linearly from the point before).\n")
    for pid in sec_wall.PEER_IDS:
        lines.append(f"- **{labels[pid]['label']}**: {labels[pid]['setting']}")
    lines.append("")
    rows = st.get("rows", [])
    idx = index(rows, "peer", "T")
    ts = sorted({r["T"] for r in rows})
    head = ["T"] + [labels[p]["label"] + " ms" for p in sec_wall.PEER_IDS] + ["cuDNN LSTM / prnn minGRU"]
    body = []
    for T in ts:
        cells = [cell_text(idx.get((p, T))) for p in sec_wall.PEER_IDS]
        mine, lstm = ok_ms(idx.get(("prnn-mingru", T))), ok_ms(idx.get(("cudnn-lstm", T)))
        cells.append(f"{lstm / mine:.1f}" if mine and lstm else "—")
        if mine and lstm and lstm < mine:
            loses.append(f"O(T) wall T={fmt_T(T)}: cuDNN LSTM {fmt_ms(lstm)} ms against prnn minGRU {fmt_ms(mine)} ms")
        body.append([fmt_T(T)] + cells)
    lines.append(table(head, body))
    lines.append("")
    lines.append(f"![time against T]({name}_wall.png)\n")


def section_train(st, name, lines, loses):
    labels = peer_labels(st, sec_train.PEERS)
    meta = st.get("meta", {})
    lines.append("## 4. End-to-end training throughput\n")
    lines.append(f"A byte-level language model of {meta.get('layers', sec_train.LAYERS)} pre-RMSNorm residual minGRU "
                 f"layers of width {meta.get('width', sec_train.WIDTH)}, B = {meta.get('B', sec_train.B)} rows of "
                 f"T = {meta.get('T', sec_train.T)} bytes, bf16 compute with fp32 master weights, AdamW, gradient "
                 "clipping at 1.0. prnn's linear-space scan and PyTorch's log-space scan compute the same "
                 "recurrence. Each step ends with the loss read on the host in every system.\n")
    if meta.get("prnn_command"):
        lines.append(f"prnn command: `{meta['prnn_command']}`\n")
    for pid in sec_train.PEER_IDS:
        lines.append(f"- **{labels[pid]['label']}**: {labels[pid]['setting']}")
    lines.append("")
    idx = index(st.get("rows", []), "peer")
    body = []
    mine = ok_ms(idx.get(("prnn-train",)))
    for p in sec_train.PEER_IDS:
        r = idx.get((p,))
        ex = (r or {}).get("extra", {})
        ms = ok_ms(r)
        ratio = f"{ms / mine:.2f}" if ms and mine else "—"
        body.append([labels[p]["label"], cell_text(r), f"{ex['tokens_s'] / 1e6:.2f} M" if ms and ex.get("tokens_s") else "—",
                     f"{ex['params'] / 1e6:.2f} M" if ex.get("params") else "—", ex.get("steps_timed", "—"), ratio])
        if ms and mine and ms < mine and p != "prnn-train":
            loses.append(f"training {labels[p]['label']}: {fmt_ms(ms)} ms per step against prnn train {fmt_ms(mine)} ms")
    lines.append(table(["system", "ms per step", "tokens/s", "parameters", "steps timed", "time / prnn's"], body))
    lines.append("")


def render(work, out, name, command=None, preface=None):
    stores, run = load(work)
    fake = any(s.get("fake") for s in stores.values())
    os.makedirs(out, exist_ok=True)
    plots = {"scan": plot_scan, "layers": plot_layers, "wall": plot_wall}
    plot_errors = []
    for s, fn in plots.items():
        if s in stores and stores[s].get("rows"):
            try:
                fn(stores[s], os.path.join(out, f"{name}_{s}.png"))
            except Exception as e:
                plot_errors.append(f"- plot {s}: {type(e).__name__}: {e}")
    lines = []
    gpu = ""
    for s in stores.values():
        gpu = s.get("env", {}).get("gpu") or gpu
    lines.append(f"# prnn against what users would pick instead, on {gpu or 'the GPU'}\n")
    if fake:
        lines.append("> **DRY RUN: every number below is synthetic, made up by bench/peers/fake.py to exercise "
                     "the report. Nothing here was measured.**\n")
    merged = run.get("merged")
    if merged:
        lines.append(f"Written by `bench/peers/merge.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
                     f"from {len(merged)} runs of `bench/peers/run.py` on the same card, listed below; a later "
                     "run's row replaces an earlier one's for the same case (never a number by a gap). prnn ran "
                     "through its C API (ctypes over libprnn_shared.so) on PyTorch's CUDA stream.\n")
        for m in merged:
            lines.append(f"- {m.get('when', '?')}: `{m.get('command', '?')}` (sections: {', '.join(m.get('sections', []))})")
        lines.append("")
    else:
        lines.append(f"Written by `bench/peers/run.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
                     "Every peer ran in the same process family on the same card in one run; prnn ran through "
                     "its C API (ctypes over libprnn_shared.so) on PyTorch's CUDA stream.\n")
        cmd = command or run.get("command")
        if cmd:
            lines.append(f"Command: `{cmd}`\n")
    lines += env_lines(stores, run)
    lines.append("")
    if preface:  # the reader's guide to a merged report, written by hand
        lines.append(preface.rstrip() + "\n")
    lines.append("Timing: CUDA events around each call on the shared stream, after an untimed warm-up call "
                 "(two for compiled code, whose compilation is left out); the median of 3 to 25 calls "
                 "(1 to 2 for calls over 0.25 s). Calls over 2 s are not repeated: the peer is marked skipped at "
                 "that point and beyond. The raw rows (repetitions, min and max, first-call time) are in "
                 f"`{name}.json`.\n")
    loses = []
    body = []
    for s, fn in (("scan", section_scan), ("layers", section_layers), ("wall", section_wall), ("train", section_train)):
        if s not in stores:
            body.append(f"## {SECTIONS.index(s) + 1}. {s}: not run\n")
            sec_info = run.get("sections", {}).get(s)
            if sec_info:
                body.append(f"Orchestrator: {sec_info}\n")
            continue
        try:
            fn(stores[s], name, body, loses)
        except Exception as e:
            body.append(f"(the {s} section's report failed: {type(e).__name__}: {e})\n")
    lines.append("## Where prnn loses\n")
    if loses:
        lines.append("Every measured case in which another peer was faster than prnn's corresponding entry:\n")
        lines += [f"- {x}" for x in loses]
    elif any(ok_ms(r) for st in stores.values() for r in st.get("rows", [])):
        lines.append("No measured case in this run; see each section's gaps for what could not be compared.")
    else:
        lines.append("Nothing was measured in this run: see the failures at the end.")
    lines.append("")
    lines += body
    lines.append("## Gaps, failures and notes\n")
    mods = {"scan": sec_scan, "layers": sec_layers, "wall": sec_wall, "train": sec_train}
    any_gap = False
    for s in SECTIONS:
        if s in stores:
            g = gaps(stores[s], peer_labels(stores[s], mods[s].PEERS))
            if g:
                any_gap = True
                lines.append(f"**{s}**\n")
                lines += g
                lines.append("")
    for n in run.get("notes", []):
        any_gap = True
        lines.append(f"- run: {n}")
    lines += plot_errors
    if not any_gap and not plot_errors:
        lines.append("None.")
    lines.append("")
    md = "\n".join(lines)
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump({"run": run, "sections": stores}, f, indent=1, default=str)
    return os.path.join(out, f"{name}.md")
