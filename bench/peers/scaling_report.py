#!/usr/bin/env python3
"""Tables and plot of bench/peers/scaling.sh's OUT/scaling.jsonl.

    python3 bench/peers/scaling_report.py OUT     -> tables on stdout, OUT/scaling.png

Figures are medians over rounds; ratios are medians of the per-round ratios
(the two engines ran back to back in each round). tg's fraction of the read
roofline is tg tokens/s x the weight bytes a token reads (the profile's
weight_mb) / the roofline measured at that thread count in the same round.
The plot needs matplotlib (python3 -m pip install matplotlib); without it
the tables are printed alone.
"""
import json
import os
import statistics as st
import sys
from collections import defaultdict


def load(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    host = next((r["result"] for r in rows if r["engine"] == "host"), {})
    by = defaultdict(dict)  # (engine, test, threads) -> {round: result}
    for r in rows:
        if r["engine"] != "host" and r["result"] is not None:
            by[(r["engine"], r["test"], r["threads"])][r["round"]] = r["result"]
    return host, by


def med(xs):
    xs = [x for x in xs if x is not None]
    return st.median(xs) if xs else None


def fmt(x, f="{:.1f}"):
    return "-" if x is None else f.format(x)


def llama_model(res):
    """llama-bench's JSON list -> {"pp": tok/s, "tg": tok/s}."""
    return {("pp" if x["n_prompt"] else "tg"): x["avg_ts"] for x in res} if isinstance(res, list) else {}


def main():
    out = sys.argv[1]
    host, by = load(os.path.join(out, "scaling.jsonl"))
    threads = sorted({k[2] for k in by})
    rounds = sorted({r for v in by.values() for r in v})
    print(f"Host: {host.get('cpu', '?')}, {host.get('cores', '?')} cores; model {os.path.basename(host.get('model', '?'))}; "
          f"{len(rounds)} round(s)\n")

    def series(engine, test, get):
        """threads -> {round: value}"""
        s = {}
        for t in threads:
            per = by.get((engine, test, t), {})
            s[t] = {r: get(v) for r, v in per.items()}
        return s

    roof = series("chunkserve", "roofline", lambda v: v["read_gbs"])
    ours = {k: series("chunkserve", "model", lambda v, k=k: v[f"{k}_tps"]) for k in ("pp", "tg")}
    theirs = {k: series("llama.cpp", "model", lambda v, k=k: llama_model(v).get(k)) for k in ("pp", "tg")}
    tg_mb = series("chunkserve", "model", lambda v: v.get("profile", {}).get("tg", {}).get("weight_mb"))

    def ratio(a, b, t):
        rs = [a[t][r] / b[t][r] for r in a.get(t, {}) if b.get(t, {}).get(r) and a[t][r] is not None]
        return med(rs)

    base = threads[0] if 2 not in threads else 2
    print("| threads | read roofline GB/s | chunkserve pp | llama.cpp pp | pp ratio | chunkserve tg | llama.cpp tg | tg ratio "
          f"| tg GB/s (share of roofline) | pp vs ours at {base} | tg vs ours at {base} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in threads:
        o_pp, o_tg = med(ours["pp"][t].values()), med(ours["tg"][t].values())
        gb = [ours["tg"][t][r] * tg_mb[t][r] / 1e3 for r in ours["tg"][t] if tg_mb[t].get(r)]
        share = [g / roof[t][r] for g, r in zip(gb, ours["tg"][t]) if roof[t].get(r)]
        b_pp, b_tg = med(ours["pp"].get(base, {}).values()), med(ours["tg"].get(base, {}).values())
        print(f"| {t} | {fmt(med(roof[t].values()))} | {fmt(o_pp)} | {fmt(med(theirs['pp'][t].values()))} | "
              f"{fmt(ratio(ours['pp'], theirs['pp'], t), '{:.2f}x')} | {fmt(o_tg)} | {fmt(med(theirs['tg'][t].values()))} | "
              f"{fmt(ratio(ours['tg'], theirs['tg'], t), '{:.2f}x')} | {fmt(med(gb))} ({fmt(med(share) and 100 * med(share), '{:.0f}%')}) | "
              f"{fmt(o_pp / b_pp if o_pp and b_pp else None, '{:.2f}x')} | {fmt(o_tg / b_tg if o_tg and b_tg else None, '{:.2f}x')} |")

    # The shared-prompt batch: llama.cpp's better of flash attention on/off per round (by total tokens/s).
    def best_llama(t, r):
        cands = [by.get(("llama.cpp", f"batched_fa_{fa}", t), {}).get(r) for fa in ("on", "off")]
        cands = [c for c in cands if c]
        return max(cands, key=lambda c: c["speed"]) if cands else None

    bt = [t for t in threads if by.get(("chunkserve", "batched", t))]
    if bt:
        print(f"\nShared-prompt batch (PP, TG, B as run; llama-batched-bench -pps -kvu, better of -fa on/off), tokens/s:\n")
        print("| threads | chunkserve prefill | llama.cpp prefill | chunkserve decode | llama.cpp decode | decode ratio "
              f"| chunkserve total | llama.cpp total | total ratio | decode vs ours at {base} |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        b_dec = med(v["decode_tps"] for v in by.get(("chunkserve", "batched", base), {}).values())
        for t in bt:
            o = by[("chunkserve", "batched", t)]
            l = {r: best_llama(t, r) for r in o}
            dr = med(o[r]["decode_tps"] / l[r]["speed_tg"] for r in o if l[r])
            tr = med(o[r]["total_tps"] / l[r]["speed"] for r in o if l[r])
            dec = med(v["decode_tps"] for v in o.values())
            print(f"| {t} | {fmt(med(v['prefill_tps'] for v in o.values()))} | {fmt(med(v['speed_pp'] for v in l.values() if v))} | "
                  f"{fmt(dec)} | {fmt(med(v['speed_tg'] for v in l.values() if v))} | {fmt(dr, '{:.2f}x')} | "
                  f"{fmt(med(v['total_tps'] for v in o.values()))} | {fmt(med(v['speed'] for v in l.values() if v))} | "
                  f"{fmt(tr, '{:.2f}x')} | {fmt(dec / b_dec if dec and b_dec else None, '{:.2f}x')} |")

    # Profiles: each operation's time per step at each thread count, and its
    # speed-up over the fewest threads (an operation far below the thread
    # ratio is where threads wait).
    def profile_table(title, get):
        cols = [t for t in threads if get(t)]
        if not cols:
            return
        p0 = get(cols[0])
        ops = list(p0["ms_per_step"].keys()) + [k for k in ("schedule_ms", "sample_ms", "other_ms") if k in p0]
        print(f"\n{title}: ms per step (speed-up over {cols[0]} thread(s))\n")
        print("| operation | " + " | ".join(f"{t} threads" for t in cols) + " |")
        print("|---|" + "---|" * len(cols))

        def val(p, op):
            return p["ms_per_step"][op] if op in p["ms_per_step"] else p.get(op)

        for op in ops + ["total"]:
            cells = []
            for t in cols:
                p = get(t)
                v = p.get("step_ms", p["total_ms"]) if op == "total" else val(p, op)
                v0 = p0.get("step_ms", p0["total_ms"]) if op == "total" else val(p0, op)
                cells.append(f"{v:.3f} ({v0 / v:.1f}x)" if v else "-")
            print(f"| {op.replace('_ms', '')} | " + " | ".join(cells) + " |")

    first = rounds[0] if rounds else 1
    profile_table("pp profile (one prefill of the prompt)",
                  lambda t: by.get(("chunkserve", "model", t), {}).get(first, {}).get("profile", {}).get("pp"))
    profile_table("tg profile (one decoded token)",
                  lambda t: by.get(("chunkserve", "model", t), {}).get(first, {}).get("profile", {}).get("tg"))
    profile_table("Batch decode steps (engine)",
                  lambda t: by.get(("chunkserve", "batched", t), {}).get(first, {}).get("profile", {}).get("decode"))
    profile_table("Batch prefill steps (engine)",
                  lambda t: by.get(("chunkserve", "batched", t), {}).get(first, {}).get("profile", {}).get("prefill"))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(no plot: matplotlib is not installed)")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, key, label in ((axes[0], "pp", f"prefill (pp)"), (axes[1], "tg", "decode (tg)")):
        for name, s in (("chunkserve", ours[key]), ("llama.cpp", theirs[key])):
            xs = [t for t in threads if med(s[t].values())]
            ax.plot(xs, [med(s[t].values()) for t in xs], marker="o", label=name)
        if key == "tg":
            xs = [t for t in threads if med(roof[t].values()) and med(tg_mb[t].values())]
            ax.plot(xs, [med(roof[t].values()) * 1e3 / med(tg_mb[t].values()) for t in xs], ls="--", color="gray",
                    label="read roofline")
        ax.set_title(label)
    if bt:
        ax = axes[2]
        ax.plot(bt, [med(v["decode_tps"] for v in by[("chunkserve", "batched", t)].values()) for t in bt], marker="o",
                label="chunkserve")
        lt = [t for t in bt if any(best_llama(t, r) for r in rounds)]
        ax.plot(lt, [med(best_llama(t, r)["speed_tg"] for r in rounds if best_llama(t, r)) for t in lt], marker="o",
                label="llama.cpp")
        ax.set_title("shared-prompt batch, decode")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(threads, [str(t) for t in threads])
        ax.set_xlabel("threads")
        ax.set_ylabel("tokens/s")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{host.get('cpu', '?')}: {os.path.basename(host.get('model', '?'))}")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling.png"), dpi=110)
    print(f"\nplot: {os.path.join(out, 'scaling.png')}")


if __name__ == "__main__":
    main()
