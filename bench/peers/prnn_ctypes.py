"""
prnn_ctypes.py - a ctypes binding of libprnn_shared.so (cmake/peers.cmake) for
the peer benchmark: contexts, the scan and the cell layers of include/prnn.h
and include/prnn_cell.h.

Tensors are passed as raw addresses (a torch tensor's data_ptr(), a numpy
array's ctypes.data) or None for NULL; with a CUDA context they are device
addresses and the calls run on the context's stream. Give the context
PyTorch's current stream (a non-default one: a NULL stream makes prnn create
its own) and prnn's work orders with PyTorch's without extra
synchronisation. Every call checks its prnn_status and raises PrnnError.

The struct layouts mirror the headers field by field; Lib() checks them on
load by calling the library's own *_make() constructors.

Run as a program, it checks the binding on the CPU against numpy (no GPU, no
torch): python3 bench/peers/prnn_ctypes.py [path/to/libprnn_shared.so]
"""
import ctypes as C
import os
import sys

# ---------------------------------------------------------------------------
# Enums (include/prnn.h, include/prnn_cell.h)

DEVICE_CPU, DEVICE_CUDA = 0, 1
DTYPE = {"f32": 0, "f64": 1, "bf16": 2, "f16": 3}
DTYPE_SIZE = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2}
ALGO = {"auto": 0, "serial": 1, "tree": 2, "chunked": 3, "striped": 4, "fixed": 5}
CELL = {"mingru": 0, "minlstm": 1, "qrnn": 2, "sru": 3, "gilr-lstm": 4}
QRNN_POOLING = {"f": 0, "fo": 1, "ifo": 2}

STATUS = ["PRNN_OK", "PRNN_ERR_NULL_POINTER", "PRNN_ERR_INVALID_SIZE", "PRNN_ERR_SIZE_OVERFLOW",
          "PRNN_ERR_INVALID_LENGTH", "PRNN_ERR_ALIASING", "PRNN_ERR_INVALID_ARGUMENT",
          "PRNN_ERR_OUT_OF_MEMORY", "PRNN_ERR_UNSUPPORTED", "PRNN_ERR_NO_DEVICE", "PRNN_ERR_CUDA"]


# ---------------------------------------------------------------------------
# Structs, in the headers' field order

class CtxConfig(C.Structure):
    _fields_ = [("device", C.c_int),          # prnn_device
                ("num_threads", C.c_int),
                ("cuda_device", C.c_int),
                ("cuda_stream", C.c_void_p)]  # cudaStream_t


class ScanDesc(C.Structure):
    _fields_ = [("B", C.c_int64), ("T", C.c_int64), ("H", C.c_int64),
                ("dtype", C.c_int),           # prnn_dtype
                ("algo", C.c_int),            # prnn_scan_algo
                ("reverse", C.c_int),
                ("chunk", C.c_int64),
                ("lengths", C.POINTER(C.c_int64))]


class CellDesc(C.Structure):
    _fields_ = [("type", C.c_int),            # prnn_cell_type
                ("D", C.c_int64), ("H", C.c_int64),
                ("dtype", C.c_int),           # prnn_dtype
                ("bidirectional", C.c_int),
                ("bias", C.c_int),
                ("log_space", C.c_int),
                ("pooling", C.c_int),         # prnn_qrnn_pooling
                ("window", C.c_int),
                ("recompute", C.c_int64),
                ("algo", C.c_int)]            # prnn_scan_algo


class PrnnError(RuntimeError):
    def __init__(self, what, status, text):
        super().__init__(f"{what}: {STATUS[status] if 0 <= status < len(STATUS) else status} ({text})")
        self.status = status


def default_lib_path():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    for d in ("build-gpu", "build"):
        p = os.path.join(root, d, "libprnn_shared.so")
        if os.path.exists(p):
            return p
    return os.path.join(root, "build-gpu", "libprnn_shared.so")


# ---------------------------------------------------------------------------
# The library

_vp, _i64, _int = C.c_void_p, C.c_int64, C.c_int


