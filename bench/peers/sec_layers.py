"""
sec_layers.py - section 2 of the peer benchmark: one layer's training step
(forward + backward, GEMMs included) at D = H = 1024, B in {16, 1},
T in {1K, 4K, 16K, 64K}, bf16 and fp32.

prnn's minGRU, minLSTM, QRNN (fo-pooling, window 1) and SRU through the
public cell API (ctypes, on PyTorch's stream), against what a PyTorch user
would pick: cuDNN's LSTM and GRU (torch.nn), and minGRU written in PyTorch
with the log-space scan, eager and compiled. Every step computes the input
gradient and all weight gradients. cuDNN's cases run in child processes
of the section (Runner.isolated), so a call that never returns costs its
case only.

Size letters: B batch rows, T time steps, D input features, H hidden units.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile

from common import (LIMIT_S, describe_env, free_cuda, measure_row, recover_cuda, row_key, series_key,
                    setup_torch_stream)

D = H = 1024
# cuDNN's RNNs run each case in a child process of the section: on an H200
# its LSTM under bf16 autocast at B = 16, T = 16384 never returned, and a
# call that never returns would otherwise cost the rest of the section.
ISOLATED = ("cudnn-lstm", "cudnn-gru")
CHILD_CAP_S = 120.0  # a case's child is stopped after this (or the section's deadline)
BS = [16, 1]
TS = [1024, 4096, 16384, 65536]
DTYPES = ["bf16", "f32"]
PRNN_CELLS = [("prnn-mingru", "mingru"), ("prnn-minlstm", "minlstm"), ("prnn-qrnn", "qrnn"),
              ("prnn-sru", "sru")]
PEERS = [
    ("prnn-mingru", "prnn minGRU",
     "prnn_cell_forward + prnn_cell_backward through ctypes (cuBLAS GEMMs inside, scan AUTO), "
     "bias, linear-space scan; bf16: bf16 x, y, weights and saved activations, fp32 weight gradients; "
     "fp32: exact fp32 GEMMs (no TF32)"),
    ("prnn-minlstm", "prnn minLSTM", "as prnn minGRU"),
    ("prnn-qrnn", "prnn QRNN", "as prnn minGRU; fo-pooling, window 1"),
    ("prnn-sru", "prnn SRU", "as prnn minGRU"),
    ("cudnn-lstm", "cuDNN LSTM",
     "torch.nn.LSTM(1024, 1024, batch_first=True) on cuDNN; bf16: fp32 weights under "
     "torch.autocast(bfloat16); fp32: PyTorch's defaults (cuDNN may use TF32, "
     "torch.backends.cudnn.allow_tf32 = True); gradients by torch.autograd.grad over x and the weights"),
    ("cudnn-gru", "cuDNN GRU", "torch.nn.GRU, otherwise as cuDNN LSTM"),
    ("torch-mingru", "PyTorch minGRU",
     "nn.Linear(1024, 2048) then the log-space scan along T (dim 1) as in the paper's reference "
     "code, scan math in fp32; bf16 under torch.autocast; eager"),
    ("torch-mingru-compiled", "PyTorch minGRU, compiled",
     "the same module under torch.compile(dynamic=True), default mode; compilation untimed"),
]
PEER_IDS = [p[0] for p in PEERS]


def configs(quick):
    out = []
    for dt in DTYPES:
        for B in BS:
            for T in TS:
                if quick and (T > 16384 or dt == "f32" and B == 1):
                    continue
                out.append((dt, B, T))
    return out


class Runner:
    def __init__(self, store, budget, args):
        import torch
        import prnn_ctypes as P
        self.torch, self.P = torch, P
        self.store, self.budget, self.args = store, budget, args
        self.lib = self.ctx = self.lib_error = None
        try:
            self.lib = P.Lib(args.lib)
            self.ctx = P.Context(self.lib, "cuda", stream=torch.cuda.current_stream().cuda_stream)
        except Exception as e:  # the other peers still run
            self.lib_error = store.fail("loading libprnn_shared.so and a CUDA context", e)
            self.lib = None
        self.last = {}
        self.modules = {}

    def recover(self):
        recover_cuda(self.store)

    def inputs(self, dt, B, T):
        torch = self.torch
        tdt = torch.float32 if dt == "f32" else torch.bfloat16
        g = torch.Generator(device="cuda")
        g.manual_seed(31 * B + T + (5 if dt == "bf16" else 0))
        x = (torch.rand((B, T, D), generator=g, device="cuda") * 2 - 1).to(tdt)
        dy = (torch.rand((B, T, H), generator=g, device="cuda") * 2 - 1).to(tdt)
        return x, dy

    def prnn_step(self, cell, dt, B, T, x, dy):
        import numpy as np
        torch, lib = self.torch, self.lib
        desc = lib.cell_desc(cell, D, H, dt)
        n = lib.cell_param_count(desc)
        host = np.empty(n, np.float32)
        lib.cell_init_params(lib.cell_desc(cell, D, H, "f32"), host.ctypes.data, 1234)
        params = torch.from_numpy(host).cuda().to(x.dtype)
        dparams = torch.zeros(n, dtype=torch.float32, device="cuda")
        act = torch.empty(max(1, lib.cell_act_bytes(desc, B, T)), dtype=torch.uint8, device="cuda")
        y = torch.empty((B, T, lib.cell_out_size(desc)), dtype=x.dtype, device="cuda")
        dx = torch.empty_like(x)
        ctx = self.ctx
        p = dict(y=y.data_ptr(), act=act.data_ptr(), x=x.data_ptr(), w=params.data_ptr(),
                 dw=dparams.data_ptr(), dx=dx.data_ptr(), dy=dy.data_ptr())
        keep = (params, dparams, act, y, dx)

        def step(i, keep=keep):
            ctx.cell_forward(desc, B, T, p["y"], None, p["act"], p["x"], p["w"], None)
            ctx.cell_backward(desc, B, T, p["dx"], p["dw"], None, p["dy"], None, p["x"], p["w"], None, p["act"])
        return step

    def torch_module(self, peer):
        torch = self.torch
        if peer not in self.modules:
            from torch_peers import MinGRU
            torch.manual_seed(0)
            if peer == "cudnn-lstm":
                m = torch.nn.LSTM(D, H, batch_first=True)
            elif peer == "cudnn-gru":
                m = torch.nn.GRU(D, H, batch_first=True)
            else:
                m = MinGRU(D, H)
            m = m.cuda()
            f = torch.compile(m, dynamic=True) if peer.endswith("compiled") else m
            self.modules[peer] = (m, f)
        return self.modules[peer]

    def torch_step(self, peer, dt, x, dy):
        torch = self.torch
        m, f = self.torch_module(peer)
        params = list(m.parameters())
        xl = x.detach().requires_grad_()
        rnn = peer.startswith("cudnn")

        def step(i):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dt == "bf16")):
                y = f(xl)
                if rnn:
                    y = y[0]
            return torch.autograd.grad(y, [xl] + params, dy)
        return step

    def config(self, dt, B, T, peers):
        if self.budget.spent(3.0):
            for peer in peers:
                self.store.row(peer=peer, dtype=dt, B=B, T=T, H=H, mode="step", status="budget",
                               short="no time", why="the section's time budget was spent")
            return
        x, dy = self.inputs(dt, B, T)
        for peer in peers:
            fields = dict(peer=peer, dtype=dt, B=B, T=T, H=H, mode="step")
            if peer.startswith("prnn-") and self.lib is None:
                self.store.row(**fields, status="fail", short="no libprnn", why=self.lib_error)
                continue
            try:
                if peer.startswith("prnn-"):
                    step = self.prnn_step(dict(PRNN_CELLS)[peer], dt, B, T, x, dy)
                else:
                    step = self.torch_step(peer, dt, x, dy)
            except Exception as e:
                why = self.store.fail(" ".join(f"{k}={v}" for k, v in fields.items()) + " (setup)", e)
                self.store.row(**fields, status="fail", short=why[:60], why=why)
                self.recover()
                continue
            measure_row(self.store, self.budget, self.last, fields, step,
                        compiles=peer.endswith("compiled"), recover=self.recover,
                        extra=lambda r, B=B, T=T: {"mtok_s": round(B * T / (r["ms"] * 1e-3) / 1e6, 3)})
            del step
            free_cuda()
        del x, dy

    def isolated(self, dt, B, T, peers):
        """peers (cuDNN's) at one case, in a child process (run.py --section
        layers --in-child) that is stopped after CHILD_CAP_S: its rows come
        back into this store; a call that never returned leaves a failed row,
        and the peers it kept from running say so."""
        todo = []
        for peer in peers:
            fields = dict(peer=peer, dtype=dt, B=B, T=T, H=H, mode="step")
            key = series_key(fields)
            if key in self.last:  # the linear-in-T skip of measure_row, from this side
                T0, ms0 = self.last[key]
                pred = ms0 * 1e-3 * T / T0
                if pred > LIMIT_S:
                    self.store.row(**fields, status="skip", short="> 2 s",
                                   why=f"predicted {pred:.1f} s a call from T = {T0} (linear in T), "
                                       f"over the {LIMIT_S:.0f} s limit")
                    continue
            todo.append(fields)
        if not todo:
            return
        if self.budget.spent(15.0):  # a child needs seconds to start
            for fields in todo:
                self.store.row(**fields, status="budget", short="no time", why="the section's time budget was spent")
            return
        fd, path = tempfile.mkstemp(prefix="layers-child-", suffix=".json")
        os.close(fd)
        cap = min(CHILD_CAP_S, self.budget.left())
        cmd = [sys.executable, "-u", os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.py"),
               "--section", "layers", "--in-child", "--store", path, "--deadline", repr(self.budget.deadline),
               "--layer-configs", f"{dt}:{B}:{T}", "--layer-peers", ",".join(f["peer"] for f in todo)]
        if self.args.lib:
            cmd += ["--lib", self.args.lib]
        proc = subprocess.Popen(cmd, start_new_session=True)
        try:
            rc = proc.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "stopped"
        try:
            with open(path) as f:
                got = json.load(f)
        except Exception:
            got = {}
        for q in (path, path + ".tmp"):
            if os.path.exists(q):
                os.remove(q)
        rows = {row_key(r): r for r in got.get("rows", [])}
        hung = None
        for fields in todo:
            r = rows.get(row_key(fields))
            if r is None:
                why = (f"not run: the case's process was stopped while {hung} did not return" if hung else
                       f"the case's process ended (exit {rc}) before this peer ran")
                self.store.row(**fields, status="fail", short="not run", why=why)
                continue
            if r.get("status") == "running":
                hung = dict((i, l) for i, l, _ in PEERS).get(fields["peer"], fields["peer"])
                self.store.row(**fields, status="fail", short=f"no return in {cap:.0f} s",
                               why=f"the call did not return within {cap:.0f} s; its process was stopped")
                continue
            self.store.row(**r)
            key = series_key(fields)
            if r.get("status") == "ok" and r.get("ms"):
                self.last[key] = (T, r["ms"])
            elif (r.get("extra") or {}).get("seconds"):
                self.last[key] = (T, 1e3 * r["extra"]["seconds"])
        self.store.data["failures"] += got.get("failures", [])
        self.store.data["notes"] += [n for n in got.get("notes", []) if n not in self.store.data["notes"]]
        self.store.flush()

    def agreement(self):
        """prnn's minGRU and the PyTorch minGRU on the same weights (fp32, B=2, T=1024)."""
        torch, lib = self.torch, self.lib
        import numpy as np
        from torch_peers import MinGRU
        B, T = 2, 1024
        desc = lib.cell_desc("mingru", D, H, "f32")
        n = lib.cell_param_count(desc)
        host = np.empty(n, np.float32)
        lib.cell_init_params(desc, host.ctypes.data, 99)
        host[D * 2 * H:] = np.random.default_rng(5).uniform(-0.5, 0.5, 2 * H)
        w = torch.from_numpy(host).cuda()
        x = torch.rand((B, T, D), device="cuda") * 2 - 1
        y = torch.empty((B, T, H), device="cuda")
        act = torch.empty(lib.cell_act_bytes(desc, B, T), dtype=torch.uint8, device="cuda")
        self.ctx.cell_forward(desc, B, T, y.data_ptr(), None, act.data_ptr(), x.data_ptr(), w.data_ptr())
        m = MinGRU(D, H).cuda()
        with torch.no_grad():
            m.lin.weight.copy_(w[:D * 2 * H].view(D, 2 * H).t())
            m.lin.bias.copy_(w[D * 2 * H:])
            yt = m(x)
        e = ((y.double() - yt.double()).norm() / yt.double().norm()).item()
        self.store.data["meta"]["mingru_agreement_relerr"] = e
        self.store.note(f"prnn minGRU vs PyTorch minGRU, same weights, fp32, B=2 T=1024: relative error {e:.2e}")


