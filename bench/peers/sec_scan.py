"""
sec_scan.py - section 1 of the peer benchmark: the scan h_t = a_t h_{t-1} + b_t
alone, forward and forward+backward, fp32 and bf16, against the copy roofline.

Peers: prnn's three CUDA algorithms (through ctypes, on PyTorch's stream),
accelerated-scan's CUDA kernel (`warp`) and Triton kernel (`scalar`), and the
log-space scan written in PyTorch, eager and under torch.compile. prnn reads
(B, T, H) with H contiguous; the others (B, H, T) or (B*H, T) with T
contiguous, their native layouts: the same B*H sequences of length T.

Bytes per element for the roofline (the least a scan must move): fp32 12
forward (read a, b; write h), 32 forward+backward (the backward reads a, h,
dh and writes da, db); bf16 half of that.

Size letters: B batch rows, T time steps, H channels; n = B*T*H.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from common import (Budget, Store, copy_roofline, describe_env, free_cuda, measure_row, recover_cuda,
                    setup_torch_stream, short_error)

PEERS = [
    ("prnn-chunked", "prnn AUTO",
     "prnn_scan_forward / prnn_scan_backward through ctypes, algo AUTO (on CUDA: STRIPED, one block "
     "per 128-byte stripe of channels walking the whole row, where those blocks fill the card, "
     "except the 16-bit backward; otherwise CHUNKED, one pass with decoupled look-back), layout "
     "(B, T, H), no h0 / hT, outputs preallocated, on PyTorch's stream"),
    ("prnn-tree", "prnn tree",
     "as above, algo TREE (serial 32-step chunks, then one merge launch per tree level)"),
    ("prnn-serial", "prnn serial",
     "as above, algo SERIAL (one thread per channel looping over t: the O(T) baseline)"),
    ("acc-warp", "accelerated-scan warp",
     "accelerated_scan.warp: the package's CUDA kernel (built by torch load_inline for this card), "
     "warpscan_forward / warpscan_backward called directly on preallocated outputs (its autograd "
     "wrapper adds a zero fill and allocations); layout (B, H, T); T must be a power of two in [32, 65536]; "
     "run in child processes of the section, so that an illegal memory access (seen in bf16) "
     "costs only the shape it happened at"),
    ("acc-triton", "accelerated-scan Triton",
     "accelerated_scan.scalar: Triton tl.associative_scan in blocks of 2048 steps (the package's "
     "default), forward_scan / backward_scan launched directly on preallocated outputs with "
     "enable_fp_fusion=False as the package launches them; layout (B, H, T)"),
    ("torch-log", "PyTorch log-space",
     "eager PyTorch: A = cumsum(log a), h = exp(A + logcumsumexp(log b - A)) along the contiguous "
     "T axis of (B*H, T), fp32 math (bf16 in and out for bf16); backward by autograd "
     "(torch.autograd.grad); valid for positive a and b only"),
    ("torch-log-compiled", "PyTorch log-space, compiled",
     "the same function under torch.compile(dynamic=True), default mode; the first calls "
     "(compilation) are untimed"),
]
PEER_IDS = [p[0] for p in PEERS]
SHAPES = [(1, 64), (1, 256), (16, 1024)]   # (B, H): B*H = 64, 256, 16384
TS = [4096, 65536, 1048576]
DTYPES = ["f32", "bf16"]
MODES = ["fwd", "fwdbwd"]
BYTES_PER_ELEM = {("f32", "fwd"): 12, ("f32", "fwdbwd"): 32, ("bf16", "fwd"): 6, ("bf16", "fwdbwd"): 16}
MEM_BUDGET = 40 * 2**30   # bytes of the six (B, T, H) tensors one shape may use
ACC_MAX_N = 1 << 26       # forward accuracy against a float64 CPU scan up to this n
ES = {"f32": 4, "bf16": 2}
WARP_GRACE_S = 20.0       # a warp child is killed this long past the section's deadline


def shape_list(quick):
    out = []
    for B, H in SHAPES:
        for T in TS:
            if quick and (T > 65536 or (B, H) == (1, 256)):
                continue
            for dt in DTYPES:
                out.append((B, H, T, dt))
    return out


# ---------------------------------------------------------------------------
# accelerated-scan

class AccScan:
    """Loads the package's two kernels; the CUDA one may still be building in
    the background (scripts/bench_peers.sh), announced by PEERS_WARP_DONE."""

    def __init__(self, store, triton=True):
        self.store = store
        self.warp = None
        self.warp_error = None
        self.triton = None
        self.triton_error = None
        if not triton:  # a warp child: the CUDA kernel only
            return
        import importlib
        err = None
        # the Triton kernel's module is accelerated_scan.scalar in 0.3; .triton in some releases
        for name in ("accelerated_scan.scalar", "accelerated_scan.triton"):
            try:
                m = importlib.import_module(name)
                if hasattr(m, "forward_scan") and hasattr(m, "backward_scan"):
                    self.triton, self.triton_name = m, name
                    break
                err = RuntimeError(f"{name} has no forward_scan / backward_scan kernels")
            except Exception as e:
                err = err or e
        if self.triton is None:
            self.triton_error = store.fail("import accelerated_scan Triton kernel", err)

    def warp_ready(self, wait_s=0.0):
        """True once the CUDA kernel is loaded; False while its build runs."""
        if self.warp is not None:
            return True
        if self.warp_error:
            return True
        done = os.environ.get("PEERS_WARP_DONE")
        if done:
            t_end = time.time() + wait_s
            while not os.path.exists(done) and time.time() < t_end:
                time.sleep(1.0)
            if not os.path.exists(done):
                return False
            rc = open(done).read().strip()
            if rc != "0":
                tail = ""
                logp = os.environ.get("PEERS_WARP_LOG", "")
                if logp and os.path.exists(logp):
                    tail = " | ".join(open(logp, errors="replace").read().strip().splitlines()[-6:])
                self.warp_error = self.store.fail("build accelerated_scan.warp",
                                                  RuntimeError(f"background build exit code {rc}: {tail}"))
                self.warp_error = "extension build failed"
                return True
        try:
            t0 = time.time()
            import accelerated_scan.warp as w
            self.warp = w
            self.store.note(f"accelerated_scan.warp loaded in {time.time() - t0:.1f} s")
        except Exception as e:
            self.warp_error = self.store.fail("import accelerated_scan.warp", e)
        return True


# ---------------------------------------------------------------------------
# One shape

class Runner:
    def __init__(self, store, budget, args):
        import torch
        import prnn_ctypes as P
        self.torch, self.P = torch, P
        self.store, self.budget, self.args = store, budget, args
        self.lib = self.ctx = self.cpu = self.lib_error = None
        try:
            self.lib = P.Lib(args.lib)
            self.ctx = P.Context(self.lib, "cuda", stream=torch.cuda.current_stream().cuda_stream)
            self.cpu = P.Context(self.lib, "cpu")
        except Exception as e:  # the other peers still run
            self.lib_error = store.fail("loading libprnn_shared.so and a CUDA context", e)
            self.lib = None
        self.last = {}     # (peer, dt, B, H, mode) -> (T, ms): predicts the next T
        self.compiled = None
        self.l2 = max(int(store.data["env"].get("l2_bytes") or 0), 50 * 2**20)

    def row(self, peer, dt, B, H, T, mode, **kw):
        self.store.row(peer=peer, dtype=dt, B=B, T=T, H=H, mode=mode, **kw)

    def measure(self, peer, dt, B, H, T, mode, fn, nsets, compiles=False):
        n = B * T * H

        def extra(r):
            return {"gbps": round(n * BYTES_PER_ELEM[(dt, mode)] / (r["ms"] * 1e-3) / 1e9, 1)}

        return measure_row(self.store, self.budget, self.last,
                           dict(peer=peer, dtype=dt, B=B, T=T, H=H, mode=mode), fn, nsets=nsets,
                           compiles=compiles, extra=extra, recover=self.recover)

    def recover(self):
        recover_cuda(self.store)

    def relerr(self, h_bth, ref):
        torch = self.torch
        h = h_bth.double()
        if not torch.isfinite(h).all():
            return float("inf")
        return ((h - ref).norm() / ref.norm()).item()

    def shape(self, B, H, T, dt, peers, acc):
        torch = self.torch
        n, es = B * T * H, ES[dt]
        tdt = torch.float32 if dt == "f32" else torch.bfloat16
        if 6 * n * es > MEM_BUDGET:
            for p in peers:
                for m in MODES:
                    self.row(p, dt, B, H, T, m, status="skip", short="> 40 GiB",
                             why=f"six (B, T, H) tensors need {6 * n * es / 2**30:.0f} GiB, over the 40 GiB budget of every peer")
            return
        if self.budget.spent(3.0):
            for p in peers:
                for m in MODES:
                    self.row(p, dt, B, H, T, m, status="budget", short="no time", why="the section's time budget was spent")
            return
        nsets = max(1, min(16, math.ceil(4 * self.l2 / (6 * n * es))))
        g = torch.Generator(device="cuda")
        g.manual_seed(1000003 * B + 7919 * H + T + (17 if dt == "bf16" else 0))
        a = (torch.rand((nsets, B, T, H), generator=g, device="cuda") * 0.5 + 0.5).to(tdt)
        b = (torch.rand((nsets, B, T, H), generator=g, device="cuda") * 0.99 + 0.01).to(tdt)
        dh = (torch.rand((nsets, B, T, H), generator=g, device="cuda") * 2 - 1).to(tdt)
        ref = None
        if n <= ACC_MAX_N and self.lib is not None:
            try:
                import numpy as np
                a64 = np.ascontiguousarray(a[0].double().cpu().numpy())
                b64 = np.ascontiguousarray(b[0].double().cpu().numpy())
                h64 = np.empty_like(a64)
                d = self.lib.scan_desc(B, T, H, "f64", "serial")
                self.cpu.scan_forward(d, h64.ctypes.data, None, a64.ctypes.data, b64.ctypes.data, None)
                ref = torch.from_numpy(h64).cuda()
                del a64, b64, h64
            except Exception as e:
                self.store.fail(f"float64 reference B={B} T={T} H={H} {dt}", e)
        step = n * es

        # prnn, (B, T, H)
        prnn_peers = [p for p in peers if p.startswith("prnn-")]
        if prnn_peers and self.lib is None:
            for p in prnn_peers:
                for m in MODES:
                    self.row(p, dt, B, H, T, m, status="fail", short="no libprnn", why=self.lib_error)
        elif prnn_peers:
            h, da, db = torch.empty_like(a), torch.empty_like(a), torch.empty_like(a)
            pa, pb, pdh, ph, pda, pdb = (x.data_ptr() for x in (a, b, dh, h, da, db))
            for peer in prnn_peers:
                d = self.lib.scan_desc(B, T, H, dt, peer.split("-")[1].replace("chunked", "auto"))
                ctx = self.ctx

                def fwd(i, d=d, ctx=ctx):
                    o = i * step
                    ctx.scan_forward(d, ph + o, None, pa + o, pb + o, None)

                def fb(i, d=d, ctx=ctx):
                    o = i * step
                    ctx.scan_forward(d, ph + o, None, pa + o, pb + o, None)
                    ctx.scan_backward(d, pda + o, pdb + o, None, pa + o, ph + o, None, pdh + o, None)

                ex = {}
                r = self.measure(peer, dt, B, H, T, "fwd", fwd, nsets)
                if r and ref is not None:
                    try:
                        fwd(0)
                        ex["relerr"] = self.relerr(h[0], ref)
                        self.store.data["rows"][-1]["extra"].update(ex)
                        self.store.flush()
                    except Exception as e:
                        self.store.fail(f"{peer} accuracy", e)
                self.measure(peer, dt, B, H, T, "fwdbwd", fb, nsets)
            del h, da, db

        others = [p for p in peers if not p.startswith("prnn-")]
        if not others:
            return
        # the peers' layout (B, H, T)
        ap = a.permute(0, 1, 3, 2).contiguous()
        bp = b.permute(0, 1, 3, 2).contiguous()
        dhp = dh.permute(0, 1, 3, 2).contiguous()
        del a, b, dh
        hp, dap, dbp = torch.empty_like(ap), torch.empty_like(ap), torch.empty_like(ap)

        def accuracy(peer, out_bht):
            if ref is None:
                return
            try:
                e = self.relerr(out_bht.permute(0, 2, 1), ref)
                self.store.data["rows"][-1]["extra"]["relerr"] = e
                self.store.flush()
            except Exception as ex:
                self.store.fail(f"{peer} accuracy", ex)

        bufs = dict(ap=ap, bp=bp, dhp=dhp, hp=hp, dap=dap, dbp=dbp)
        for peer in others:
            try:
                self.other_peer(peer, dt, B, H, T, nsets, bufs, acc, accuracy)
            except Exception as e:  # a peer that cannot even be set up
                why = self.store.fail(f"{peer} {dt} B={B} T={T} H={H}", e)
                for m in MODES:
                    self.row(peer, dt, B, H, T, m, status="fail", short=why[:60], why=why)
                self.recover()
            free_cuda()

    def warp_shapes(self, shapes, acc):
        """accelerated-scan's CUDA kernel over `shapes`, in child processes
        (warp_child below). On an H200 its bf16 kernel made illegal memory
        accesses (T = 64K at H = 64, T = 4K at H = 256), which break a
        process's CUDA context for good: a child that dies, or stops after
        such an error, costs the shape it was at; a fresh child takes the
        shapes after it, and this process's context stays healthy."""
        peer = "acc-warp"
        todo = []
        for B, H, T, dt in shapes:
            if acc.warp is None:
                for m in MODES:
                    self.row(peer, dt, B, H, T, m, status="fail", short=acc.warp_error or "not built",
                             why=acc.warp_error or "the CUDA extension did not build in time")
            elif T < 32 or T > 65536 or T & (T - 1):
                for m in MODES:
                    self.row(peer, dt, B, H, T, m, status="unsupported", short="T > 65536",
                             why="the kernel handles T = 2^k for 32 <= T <= 65536 only")
            else:
                todo.append([B, H, T, dt])
        while todo:
            if self.budget.spent(10.0):  # a child needs seconds to start
                for B, H, T, dt in todo:
                    for m in MODES:
                        self.row(peer, dt, B, H, T, m, status="budget", short="no time",
                                 why="the section's time budget was spent")
                return
            fd, path = tempfile.mkstemp(prefix="scan-warp-", suffix=".json",
                                        dir=os.path.dirname(os.path.abspath(self.store.path)) if self.store.path else None)
            os.close(fd)
            with open(path + ".spec", "w") as f:
                json.dump({"shapes": todo, "store": path, "deadline": self.budget.deadline,
                           "lib": self.args.lib, "l2": self.l2,
                           "last": [[list(k), list(v)] for k, v in self.last.items() if dict(k).get("peer") == peer]}, f)
            print(f"  accelerated_scan.warp: a child process for {len(todo)} shape(s)", flush=True)
            proc = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "--warp-child", path + ".spec"],
                                    stderr=subprocess.PIPE, text=True, errors="replace")
            try:
                _, err = proc.communicate(timeout=max(5.0, self.budget.left() + WARP_GRACE_S))
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                rc = "killed"
            if err:
                sys.stderr.write(err)
                sys.stderr.flush()
            try:
                with open(path) as f:
                    got = json.load(f)
            except Exception:  # it died before its first write
                got = {}
            for q in (path, path + ".spec", path + ".tmp"):
                if os.path.exists(q):
                    os.remove(q)
            # its rows, failures and notes become this store's
            for k in ("rows", "failures", "notes"):
                self.store.data[k].extend(got.get(k, []))
            meta = got.get("meta", {})
            for k, v in meta.get("last", []):
                self.last[tuple(tuple(x) for x in k)] = tuple(v)
            self.store.flush()
            done = meta.get("done", [])
            left = [x for x in todo if x not in done]
            if not left:
                return
            # the child stopped short: the shape it was at fails, the rest go to a new child
            tail = [ln for ln in (err or "").strip().splitlines() if ln.strip()][-1:]
            if rc == "killed":
                why = "the child process ran past the section's deadline and was killed"
            elif rc in (2, 3) and got.get("failures"):
                why = (("CUDA context broken: " if rc == 3 else "child set-up: ")
                       + (got["failures"][-1]["error"].splitlines() or [""])[0])
            else:
                why = f"the child process exited with code {rc}" + (f": {tail[0].strip()}" if tail else "")
            why = why[:300]
            cur = meta.get("current")
            bad = [cur] if cur in left and rc != "killed" else left
            self.store.note(f"accelerated_scan.warp child process: {why} "
                            f"(at {', '.join(f'{x[3]} B={x[0]} T={x[2]} H={x[1]}' for x in bad)})")
            for B, H, T, dt in bad:
                have = {r.get("mode") for r in got.get("rows", [])
                        if (r.get("dtype"), r.get("B"), r.get("H"), r.get("T")) == (dt, B, H, T)}
                for m in MODES:
                    if m not in have:
                        self.row(peer, dt, B, H, T, m, status="fail", short=why[:60], why=why)
            todo = [x for x in left if x not in bad]

    def other_peer(self, peer, dt, B, H, T, nsets, bufs, acc, accuracy):
        """One peer that reads the (B, H, T) layout: accelerated-scan or PyTorch."""
        torch = self.torch
        ap, bp, dhp, hp, dap, dbp = (bufs[k] for k in ("ap", "bp", "dhp", "hp", "dap", "dbp"))
        if peer == "acc-warp":
            if acc.warp is None:
                for m in MODES:
                    self.row(peer, dt, B, H, T, m, status="fail", short=acc.warp_error or "not built",
                             why=acc.warp_error or "the CUDA extension did not build in time")
                return
            if T < 32 or T > 65536 or T & (T - 1):
                for m in MODES:
                    self.row(peer, dt, B, H, T, m, status="unsupported", short="T > 65536",
                             why="the kernel handles T = 2^k for 32 <= T <= 65536 only")
                return
            W = acc.warp

            def fwd(i):
                W.warpscan_forward(ap[i], bp[i], hp[i], False)

            def fb(i):
                W.warpscan_forward(ap[i], bp[i], hp[i], False)
                W.warpscan_backward(ap[i], hp[i], dhp[i], dap[i], dbp[i])

            if self.measure(peer, dt, B, H, T, "fwd", fwd, nsets):
                fwd(0)
                accuracy(peer, hp[0])
            self.measure(peer, dt, B, H, T, "fwdbwd", fb, nsets)
        elif peer == "acc-triton":
            if acc.triton is None:
                for m in MODES:
                    self.row(peer, dt, B, H, T, m, status="fail", short=acc.triton_error or "import failed",
                             why=acc.triton_error or "import failed")
                return
            K = acc.triton

            def fwd(i):
                K.forward_scan[(B, H)](ap[i], bp[i], hp[i], seqlen=T, enable_fp_fusion=False)

            def fb(i):
                K.forward_scan[(B, H)](ap[i], bp[i], hp[i], seqlen=T, enable_fp_fusion=False)
                K.backward_scan[(B, H)](ap[i], hp[i], dhp[i], dbp[i], dap[i], seqlen=T, enable_fp_fusion=False)

            if self.measure(peer, dt, B, H, T, "fwd", fwd, nsets):
                fwd(0)
                accuracy(peer, hp[0])
            self.measure(peer, dt, B, H, T, "fwdbwd", fb, nsets)
        elif peer in ("torch-log", "torch-log-compiled"):
            from torch_peers import logspace_scan
            f = logspace_scan
            compiles = peer.endswith("compiled")
            if compiles:
                if self.compiled is None:
                    self.compiled = torch.compile(logspace_scan, dynamic=True)
                f = self.compiled
            a2 = ap.view(nsets, B * H, T)
            b2 = bp.view(nsets, B * H, T)
            dh2 = dhp.view(nsets, B * H, T)
            al = [a2[i].detach().requires_grad_() for i in range(nsets)]
            bl = [b2[i].detach().requires_grad_() for i in range(nsets)]

            def fwd(i, f=f):
                with torch.no_grad():
                    return f(a2[i], b2[i])

            def fb(i, f=f):
                out = f(al[i], bl[i])
                return torch.autograd.grad(out, (al[i], bl[i]), dh2[i])

            if self.measure(peer, dt, B, H, T, "fwd", fwd, nsets, compiles=compiles):
                try:
                    accuracy(peer, fwd(0).view(B, H, T))
                except Exception as e:
                    self.store.fail(f"{peer} accuracy", e)
            self.measure(peer, dt, B, H, T, "fwdbwd", fb, nsets, compiles=compiles)
            del al, bl