class Lib:
    def __init__(self, path=None):
        self.path = path or default_lib_path()
        self.so = C.CDLL(self.path)
        so = self.so
        sig = {
            "prnn_strerror": (C.c_char_p, [_int]),
            "prnn_version": (C.c_char_p, []),
            "prnn_cuda_available": (_int, []),
            "prnn_ctx_config_default": (CtxConfig, []),
            "prnn_ctx_init": (_int, [C.POINTER(_vp), C.POINTER(CtxConfig)]),
            "prnn_ctx_free": (None, [_vp]),
            "prnn_ctx_synchronize": (_int, [_vp]),
            "prnn_ctx_cuda_stream": (_vp, [_vp]),
            "prnn_dtype_size": (C.c_size_t, [_int]),
            "prnn_scan_desc_make": (ScanDesc, [_i64, _i64, _i64]),
            "prnn_scan_forward": (_int, [_vp, C.POINTER(ScanDesc), _vp, _vp, _vp, _vp, _vp]),
            "prnn_scan_backward": (_int, [_vp, C.POINTER(ScanDesc), _vp, _vp, _vp, _vp, _vp, _vp,
                                          _vp, _vp]),
            "prnn_cell_desc_make": (CellDesc, [_int, _i64, _i64]),
            "prnn_cell_check": (_int, [C.POINTER(CellDesc)]),
            "prnn_cell_out_size": (_i64, [C.POINTER(CellDesc)]),
            "prnn_cell_gates": (_i64, [C.POINTER(CellDesc)]),
            "prnn_cell_param_count": (_int, [C.POINTER(CellDesc), C.POINTER(_i64)]),
            "prnn_cell_state_size": (_int, [C.POINTER(CellDesc), C.POINTER(_i64)]),
            "prnn_cell_act_bytes": (_int, [C.POINTER(CellDesc), _i64, _i64, C.POINTER(C.c_size_t)]),
            "prnn_cell_init_params": (_int, [C.POINTER(CellDesc), _vp, C.c_uint64]),
            "prnn_cell_forward": (_int, [_vp, C.POINTER(CellDesc), _i64, _i64, C.POINTER(_i64),
                                         _vp, _vp, _vp, _vp, _vp, _vp]),
            "prnn_cell_backward": (_int, [_vp, C.POINTER(CellDesc), _i64, _i64, C.POINTER(_i64),
                                          _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp]),
        }
        for name, (res, args) in sig.items():
            f = getattr(so, name)
            f.restype, f.argtypes = res, args
        self._check_layouts()

    def check(self, status, what):
        if status != 0:
            raise PrnnError(what, status, self.so.prnn_strerror(status).decode())

    def version(self):
        return self.so.prnn_version().decode()

    def cuda_available(self):
        return bool(self.so.prnn_cuda_available())

    def _check_layouts(self):
        """The struct layouts against the library's own constructors."""
        d = self.so.prnn_scan_desc_make(3, 5, 7)
        got = (d.B, d.T, d.H, d.dtype, d.algo, d.reverse, d.chunk, bool(d.lengths))
        if got != (3, 5, 7, 0, 0, 0, 0, False):
            raise RuntimeError(f"prnn_scan_desc layout mismatch: {got}")
        c = self.so.prnn_cell_desc_make(CELL["qrnn"], 11, 13)
        got = (c.type, c.D, c.H, c.dtype, c.bidirectional, c.bias, c.log_space, c.pooling,
               c.window, c.recompute, c.algo)
        if got != (2, 11, 13, 0, 0, 1, 0, QRNN_POOLING["fo"], 1, 0, 0):
            raise RuntimeError(f"prnn_cell_desc layout mismatch: {got}")
        if C.sizeof(ScanDesc) != 56 or C.sizeof(CellDesc) != 64 or C.sizeof(CtxConfig) != 24:
            raise RuntimeError("unexpected struct sizes")
        cfg = self.so.prnn_ctx_config_default()
        if (cfg.device, cfg.num_threads, cfg.cuda_device, cfg.cuda_stream) != (0, 0, 0, None):
            raise RuntimeError("prnn_ctx_config layout mismatch")

    # descriptors -----------------------------------------------------------

    def scan_desc(self, B, T, H, dtype="f32", algo="auto", reverse=0):
        d = self.so.prnn_scan_desc_make(B, T, H)
        d.dtype, d.algo, d.reverse = DTYPE[dtype], ALGO[algo], int(reverse)
        return d

    def cell_desc(self, cell, D, H, dtype="f32", bias=1, log_space=0, pooling="fo", window=1,
                  recompute=0, algo="auto", bidirectional=0):
        c = self.so.prnn_cell_desc_make(CELL[cell], D, H)
        c.dtype, c.bias, c.log_space, c.bidirectional = DTYPE[dtype], bias, log_space, bidirectional
        c.algo, c.recompute = ALGO[algo], recompute
        if cell == "qrnn":
            c.pooling, c.window = QRNN_POOLING[pooling], window
        self.check(self.so.prnn_cell_check(C.byref(c)), "prnn_cell_check")
        return c

    def cell_out_size(self, desc):
        return self.so.prnn_cell_out_size(C.byref(desc))

    def cell_param_count(self, desc):
        n = _i64()
        self.check(self.so.prnn_cell_param_count(C.byref(desc), C.byref(n)), "prnn_cell_param_count")
        return n.value

    def cell_state_size(self, desc):
        n = _i64()
        self.check(self.so.prnn_cell_state_size(C.byref(desc), C.byref(n)), "prnn_cell_state_size")
        return n.value

    def cell_act_bytes(self, desc, B, T):
        n = C.c_size_t()
        self.check(self.so.prnn_cell_act_bytes(C.byref(desc), B, T, C.byref(n)), "prnn_cell_act_bytes")
        return n.value

    def cell_init_params(self, desc, host_ptr, seed):
        """host_ptr: (P) host memory in desc.dtype, F32 or F64."""
        self.check(self.so.prnn_cell_init_params(C.byref(desc), host_ptr, seed),
                   "prnn_cell_init_params")