def run(store, budget, args):
    store.data["env"] = describe_env()
    setup_torch_stream()
    meta = store.data["meta"]
    meta["peers"] = [{"id": i, "label": l, "setting": s} for i, l, s in PEERS]
    meta["D"], meta["H"] = D, H
    r = Runner(store, budget, args)
    child = getattr(args, "in_child", False)
    try:
        if r.lib and not child:
            r.agreement()
    except Exception as e:
        store.fail("minGRU agreement check", e)
        r.recover()
    cfgs = configs(args.quick)
    if getattr(args, "layer_configs", None):  # a subset, e.g. to finish an interrupted run
        want = {(d, int(b), int(t)) for d, b, t in (c.split(":") for c in args.layer_configs.split(","))}
        cfgs = [c for c in cfgs if c in want]
    only = set(args.layer_peers.split(",")) if getattr(args, "layer_peers", None) else None
    eager = [p for p in PEER_IDS if not p.endswith("compiled") and (only is None or p in only)]
    here = eager if child else [p for p in eager if p not in ISOLATED]
    apart = [] if child else [p for p in eager if p in ISOLATED]
    for dt, B, T in cfgs:
        print(f"  layer step {dt} B={B} T={T}", flush=True)
        try:
            r.config(dt, B, T, here)
        except Exception as e:
            store.fail(f"config {dt} B={B} T={T}", e)
            r.recover()
        if apart:
            try:
                r.isolated(dt, B, T, apart)
            except Exception as e:
                store.fail(f"config {dt} B={B} T={T} (cuDNN, in a child)", e)
    for dt, B, T in cfgs:
        if only is not None and "torch-mingru-compiled" not in only:
            break
        try:
            r.config(dt, B, T, ["torch-mingru-compiled"])
        except Exception as e:
            store.fail(f"config {dt} B={B} T={T} (compiled)", e)
            r.recover()
    if r.ctx:
        r.ctx.free()
