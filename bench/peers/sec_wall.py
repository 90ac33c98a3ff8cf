"""
sec_wall.py - section 3 of the peer benchmark: the O(T) wall. Time of one
forward+backward against T at B = 1, H = D = 1024, bf16, T = 256 .. 1M in
powers of 4: cuDNN's LSTM (a step per time step, however wide the card),
prnn's serial-in-time scan kernel, prnn's parallel scan (AUTO) and prnn's
minGRU layer (GEMMs included). A peer stops at the first point where one
call takes (or, scaled linearly from the previous point, would take) over
2 s.

Size letters: B batch rows, T time steps, H channels (= D, the layer input).
"""
from common import describe_env, free_cuda, measure_row, recover_cuda, setup_torch_stream

B, H, D = 1, 1024, 1024
TS = [256, 1024, 4096, 16384, 65536, 262144, 1048576]
DTYPE = "bf16"
PEERS = [
    ("prnn-scan", "prnn scan (AUTO)", "prnn_scan_forward + prnn_scan_backward, bf16 storage, algo AUTO (CHUNKED)", "fwdbwd"),
    ("prnn-mingru", "prnn minGRU layer", "prnn_cell_forward + prnn_cell_backward, bf16, GEMMs included", "step"),
    ("prnn-serial", "prnn serial scan", "prnn_scan_forward + prnn_scan_backward, bf16 storage, algo SERIAL (a loop over t per channel)", "fwdbwd"),
    ("cudnn-lstm", "cuDNN LSTM", "torch.nn.LSTM(1024, 1024) on cuDNN under torch.autocast(bfloat16), forward + autograd backward (x and weights)", "step"),
]
PEER_IDS = [p[0] for p in PEERS]


def run(store, budget, args):
    store.data["env"] = describe_env()
    import numpy as np
    import torch
    import prnn_ctypes as P
    setup_torch_stream()
    store.data["meta"]["peers"] = [{"id": i, "label": l, "setting": s, "mode": m} for i, l, s, m in PEERS]
    store.data["meta"].update(B=B, H=H, D=D, dtype=DTYPE)
    lib = ctx = lib_error = None
    try:
        lib = P.Lib(args.lib)
        ctx = P.Context(lib, "cuda", stream=torch.cuda.current_stream().cuda_stream)
    except Exception as e:  # the LSTM still runs
        lib_error = store.fail("loading libprnn_shared.so and a CUDA context", e)
        lib = None
    last = {}
    tdt = torch.bfloat16 if DTYPE == "bf16" else torch.float32
    ts = [t for t in TS if not args.quick or t <= 65536]
    g = torch.Generator(device="cuda")
    g.manual_seed(4242)
    for peer, _, _, mode in PEERS:
        print(f"  wall: {peer}", flush=True)
        if peer.startswith("prnn-") and lib is None:
            for T in ts:
                store.row(peer=peer, dtype=DTYPE, B=B, T=T, H=H, mode=mode, status="fail", short="no libprnn", why=lib_error)
            continue
        for T in ts:
            fields = dict(peer=peer, dtype=DTYPE, B=B, T=T, H=H, mode=mode)
            try:
                keep = []
                if peer in ("prnn-scan", "prnn-serial"):
                    a = (torch.rand((B, T, H), generator=g, device="cuda") * 0.5 + 0.5).to(tdt)
                    b = (torch.rand((B, T, H), generator=g, device="cuda") * 2 - 1).to(tdt)
                    dh = (torch.rand((B, T, H), generator=g, device="cuda") * 2 - 1).to(tdt)
                    h, da, db = torch.empty_like(a), torch.empty_like(a), torch.empty_like(a)
                    keep = [a, b, dh, h, da, db]
                    d = lib.scan_desc(B, T, H, DTYPE, "serial" if peer == "prnn-serial" else "auto")
                    pa, pb, pdh, ph, pda, pdb = (x.data_ptr() for x in keep)

                    def fn(i, d=d, pa=pa, pb=pb, pdh=pdh, ph=ph, pda=pda, pdb=pdb):
                        ctx.scan_forward(d, ph, None, pa, pb, None)
                        ctx.scan_backward(d, pda, pdb, None, pa, ph, None, pdh, None)
                elif peer == "prnn-mingru":
                    desc = lib.cell_desc("mingru", D, H, DTYPE)
                    n = lib.cell_param_count(desc)
                    host = np.empty(n, np.float32)
                    lib.cell_init_params(lib.cell_desc("mingru", D, H, "f32"), host.ctypes.data, 7)
                    w = torch.from_numpy(host).cuda().to(tdt)
                    dw = torch.zeros(n, dtype=torch.float32, device="cuda")
                    x = (torch.rand((B, T, D), generator=g, device="cuda") * 2 - 1).to(tdt)
                    dy = (torch.rand((B, T, H), generator=g, device="cuda") * 2 - 1).to(tdt)
                    y, dx = torch.empty_like(dy), torch.empty_like(x)
                    act = torch.empty(lib.cell_act_bytes(desc, B, T), dtype=torch.uint8, device="cuda")
                    keep = [w, dw, x, dy, y, dx, act]
                    pw, pdw, px, pdy, py, pdx, pact = (t.data_ptr() for t in keep)

                    def fn(i, desc=desc, T=T, pw=pw, pdw=pdw, px=px, pdy=pdy, py=py, pdx=pdx, pact=pact):
                        ctx.cell_forward(desc, B, T, py, None, pact, px, pw, None)
                        ctx.cell_backward(desc, B, T, pdx, pdw, None, pdy, None, px, pw, None, pact)
                else:
                    torch.manual_seed(0)
                    m = torch.nn.LSTM(D, H, batch_first=True).cuda()
                    params = list(m.parameters())
                    x = (torch.rand((B, T, D), generator=g, device="cuda") * 2 - 1).to(tdt).requires_grad_()
                    dy = (torch.rand((B, T, H), generator=g, device="cuda") * 2 - 1).to(tdt)
                    keep = [m, x, dy]

                    def fn(i, m=m, x=x, dy=dy, params=params):
                        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=DTYPE == "bf16"):
                            y = m(x)[0]
                        return torch.autograd.grad(y, [x] + params, dy)
            except Exception as e:
                why = store.fail(f"wall {peer} T={T} (setup)", e)
                store.row(**fields, status="fail", short=why[:60], why=why)
                recover_cuda(store)
                r = None
            else:
                r = measure_row(store, budget, last, fields, fn, recover=lambda: recover_cuda(store),
                                extra=lambda r, T=T: {"us_per_step": round(r["ms"] * 1e3 / T, 4)})
                del keep, fn
            free_cuda()
            if r is None and store.data["rows"][-1]["status"] in ("skip", "budget", "fail"):
                st = dict(store.data["rows"][-1])
                for T2 in ts[ts.index(T) + 1:]:
                    store.row(**dict(fields, T=T2), status=st["status"], short=st.get("short", ""),
                              why=f"not run: stopped at T = {T} ({st.get('why', '')})")
                break
    if ctx:
        ctx.free()
