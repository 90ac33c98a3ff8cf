"""
common.py - what the sections of the peer benchmark share: the result store
(a JSON file rewritten after every row, so a section that is killed keeps
what it measured), the time budget, CUDA-event timing and the description of
the machine.

torch is imported inside the functions that need it: the report and the dry
run work without it.
"""
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback

LIMIT_S = 2.0        # a peer stops at a point where one call takes longer than this
TARGET_S = 0.15      # timed time per measurement (reps = TARGET_S / one call)
FIRST_CALL_LIMIT_S = 8.0  # a first (warm-up) call over this ends the point without a probe
MAX_REPS = 25
COMPILE_RESERVE_S = 45.0  # do not start a torch.compile with less left than this


# ---------------------------------------------------------------------------
# Results

class Store:
    """One section's results: rows, failures and notes, written after each change."""

    def __init__(self, path, section, fake=False):
        self.path = path
        self.data = {"section": section, "fake": fake, "started": time.time(), "finished": None,
                     "env": {}, "meta": {}, "rows": [], "failures": [], "notes": []}
        self.flush()

    def flush(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, default=str)
        os.replace(tmp, self.path)

    def row(self, **kw):
        """peer, dtype, sizes, mode, status (ok, skip, unsupported, fail, budget, running), ms,
        why, extra. A row replaces the 'running' row of the same case (see start)."""
        kw.setdefault("status", "ok")
        key = row_key(kw)
        self.data["rows"] = [r for r in self.data["rows"]
                             if not (r.get("status") == "running" and row_key(r) == key)]
        self.data["rows"].append(kw)
        self.flush()
        if kw["status"] == "running":
            return
        sizes = " ".join(f"{k}={kw[k]}" for k in ("B", "T", "H") if k in kw)
        val = f"{kw['ms']:.4f} ms" if kw.get("ms") is not None else kw["status"] + ": " + str(kw.get("why", ""))
        extra = kw.get("extra") or {}
        more = "".join(f" {k}={v:.3g}" if isinstance(v, float) else f" {k}={v}" for k, v in extra.items())
        print(f"  [{self.data['section']}] {kw.get('peer')} {kw.get('dtype', '')} {kw.get('mode', '')} "
              f"{sizes}: {val}{more}", flush=True)

    def fail(self, what, exc):
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        msg = f"{type(exc).__name__}: {exc}".strip()
        self.data["failures"].append({"what": what, "error": msg[:2000], "trace": "".join(tb[-4:])[-3000:]})
        self.flush()
        print(f"  [{self.data['section']}] FAILED {what}: {msg[:500]}", flush=True)
        return short_error(exc)

    def note(self, text):
        self.data["notes"].append(text)
        self.flush()
        print(f"  [{self.data['section']}] note: {text}", flush=True)

    def finish(self):
        self.data["finished"] = time.time()
        self.flush()


ROW_KEYS = ("peer", "dtype", "B", "T", "H", "mode")


def row_key(r):
    return tuple(r.get(k) for k in ROW_KEYS)


def series_key(fields):
    """A peer's series over T (every field but T): the key of measure_row's
    `last` map, for the linear-in-T prediction."""
    return tuple(sorted((k, v) for k, v in fields.items() if k != "T"))


def short_error(exc):
    """A table cell's worth of an exception (the full text goes to the failures list)."""
    s = str(exc)
    if "out of memory" in s.lower() or type(exc).__name__ == "OutOfMemoryError":
        return "out of memory"
    if type(exc).__name__ == "PrnnError":
        return s.split(" (")[0]  # "prnn_scan_forward: PRNN_ERR_..."
    first = s.strip().splitlines()[0] if s.strip() else ""
    return (type(exc).__name__ + (": " + first if first else ""))[:100]


class Budget:
    def __init__(self, deadline):
        self.deadline = deadline

    def left(self):
        return self.deadline - time.time()

    def spent(self, need=0.0):
        return self.left() < need


class TooSlow(Exception):
    def __init__(self, seconds, predicted=False):
        super().__init__(f"{seconds:.2f} s a call")
        self.seconds, self.predicted = seconds, predicted


class OutOfTime(Exception):
    pass


# ---------------------------------------------------------------------------
# Timing