class Context:
    """A prnn context: CPU, or CUDA on a given stream (a cudaStream_t address)."""

    def __init__(self, lib, device="cuda", stream=None, cuda_device=0, num_threads=0):
        self.lib = lib
        cfg = lib.so.prnn_ctx_config_default()
        cfg.device = DEVICE_CUDA if device == "cuda" else DEVICE_CPU
        cfg.cuda_device, cfg.num_threads, cfg.cuda_stream = cuda_device, num_threads, stream or None
        h = _vp()
        lib.check(lib.so.prnn_ctx_init(C.byref(h), C.byref(cfg)), "prnn_ctx_init")
        self.h = h

    def free(self):
        if self.h:
            self.lib.so.prnn_ctx_free(self.h)
            self.h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def synchronize(self):
        self.lib.check(self.lib.so.prnn_ctx_synchronize(self.h), "prnn_ctx_synchronize")

    def stream(self):
        return self.lib.so.prnn_ctx_cuda_stream(self.h)

    # h (B,T,H) out, hT (B,H) out, a, b (B,T,H) in, h0 (B,H) in
    def scan_forward(self, desc, h, hT, a, b, h0=None):
        self.lib.check(self.lib.so.prnn_scan_forward(self.h, C.byref(desc), h, hT, a, b, h0),
                       "prnn_scan_forward")

    # da, db (B,T,H) out, dh0 (B,H) out; a, h (B,T,H), h0 (B,H), dh (B,T,H), dhT (B,H) in
    def scan_backward(self, desc, da, db, dh0, a, h, h0, dh, dhT):
        self.lib.check(self.lib.so.prnn_scan_backward(self.h, C.byref(desc), da, db, dh0, a, h, h0,
                                                      dh, dhT), "prnn_scan_backward")

    # y (B,T,Hout) out, hT (B,S2) out, act out; x (B,T,D), params (P), h0 (B,S2) in
    def cell_forward(self, desc, B, T, y, hT, act, x, params, h0=None):
        self.lib.check(self.lib.so.prnn_cell_forward(self.h, C.byref(desc), B, T, None, y, hT, act,
                                                     x, params, h0), "prnn_cell_forward")

    # dx (B,T,D) out, dparams (P) accumulated, dh0 out; dy, dhT, x, params, h0, act in
    def cell_backward(self, desc, B, T, dx, dparams, dh0, dy, dhT, x, params, h0, act):
        self.lib.check(self.lib.so.prnn_cell_backward(self.h, C.byref(desc), B, T, None, dx, dparams,
                                                      dh0, dy, dhT, x, params, h0, act),
                       "prnn_cell_backward")


# ---------------------------------------------------------------------------
# Self-check on the CPU against numpy

