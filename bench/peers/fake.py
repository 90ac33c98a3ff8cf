"""
fake.py - the dry run's stand-in for the GPU: writes made-up rows for every
section through the same Store the real sections use (with each kind of gap:
skipped, cannot run, failed, out of time), so that the orchestration, the
report and the plots can be exercised on a machine without a GPU or torch.
The numbers follow a crude model of an H200; they are not measurements and
the report says so in its first lines.
"""
import random

import sec_layers
import sec_scan
import sec_train
import sec_wall

BW = 4200.0  # GB/s


def _env():
    return {"python": "3.12 (fake)", "gpu": "FAKE GPU (dry run)", "sms": 132, "l2_bytes": 60 * 2**20,
            "gpu_mem_gib": 139.8, "cc": "9.0", "torch": "none (dry run)", "torch_cuda": "-", "cudnn": "-",
            "triton": None, "accelerated_scan": "0.3.1", "numpy": "-", "nvcc": "-",
            "matmul_allow_tf32": False, "cudnn_allow_tf32": True,
            "nvidia_smi": {"name": "FAKE GPU", "driver_version": "0", "clocks.sm": "1980 MHz",
                           "clocks.max.sm": "1980 MHz", "clocks.mem": "3201 MHz", "clocks.max.mem": "3201 MHz",
                           "power.limit": "700 W", "power.draw": "100 W", "temperature.gpu": "40"}}


def scan(store, budget, args):
    rnd = random.Random(1)
    store.data["env"] = _env()
    store.data["meta"].update(peers=[{"id": i, "label": l, "setting": s} for i, l, s in sec_scan.PEERS],
                              copy_gbps=BW, prnn_version="0.1.0")
    eff = {"prnn-chunked": 0.8, "prnn-tree": 0.5, "acc-warp": 0.7, "acc-triton": 0.35, "torch-log": 0.08,
           "torch-log-compiled": 0.2}
    for B, H, T, dt in sec_scan.shape_list(args.quick):
        n = B * T * H
        for p in sec_scan.PEER_IDS:
            for mode in sec_scan.MODES:
                f = dict(peer=p, dtype=dt, B=B, T=T, H=H, mode=mode)
                if 6 * n * sec_scan.ES[dt] > sec_scan.MEM_BUDGET:
                    store.row(**f, status="skip", short="> 40 GiB", why="six (B, T, H) tensors over the 40 GiB budget")
                    continue
                if p == "acc-warp" and T > 65536:
                    store.row(**f, status="unsupported", short="T > 65536", why="the kernel handles T = 2^k for 32 <= T <= 65536 only")
                    continue
                if p == "acc-warp" and dt == "bf16" and (T, B * H) in ((65536, 64), (4096, 256)):
                    why = ("AcceleratorError: CUDA error: an illegal memory access was encountered "
                           "(the shape's child process; the next shape ran in a fresh one)")
                    store.row(**f, status="fail", short="AcceleratorError: CUDA error: an illegal memory access",
                              why=why)
                    continue
                if p == "torch-log-compiled" and T == 1048576 and dt == "bf16":
                    store.row(**f, status="fail", short="out of memory", why="out of memory")
                    continue
                byts = n * sec_scan.BYTES_PER_ELEM[(dt, mode)]
                if p == "prnn-serial":
                    ms = T * (0.45e-3 if dt == "bf16" else 0.12e-3) * (3 if mode == "fwdbwd" else 1) * max(1, H * B / 4096)
                    if ms > 2000:
                        store.row(**f, status="skip", short="> 2 s", why="one call took 2.9 s, over the 2 s limit")
                        continue
                else:
                    small = min(1.0, n / 2**26) ** 0.35
                    e = 0.95 if p == "acc-warp" and T == 4096 and B * H == 64 else eff[p]  # one loss, for the report
                    ms = byts / (BW * 1e9 * e * max(small, 0.05)) * 1e3 + 0.01
                ex = {"reps": 25, "first_s": 0.01}
                if mode == "fwd" and n <= sec_scan.ACC_MAX_N:
                    ex["relerr"] = (3e-3 if dt == "bf16" else 2e-7) * (1 + 1e3 * (p.startswith("torch") and T > 60000))
                store.row(**f, ms=ms * rnd.uniform(0.97, 1.03), extra=ex)
    store.note("accelerated_scan.warp loaded in 0.4 s (fake)")