# ---------------------------------------------------------------------------

def run(store, budget, args):
    store.data["env"] = describe_env()
    setup_torch_stream()
    meta = store.data["meta"]
    meta["peers"] = [{"id": i, "label": l, "setting": s} for i, l, s in PEERS]
    meta["bytes_per_elem"] = {f"{k[0]} {k[1]}": v for k, v in BYTES_PER_ELEM.items()}
    bw = copy_roofline()
    meta["copy_gbps"] = bw / 1e9
    store.flush()
    print(f"  copy roofline {bw / 1e9:.1f} GB/s", flush=True)
    run_ = Runner(store, budget, args)
    if run_.lib:
        meta["prnn_version"] = run_.lib.version()
        meta["prnn_lib"] = run_.lib.path
    acc = AccScan(store)
    if not os.environ.get("PEERS_WARP_DONE"):
        acc.warp_ready()  # no background build: build or load it here
    shapes = shape_list(args.quick)
    # pass 1: everything that needs no compilation of its own and runs in
    # this process (accelerated-scan's CUDA kernel runs in children, pass 2)
    for B, H, T, dt in shapes:
        peers = ["prnn-chunked", "prnn-tree", "prnn-serial", "acc-triton", "torch-log"]
        print(f"  shape B={B} T={T} H={H} {dt}: {', '.join(peers)}", flush=True)
        try:
            run_.shape(B, H, T, dt, peers, acc)
        except Exception as e:
            store.fail(f"shape B={B} T={T} H={H} {dt}", e)
            run_.recover()
        free_cuda()
    # pass 2: the CUDA kernel (in child processes, waiting for its build if
    # that came late), then torch.compile
    if not acc.warp_ready():
        wait = max(0.0, min(240.0, budget.left() - 60.0))
        print(f"  waiting up to {wait:.0f} s for the accelerated_scan.warp build", flush=True)
        if not acc.warp_ready(wait_s=wait):
            acc.warp_error = "build not done in time"
            store.note("accelerated_scan.warp: the background build had not finished within the section's time")
    try:
        run_.warp_shapes(shapes, acc)
    except Exception as e:
        store.fail("accelerated_scan.warp child processes", e)
    for B, H, T, dt in shapes:
        try:
            run_.shape(B, H, T, dt, ["torch-log-compiled"], acc)
        except Exception as e:
            store.fail(f"shape B={B} T={T} H={H} {dt} (compiled)", e)
            run_.recover()
        free_cuda()
    if run_.lib:
        run_.ctx.free()
        run_.cpu.free()