def time_calls(fn, nsets=1, budget=None, limit_s=LIMIT_S, target_s=TARGET_S, max_reps=MAX_REPS,
               warm=1, compiles=False):
    """
    Median milliseconds of fn(i) (i = rep, fn picks input set i % nsets), by
    CUDA events on the current stream. `warm` untimed calls first (compile
    and first-use costs; their wall time is returned as first_s), then one
    timed probe; calls slower than limit_s raise TooSlow. Timed calls are
    recorded one by one and read after one synchronisation.
    """
    import torch
    if budget is not None and budget.spent(COMPILE_RESERVE_S if compiles else 2.0):
        raise OutOfTime()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(warm):
        fn(i % nsets)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    # Only a first call far over the limit ends it here: cuDNN's plan
    # selection alone takes up to 4 s on a first call (an LSTM step of 44 ms
    # then), so the probe below decides.
    if not compiles and first_s / warm > FIRST_CALL_LIMIT_S:
        raise TooSlow(first_s / warm)
    # The estimate is always a timed probe, never the first call: that one
    # carries set-up costs (cuDNN's plan selection: 2.6 s for an LSTM whose
    # next call takes 40 ms).
    samples = []
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn(warm % nsets)
    e1.record()
    e1.synchronize()
    est = e0.elapsed_time(e1) * 1e-3
    samples.append(est * 1e3)
    if est > limit_s and not compiles and first_s / warm < limit_s:
        # A slow probe after a fast first call is a one-off (cuDNN chose its
        # plan on the probe: 3.15 s for a bf16 LSTM step that takes 44 ms
        # otherwise): one more call decides.
        e0.record()
        fn((warm + 1) % nsets)
        e1.record()
        e1.synchronize()
        est = min(est, e0.elapsed_time(e1) * 1e-3)
        samples.append(e0.elapsed_time(e1))
    if est > limit_s:
        raise TooSlow(est)
    reps = int(min(max_reps, max(1 if est > 0.25 else 3, target_s / max(est, 1e-6))))
    if budget is not None:
        reps = max(1, min(reps, int((budget.left() - 1.0) / max(est, 1e-6))))
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for r, (a, b) in enumerate(evs):
        a.record()
        fn((warm + 1 + r) % nsets)
        b.record()
    torch.cuda.synchronize()
    samples += [a.elapsed_time(b) for a, b in evs]
    samples.sort()
    n = len(samples)
    med = samples[n // 2] if n % 2 else 0.5 * (samples[n // 2 - 1] + samples[n // 2])
    return {"ms": med, "reps": n, "min_ms": samples[0], "max_ms": samples[-1], "first_s": first_s}


def measure_row(store, budget, last, fields, fn, nsets=1, compiles=False, extra=None, recover=None):
    """
    Times fn and writes one row: fields (peer, dtype, B, T, H, mode, ...)
    plus ms, or the reason there is no number. `last` maps a peer's fields
    without T to its previous (T, ms): a point whose time, scaled linearly
    from there, would pass LIMIT_S is skipped without being run. Returns the
    timing dict or None.
    """
    T = fields["T"]
    key = series_key(fields)
    if key in last:
        T0, ms0 = last[key]
        pred = ms0 * 1e-3 * T / T0
        if pred > LIMIT_S:
            store.row(**fields, status="skip", short="> 2 s",
                      why=f"predicted {pred:.1f} s a call from T = {T0} (linear in T), over the {LIMIT_S:.0f} s limit")
            return None
    # On disk until the outcome replaces it: a call that never returns (the
    # section is killed at its time limit) still leaves its row.
    store.row(**fields, status="running", short="did not return",
              why="the call did not return before the section's time limit; the section was killed")
    try:
        r = time_calls(fn, nsets=nsets, budget=budget, warm=2 if compiles else 1, compiles=compiles)
    except TooSlow as e:
        store.row(**fields, status="skip", short="> 2 s", extra={"seconds": e.seconds},
                  why=f"one call took {e.seconds:.2f} s, over the {LIMIT_S:.0f} s limit")
        last[key] = (T, 1e3 * e.seconds)
        return None
    except OutOfTime:
        store.row(**fields, status="budget", short="no time", why="the section's time budget was spent")
        return None
    except Exception as e:
        what = " ".join(f"{k}={v}" for k, v in fields.items())
        why = store.fail(what, e)
        store.row(**fields, status="fail", short=why[:60], why=why)
        if recover:
            recover()
        return None
    last[key] = (T, r["ms"])
    ex = {"reps": r["reps"], "min_ms": round(r["min_ms"], 5), "max_ms": round(r["max_ms"], 5),
          "first_s": round(r["first_s"], 3)}
    ex.update(extra(r) if callable(extra) else (extra or {}))
    store.row(**fields, ms=r["ms"], extra=ex)
    return r


def recover_cuda(store):
    """After a failure: surface a broken CUDA state in the notes, free the cache."""
    try:
        import torch
        torch.cuda.synchronize()
    except Exception as e:
        store.note(f"CUDA state after the failure: {short_error(e)}")
    try:
        free_cuda()
    except Exception:
        pass


def copy_roofline():
    """Device-to-device copy bandwidth (bytes read + written), median of 25 copies of 1 GiB."""
    import torch
    n = 1 << 30
    x = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    t = []
    for _ in range(25):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b))
    t.sort()
    del x, y
    torch.cuda.empty_cache()
    return 2.0 * n / (t[12] * 1e-3)


def free_cuda():
    import gc
    import torch
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# The machine

def run_quiet(cmd, timeout=20):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else ""
    except Exception:
        return ""


def gpu_clocks():
    q = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu,memory.total"
    out = run_quiet(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"]) if shutil.which("nvidia-smi") else ""
    if not out:
        return {}
    vals = [v.strip() for v in out.splitlines()[0].split(",")]
    return dict(zip(q.split(","), vals))


def describe_env():
    env = {"python": platform.python_version(), "host": platform.node(), "cpus": os.cpu_count(),
           "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "nvidia_smi": gpu_clocks()}
    nv = run_quiet(["nvcc", "--version"])
    if nv:
        env["nvcc"] = nv.splitlines()[-1]
    try:
        import torch
        env["torch"] = torch.__version__
        env["torch_cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
        env["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        env["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env["gpu"] = p.name
            env["sms"] = p.multi_processor_count
            env["gpu_mem_gib"] = round(p.total_memory / 2**30, 1)
            env["l2_bytes"] = getattr(p, "L2_cache_size", 0)
            env["cc"] = f"{p.major}.{p.minor}"
    except Exception as e:  # torch missing or broken: the report says so
        env["torch_error"] = short_error(e)
    for mod in ("triton", "numpy", "accelerated_scan", "matplotlib"):
        try:
            m = __import__(mod)
            env[mod] = getattr(m, "__version__", "?")
        except Exception:
            env[mod] = None
    return env


def setup_torch_stream():
    """A non-default stream made current for this thread: prnn's context gets
    the same one, so both libraries' work is ordered on one stream."""
    import torch
    global _STREAM
    _STREAM = torch.cuda.Stream()
    torch.cuda.set_stream(_STREAM)
    return _STREAM


_STREAM = None


def log(msg):
    print(msg, flush=True)
    sys.stdout.flush()
