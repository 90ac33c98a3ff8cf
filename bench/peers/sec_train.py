"""
sec_train.py - section 4 of the peer benchmark: end-to-end training
throughput. `prnn train` (the program, bf16 on the GPU) against the same
model written in PyTorch: byte embedding, 4 pre-RMSNorm residual minGRU
layers of width 1024 with the log-space scan, final RMSNorm, linear head,
cross-entropy, AdamW (weight decay on matrices only, as prnn) and gradient
clipping at 1.0, under bf16 autocast, eager and torch.compile. A PyTorch
4-layer cuDNN LSTM model of the same width is timed last, as what a user
might train instead (4x the recurrent parameters).

Every step of every system ends with reading the loss on the host, as
`prnn train` does. B = 16 rows of T = 4096 bytes.
"""
import os
import re
import subprocess
import time

from common import COMPILE_RESERVE_S, describe_env, free_cuda, setup_torch_stream

LAYERS, WIDTH, T, B, VOCAB = 4, 1024, 4096, 16, 256
PRNN_STEPS = 40
SKIP_FIRST = 10  # steps left out of the prnn median (start-up, cuBLAS heuristics)
PEERS = [
    ("prnn-train", "prnn train",
     f"build-gpu/prnn train --device cuda --dtype bf16 --layers {LAYERS} --hidden {WIDTH} --seq-len {T} "
     f"--batch {B} --steps {PRNN_STEPS}: fp32 master weights, bf16 compute, AdamW with the next batch "
     f"uploaded during the step, built-in corpus; ms per step from log.tsv, median of steps "
     f"{SKIP_FIRST + 1}-{PRNN_STEPS}"),
    ("torch-eager", "PyTorch minGRU LM, eager",
     "the same model in PyTorch (bench/peers/torch_peers.py MinGRULM), fp32 weights under "
     "torch.autocast(bfloat16), fused AdamW, clip_grad_norm_(1.0), random bytes; median step time"),
    ("torch-compiled", "PyTorch minGRU LM, compiled",
     "as eager with the loss function (model + cross-entropy) under torch.compile, default mode; "
     "compilation untimed"),
    ("torch-lstm", "PyTorch cuDNN LSTM LM",
     "embedding, torch.nn.LSTM(1024, 1024, num_layers=4) on cuDNN, linear head, same optimizer, "
     "autocast bf16, eager"),
]
PEER_IDS = [p[0] for p in PEERS]


