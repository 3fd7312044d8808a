#!/usr/bin/env python3
"""The strongest attention a PyTorch user has at hand, on the shapes of
`chunkserve bench attention --device cuda`, timed the same way (L2 flushed by
a read before every call, the GPU busy while the call is queued, CUDA events,
calls of a cell in the same rounds in rotating order, medians), so the two
tables are like with like when run in one sitting on one GPU:

  - SDPA per sequence: scaled_dot_product_attention on [b, h, 1, d] queries
    against each sequence's own [n_p, d] keys (FlashAttention-2 backend);
  - naive: q K^T, softmax, times V, in three operations;
  - cascade from stock operations: the shared prefix once for all b queries
    and the private part per sequence, each by the flash kernel that returns
    the log-sum-exp, merged by it (two launches and a merge).

    python3 bench/peers/attention_torch.py [--reps 50] [--quick] [--json FILE]
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


class Timer:
    """Before each timed call: a read of 4x the L2's size (L2 then holds clean
    lines of that buffer), then the GPU kept busy (torch.cuda._sleep) while
    Python queues the timed call, so its launch overhead falls outside the
    interval the CUDA events measure: the kernels' own time, as chunkserve's
    bench measures its own."""

    def __init__(self):
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 64 << 20)
        self.flush_buf = torch.zeros(max(4 * l2, 64 << 20) // 4, dtype=torch.float32, device="cuda")
        self.sleep_cycles = int(2e-3 * props.clock_rate * 1e3) if hasattr(props, "clock_rate") else 4_000_000

    def flush(self):
        self.flush_buf.sum()
        torch.cuda._sleep(self.sleep_cycles)

    def interleaved(self, fns, reps):
        n = len(fns)
        times = [[] for _ in fns]
        for f in fns:
            f()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for r in range(reps):
            for k in range(n):
                i = (k + r) % n
                self.flush()
                start.record()
                fns[i]()
                stop.record()
                stop.synchronize()
                times[i].append(start.elapsed_time(stop) * 1e3)
        return [median(t) for t in times]


def flash_lse(q, k, v):
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)
    return out[0], out[1]  # output [B, H, L, D], logsumexp [B, H, L] (fp32)


def make_shapes(b, h, d, n_s, n_p, gen):
    kw = dict(dtype=torch.float16, device="cuda")
    q = torch.randn(b, h, 1, d, generator=gen, **kw)
    k = torch.randn(b, h, n_p, d, generator=gen, **kw)  # every sequence's own copy (no sharing)...
    v = torch.randn(b, h, n_p, d, generator=gen, **kw)
    k[:, :, :n_s] = k[:1, :, :n_s].clone()  # ...of the same prefix
    v[:, :, :n_s] = v[:1, :, :n_s].clone()
    ks = k[:1, :, :n_s].contiguous()  # the shared prefix, once
    vs = v[:1, :, :n_s].contiguous()
    kp = k[:, :, n_s:].contiguous()
    vp = v[:, :, n_s:].contiguous()
    return q, k, v, ks, vs, kp, vp


def methods(b, h, d, n_s, n_p, gen):
    q, k, v, ks, vs, kp, vp = make_shapes(b, h, d, n_s, n_p, gen)
    scale = 1.0 / math.sqrt(d)

    def sdpa():  # FlashAttention-2
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    def sdpa_default():  # what PyTorch picks by itself
        return F.scaled_dot_product_attention(q, k, v)

    def sdpa_efficient():  # the memory-efficient (cutlass) kernel
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    def naive():
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        return torch.matmul(torch.softmax(s.float(), dim=-1).half(), v)

    def cascade():
        outs = []
        if n_s > 0:  # all b queries as one sequence of b rows against the shared keys
            qs = q.reshape(b, h, d).transpose(0, 1).unsqueeze(0).contiguous()  # [1, h, b, d]
            o1, l1 = flash_lse(qs, ks, vs)
            outs.append((o1[0].transpose(0, 1).unsqueeze(2), l1[0].transpose(0, 1).unsqueeze(2)))
        if n_p > n_s:
            o2, l2 = flash_lse(q, kp, vp)
            outs.append((o2, l2))
        if len(outs) == 1:
            return outs[0][0]
        (o1, l1), (o2, l2) = outs
        m = torch.maximum(l1, l2)
        w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
        return ((o1.float() * w1.unsqueeze(-1) + o2.float() * w2.unsqueeze(-1)) / (w1 + w2).unsqueeze(-1)).half()

    # The three agree (a check that the cascade is built right).
    ref = naive().float()
    for f in (sdpa, sdpa_default, sdpa_efficient, cascade):
        err = (f().float() - ref).abs().max().item()
        assert err < 2e-2, f"{f.__name__} differs from the naive formula by {err}"
    return sdpa, naive, cascade, sdpa_default, sdpa_efficient


def copy_gbs(timer):
    n = 1 << 30
    a = torch.ones(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = timer.interleaved([lambda: b.copy_(a)], 20)[0]
    return 2 * n / us / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    timer = Timer()
    gen = torch.Generator(device="cuda").manual_seed(1)
    bw = copy_gbs(timer)
    name = torch.cuda.get_device_name(0)
    print(f"Device: {name}; PyTorch {torch.__version__}; device-to-device copy {bw:.0f} GB/s (read + written)\n")
    js = {"device": name, "torch": torch.__version__, "copy_gbs": bw}
    b, h, d = 32, 32, 128

    def bound(bb, n_s, n_p):
        return (n_s + bb * (n_p - n_s)) * h * d * 2 * 2 / (bw * 1e3)

    print(f"### PyTorch on Table 3's shapes (b={b}, h={h}, d={d}, fp16; median us per call, L2 flushed)\n")
    print("| n_p | n_s | SDPA per sequence (flash) | SDPA (default choice) | SDPA (efficient) | naive | stock-op cascade "
          "| bytes-once bound |\n|---|---|---|---|---|---|---|---|")
    nps = [256] if a.quick else [1024, 2048, 4096]
    js["table3"] = []
    for n_p in nps:
        for n_s in (0, n_p // 2, 3 * n_p // 4, n_p):
            sdpa, naive, cascade, sdpa_default, sdpa_eff = methods(b, h, d, n_s, n_p, gen)
            us = timer.interleaved([sdpa, naive, cascade, sdpa_default, sdpa_eff], a.reps)
            print(f"| {n_p} | {n_s} | {us[0]:.1f} | {us[3]:.1f} | {us[4]:.1f} | {us[1]:.1f} | {us[2]:.1f} "
                  f"| {bound(b, n_s, n_p):.1f} |", flush=True)
            js["table3"].append({"n_p": n_p, "n_s": n_s, "sdpa_us": us[0], "sdpa_default_us": us[3],
                                 "sdpa_efficient_us": us[4], "naive_us": us[1], "cascade_us": us[2],
                                 "bound_us": bound(b, n_s, n_p)})
            del sdpa, naive, cascade, sdpa_default, sdpa_eff
            torch.cuda.empty_cache()

    n_s, n_c = (128, 64) if a.quick else (2048, 64)

    def rates(title, key, cells):  # token rates of SDPA and the cascade, (value, batch, private tokens) per row
        print(f"\n### PyTorch on {title}: K tokens/s\n")
        print(f"| {key} | SDPA per sequence | stock-op cascade |\n|---|---|---|")
        js[title.split("'")[0].strip().lower().replace(" ", "")] = rows = []
        for value, bb, nc in cells:
            sdpa, _, cascade, _, _ = methods(bb, h, d, n_s, n_s + nc, gen)
            us = timer.interleaved([sdpa, cascade], a.reps)
            print(f"| {value} | {bb / us[0] * 1e3:.0f} | {bb / us[1] * 1e3:.0f} |", flush=True)
            rows.append({key: value, "sdpa_us": us[0], "cascade_us": us[1]})
            del sdpa, cascade
            torch.cuda.empty_cache()

    rates(f"Figure 4's shapes (n_s={n_s}, n_c={n_c})", "batch",
          [(bb, bb, n_c) for bb in ([1, 8] if a.quick else [1, 4, 8, 16, 32, 48, 64, 96])])
    rates(f"Figure 3's shapes (b={b}, n_s={n_s})", "n_c",
          [(nc, b, nc) for nc in ([64] if a.quick else [64, 512, 1024, 2048])])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(js, f, indent=1)


if __name__ == "__main__":
    main()