# ---------------------------------------------------------------------------
# A child process of Runner.warp_shapes

def warp_child(spec_path):
    """accelerated-scan's CUDA kernel over the spec's shapes, rows to the
    spec's store (meta: done, the shapes finished; current, the one begun;
    last, the timings that predict the next T). Returns 3 as soon as the CUDA
    context is broken: the parent goes on with a fresh process."""
    with open(spec_path) as f:
        spec = json.load(f)
    store = Store(spec["store"], "scan")
    store.data["env"] = {"l2_bytes": spec["l2"]}
    store.data["meta"].update(done=[], current=None, last=[])
    budget = Budget(spec["deadline"])
    try:
        setup_torch_stream()
        run_ = Runner(store, budget, argparse.Namespace(lib=spec["lib"]))
        run_.last = {tuple(tuple(x) for x in k): tuple(v) for k, v in spec["last"]}
        acc = AccScan(store, triton=False)
        acc.warp_ready()
    except Exception as e:  # the parent fails every shape left with this
        store.fail("accelerated_scan.warp child process set-up", e)
        return 2
    for shape in spec["shapes"]:
        B, H, T, dt = shape
        store.data["meta"]["current"] = shape
        store.flush()
        try:
            run_.shape(B, H, T, dt, ["acc-warp"], acc)
        except Exception as e:
            store.fail(f"shape B={B} T={T} H={H} {dt} (warp)", e)
        store.data["meta"]["last"] = [[list(k), list(v)] for k, v in run_.last.items()]
        try:
            free_cuda()
        except Exception as e:
            store.note(f"accelerated_scan.warp {dt} B={B} T={T} H={H} left the CUDA context broken "
                       f"({short_error(e)}); a new process takes the shapes after it")
            return 3
        store.data["meta"]["done"].append(shape)
        store.flush()
    store.finish()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--warp-child":
        print("usage: sec_scan.py --warp-child SPEC.json (run by the scan section, not by hand)", file=sys.stderr)
        sys.exit(2)
    rc = warp_child(sys.argv[2])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # no teardown in a broken CUDA context