def parse_log(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or line.startswith("step"):
                continue
            c = line.rstrip("\n").split("\t")
            if len(c) >= 8 and c[1] == "train":
                rows.append((int(c[0]), float(c[6])))
    return rows


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def run_prnn(store, budget, args, work):
    fields = dict(peer="prnn-train", dtype="bf16", B=B, T=T, H=WIDTH, mode="train")
    exe = args.prnn
    if not exe or not os.path.exists(exe):
        store.row(**fields, status="fail", short="no binary", why=f"prnn binary not found at {exe}")
        return
    outdir = os.path.join(work, "prnn_train")
    cmd = [exe, "train", "--device", "cuda", "--dtype", "bf16", "--layers", str(LAYERS), "--hidden", str(WIDTH),
           "--seq-len", str(T), "--batch", str(B), "--steps", str(PRNN_STEPS), "--warmup", "5",
           "--eval-interval", "0", "--eval-batches", "1", "--ckpt-interval", "0", "--out", outdir]
    store.data["meta"]["prnn_command"] = " ".join(cmd)
    timeout = max(10.0, min(150.0, budget.left() - 5))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        store.row(**fields, status="budget", short="timed out", why=f"prnn train did not finish in {timeout:.0f} s")
        return
    wall = time.time() - t0
    tail = (p.stdout + p.stderr)[-1500:]
    if p.returncode != 0:
        store.row(**fields, status="fail", short=f"exit {p.returncode}", why=f"prnn train exit code {p.returncode}: {tail[-300:]}")
        store.note("prnn train output tail: " + tail)
        return
    rows = parse_log(os.path.join(outdir, "log.tsv"))
    timed = [ms for step, ms in rows if step > SKIP_FIRST]
    if not timed:
        store.row(**fields, status="fail", short="no log rows", why="log.tsv has no training rows past the first steps")
        return
    ms = median(timed)
    m = re.search(r"(\d+) parameters", p.stdout)
    params = int(m.group(1)) if m else None
    store.row(**fields, ms=ms, extra={"tokens_s": round(B * T / (ms * 1e-3)), "steps_timed": len(timed),
                                      "min_ms": min(timed), "max_ms": max(timed), "wall_s": round(wall, 1),
                                      "params": params})


def run_torch(store, budget, peer):
    import torch
    from torch_peers import MinGRULM, lm_loss
    fields = dict(peer=peer, dtype="bf16", B=B, T=T, H=WIDTH, mode="train")
    torch.manual_seed(0)
    if peer == "torch-lstm":
        class LSTMLM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(VOCAB, WIDTH)
                self.rnn = torch.nn.LSTM(WIDTH, WIDTH, num_layers=LAYERS, batch_first=True)
                self.head = torch.nn.Linear(WIDTH, VOCAB)

            def forward(self, ids):
                return self.head(self.rnn(self.emb(ids))[0])
        model = LSTMLM().cuda()
    else:
        model = MinGRULM(VOCAB, WIDTH, LAYERS).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), fused=True)
    ids = torch.randint(0, VOCAB, (B, T + 1), device="cuda")
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def loss_fn(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return lm_loss(model, x, y)
    f = torch.compile(loss_fn) if peer == "torch-compiled" else loss_fn
    params = list(model.parameters())

    def step():
        loss = f(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    if peer == "torch-compiled" and budget.spent(COMPILE_RESERVE_S + 15):
        store.row(**fields, status="budget", short="no time", why="too little time left to compile")
        return
    t0 = time.perf_counter()
    for _ in range(3 if peer != "torch-lstm" else 1):
        step()
    warm_s = time.perf_counter() - t0
    times = []
    while len(times) < 20 and budget.left() > 3 + (times[-1] if times else warm_s):
        t1 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t1) * 1e3)
        if len(times) >= 5 and sum(times) > 8000:
            break
    if not times:
        store.row(**fields, status="budget", short="no time", why="no time left for timed steps after warm-up")
        return
    ms = median(times)
    nparams = sum(p.numel() for p in params)
    store.row(**fields, ms=ms, extra={"tokens_s": round(B * T / (ms * 1e-3)), "steps_timed": len(times),
                                      "min_ms": round(min(times), 3), "max_ms": round(max(times), 3),
                                      "warmup_s": round(warm_s, 1), "params": nparams})


def run(store, budget, args):
    store.data["env"] = describe_env()
    meta = store.data["meta"]
    meta["peers"] = [{"id": i, "label": l, "setting": s} for i, l, s in PEERS]
    meta.update(layers=LAYERS, width=WIDTH, T=T, B=B, vocab=VOCAB)
    work = args.work or "/tmp"
    print("  train: prnn train", flush=True)
    try:
        run_prnn(store, budget, args, work)
    except Exception as e:
        why = store.fail("prnn train", e)
        store.row(peer="prnn-train", dtype="bf16", B=B, T=T, H=WIDTH, mode="train", status="fail", short=why[:60], why=why)
    try:
        setup_torch_stream()
    except Exception as e:
        why = store.fail("PyTorch on the GPU", e)
        for peer in ("torch-eager", "torch-compiled", "torch-lstm"):
            store.row(peer=peer, dtype="bf16", B=B, T=T, H=WIDTH, mode="train", status="fail", short=why[:60], why=why)
        return
    for peer in ("torch-eager", "torch-compiled", "torch-lstm"):
        print(f"  train: {peer}", flush=True)
        if budget.spent(5):
            store.row(peer=peer, dtype="bf16", B=B, T=T, H=WIDTH, mode="train", status="budget",
                      short="no time", why="the section's time budget was spent")
            continue
        try:
            run_torch(store, budget, peer)
        except Exception as e:
            why = store.fail(peer, e)
            store.row(peer=peer, dtype="bf16", B=B, T=T, H=WIDTH, mode="train", status="fail", short=why[:60], why=why)
        try:
            free_cuda()
        except Exception:
            pass