def _selftest(path):
    import numpy as np

    lib = Lib(path)
    print(f"loaded {lib.path}: prnn {lib.version()}, CUDA device available: {lib.cuda_available()}")
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    passed = failed = 0

    def expect(ok, what, err=None):
        nonlocal passed, failed
        passed += bool(ok)
        failed += not ok
        print(f"  {'ok  ' if ok else 'FAIL'} {what}" + (f" (max err {err:.2e})" if err is not None else ""))

    def ptr(x):
        return x.ctypes.data if x is not None else None

    ctx = Context(lib, device="cpu")
    B, T, H = 3, 257, 5
    for dt, np_dt, tol in (("f32", np.float32, 1e-5), ("f64", np.float64, 1e-12)):
        a = rng.uniform(0.5, 1.0, (B, T, H)).astype(np_dt)
        b = rng.uniform(-1, 1, (B, T, H)).astype(np_dt)
        h0 = rng.uniform(-1, 1, (B, H)).astype(np_dt)
        dh = rng.uniform(-1, 1, (B, T, H)).astype(np_dt)
        dhT = rng.uniform(-1, 1, (B, H)).astype(np_dt)
        # serial reference in double (forward, then the adjoint recurrence)
        hr = np.zeros((B, T, H))
        prev = h0.astype(np.float64)
        for t in range(T):
            prev = a[:, t] * prev + b[:, t]
            hr[:, t] = prev
        g = np.zeros((B, T, H))
        nxt = dhT.astype(np.float64)
        for t in range(T - 1, -1, -1):
            nxt = dh[:, t] + (a[:, t + 1] * nxt if t + 1 < T else nxt)
            g[:, t] = nxt
        hprev = np.concatenate([h0[:, None].astype(np.float64), hr[:, :-1]], axis=1)
        dar, dbr, dh0r = g * hprev, g, a[:, 0] * g[:, 0]
        for algo in ("serial", "tree", "auto"):
            d = lib.scan_desc(B, T, H, dt, algo)
            h = np.full((B, T, H), np.nan, np_dt)
            hT = np.full((B, H), np.nan, np_dt)
            ctx.scan_forward(d, ptr(h), ptr(hT), ptr(a), ptr(b), ptr(h0))
            e = max(np.abs(h - hr).max(), np.abs(hT - hr[:, -1]).max())
            expect(e < tol * 10, f"scan forward {dt} {algo}", e)
            da, db, dh0o = (np.full(x.shape, np.nan, np_dt) for x in (a, b, h0))
            ctx.scan_backward(d, ptr(da), ptr(db), ptr(dh0o), ptr(a), ptr(h), ptr(h0), ptr(dh), ptr(dhT))
            e = max(np.abs(da - dar).max(), np.abs(db - dbr).max(), np.abs(dh0o - dh0r).max())
            expect(e < tol * 10, f"scan backward {dt} {algo}", e)

    # A minGRU layer: the parameter layout W (D, 2H) row-major, then bias (2H)
    D, H, B, T = 4, 3, 2, 9
    desc = lib.cell_desc("mingru", D, H, "f64")
    P = lib.cell_param_count(desc)
    expect(P == D * 2 * H + 2 * H, f"mingru param count {P}")
    params = np.zeros(P, np.float64)
    lib.cell_init_params(desc, ptr(params), 7)
    params[D * 2 * H:] = rng.uniform(-0.5, 0.5, 2 * H)  # nonzero bias, to see its place
    x = rng.uniform(-1, 1, (B, T, D))
    W, bias = params[:D * 2 * H].reshape(D, 2 * H), params[D * 2 * H:]
    Pm = x @ W + bias
    k, n = Pm[..., :H], Pm[..., H:]
    z = 1 / (1 + np.exp(-k))
    gn = np.where(n >= 0, n + 0.5, 1 / (1 + np.exp(-n)))
    c = np.zeros((B, H))
    yr = np.zeros((B, T, H))
    for t in range(T):
        c = (1 - z[:, t]) * c + z[:, t] * gn[:, t]
        yr[:, t] = c
    y = np.full((B, T, H), np.nan)
    act = np.zeros(lib.cell_act_bytes(desc, B, T), np.uint8)
    ctx.cell_forward(desc, B, T, ptr(y), None, ptr(act), ptr(x), ptr(params))
    e = np.abs(y - yr).max()
    expect(e < 1e-12, "mingru forward f64 against numpy", e)
    dy = rng.uniform(-1, 1, (B, T, H))
    dx = np.full((B, T, D), np.nan)
    dparams = np.zeros(P)
    ctx.cell_backward(desc, B, T, ptr(dx), ptr(dparams), None, ptr(dy), None, ptr(x), ptr(params),
                      None, ptr(act))
    # the gradient against a central difference of sum(y * dy), in double
    eps, worst = 1e-6, 0.0
    for i in range(0, P, 5):
        pp, pm = params.copy(), params.copy()
        pp[i] += eps
        pm[i] -= eps
        yp, ym = np.zeros_like(y), np.zeros_like(y)
        ctx.cell_forward(desc, B, T, ptr(yp), None, ptr(act), ptr(x), ptr(pp))
        ctx.cell_forward(desc, B, T, ptr(ym), None, ptr(act), ptr(x), ptr(pm))
        fd = ((yp - ym) * dy).sum() / (2 * eps)
        worst = max(worst, abs(fd - dparams[i]))
    expect(worst < 1e-7, "mingru dparams against central differences", worst)
    for cell in ("minlstm", "qrnn", "sru"):
        cd = lib.cell_desc(cell, 16, 16, "f32")
        expect(lib.cell_param_count(cd) > 0 and lib.cell_act_bytes(cd, 2, 8) > 0, f"{cell} sizes")
    ctx.free()

    if not lib.cuda_available():
        try:
            Context(lib, device="cuda")
            expect(False, "CUDA context without a device fails")
        except PrnnError as e:
            expect(e.status in (STATUS.index("PRNN_ERR_NO_DEVICE"), STATUS.index("PRNN_ERR_UNSUPPORTED"),
                                STATUS.index("PRNN_ERR_CUDA")), f"CUDA context without a device: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_selftest(sys.argv[1] if len(sys.argv) > 1 else None))