def layers(store, budget, args):
    rnd = random.Random(2)
    store.data["env"] = _env()
    store.data["meta"].update(peers=[{"id": i, "label": l, "setting": s} for i, l, s in sec_layers.PEERS],
                              D=1024, H=1024, mingru_agreement_relerr=3e-7)
    per_tok = {"prnn-mingru": 0.036, "prnn-minlstm": 0.055, "prnn-qrnn": 0.046, "prnn-sru": 0.047,
               "torch-mingru": 0.3, "torch-mingru-compiled": 0.09}
    for dt, B, T in sec_layers.configs(args.quick):
        for p in sec_layers.PEER_IDS:
            f = dict(peer=p, dtype=dt, B=B, T=T, H=1024, mode="step")
            if p.startswith("cudnn"):
                ms = T * (0.03 if B == 16 else 0.02) * (1.3 if dt == "f32" else 1.0) * (0.8 if p == "cudnn-gru" else 1)
            else:
                ms = B * T * per_tok[p] * 1e-3 * (8 if dt == "f32" else 1) + 0.05 * (1 + 4 * p.startswith("torch"))
            if ms > 2000:
                store.row(**f, status="skip", short="> 2 s", why="predicted 3.1 s a call from T = 16384 (linear in T), over the 2 s limit")
                continue
            if p == "torch-mingru-compiled" and dt == "f32" and B == 1:
                store.row(**f, status="budget", short="no time", why="the section's time budget was spent")
                continue
            store.row(**f, ms=ms * rnd.uniform(0.97, 1.03), extra={"reps": 10, "mtok_s": B * T / ms / 1e3})


def wall(store, budget, args):
    store.data["env"] = _env()
    store.data["meta"]["peers"] = [{"id": i, "label": l, "setting": s, "mode": m} for i, l, s, m in sec_wall.PEERS]
    for p, _, _, mode in sec_wall.PEERS:
        stopped = None
        for T in sec_wall.TS:
            f = dict(peer=p, dtype="bf16", B=1, T=T, H=1024, mode=mode)
            if stopped:
                store.row(**f, status="skip", short="> 2 s", why=f"not run: stopped at T = {stopped}")
                continue
            ms = {"prnn-scan": 0.02 + T * 2e-6, "prnn-mingru": 0.2 + T * 4e-5, "prnn-serial": T * 1.4e-3,
                  "cudnn-lstm": T * 0.035}[p]
            if ms > 2000:
                stopped = T
                store.row(**f, status="skip", short="> 2 s", why="one call took 2.3 s, over the 2 s limit")
                continue
            store.row(**f, ms=ms, extra={"reps": 5, "us_per_step": ms * 1e3 / T})


def train(store, budget, args):
    store.data["env"] = _env()
    store.data["meta"].update(peers=[{"id": i, "label": l, "setting": s} for i, l, s in sec_train.PEERS],
                              layers=4, width=1024, T=4096, B=16, prnn_command="build-gpu/prnn train ... (fake)")
    vals = {"prnn-train": 14.0, "torch-eager": 60.0, "torch-compiled": 25.0}
    for p in sec_train.PEER_IDS:
        f = dict(peer=p, dtype="bf16", B=16, T=4096, H=1024, mode="train")
        if p == "torch-lstm":
            store.row(**f, status="fail", short="RuntimeError: fake", why="RuntimeError: a made-up failure")
            store.fail(p, RuntimeError("a made-up failure, to show how failures are listed"))
            continue
        ms = vals[p]
        store.row(**f, ms=ms, extra={"tokens_s": round(16 * 4096 / (ms * 1e-3)), "steps_timed": 20,
                                     "params": 8930000 if p == "prnn-train" else 8931584})


def run(section, store, budget, args):
    {"scan": scan, "layers": layers, "wall": wall, "train": train}[section](store, budget, args)
