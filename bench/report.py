"""Our results next to the peers': writes bench/results/SUMMARY.md and prints it.

    python -m bench.report [--results bench/results] [--peers bench/results/peers] [--quick]

Reads roofline.json, train_step.json, decode_<runtime>.json and duel.json from --results
and the peer harness's JSONs (../shared/peers/common.py write_result) from --peers. Whatever
is missing shows as n/a. Peer rates are their 'best' (median of quiet runs when there were >= 3).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import (
    CONFIGS,
    NEW_TOKENS,
    PEER_RESULTS,
    TRAIN_BATCH,
    TRAIN_LENGTH,
    add_results_option,
    read_json,
    results_dir,
)
from bench.decode import DECODE_VARIANTS
from bench.duel import table_of as duel_table
from bench.flops import train_step_flops
from keras_transformer.command_line import add_debug_flag, entry_point, int_in

NA = "n/a"
LONG_TOKENS = 128
PEER_INFER = ("ctranslate2_infer", "ctranslate2_mkl_infer", "keras_hub_infer", "hf_marian_infer")
PEER_TRAIN = ("keras_hub_train", "hf_marian_train")


def table(headers: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines if rows else lines + ["| " + " | ".join([NA] * len(headers)) + " |"]


def rate(x: float | None) -> str:
    if x is None:
        return NA
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else NA


def ok_rows(data: dict | None) -> list[dict]:
    return [r for r in (data or {}).get("results", []) if "error" not in r]


def load(results: Path, peers: Path) -> dict:
    """Every JSON the report reads; a missing or unreadable file is an empty entry."""
    ours = {"roofline": read_json(results / "roofline.json"),
            "train": read_json(results / "train_step.json"),
            "duel": read_json(results / "duel.json")}
    for runtime in DECODE_VARIANTS:
        ours[runtime] = read_json(results / f"decode_{runtime}.json")
    peer = {}
    for path in sorted(Path(peers).glob("*.json")) if Path(peers).is_dir() else []:
        data = read_json(path)
        if isinstance(data, dict):
            peer[path.stem] = data
    return {"ours": ours, "peers": peer}


def roofline(data: dict) -> tuple[float | None, str]:
    """The best multi-thread matmul GFLOP/s of ours and the peers' (the '% peak' divisor)."""
    best, source = None, NA
    for r in ok_rows(data["ours"]["roofline"]):
        if best is None or r["gflops"] > best:
            best, source = r["gflops"], f"{r['op']} (ours)"
    for name, d in data["peers"].items():
        if d.get("kind") != "roofline":
            continue
        for r in ok_rows(d):
            g = (r.get("gflops") or {}).get("best")
            if g and str(r.get("threads")) != "1" and (best is None or g > best):
                best, source = g, f"{r['op']} ({name})"
    return best, source


def machine_lines(data: dict) -> list[str]:
    facts = next((d["machine"] for d in data["ours"].values() if d and "machine" in d), None)
    lines = []
    if facts:
        lines.append(f"Machine: {facts.get('cpu_model')}, {facts.get('cores')} cores "
                     f"({facts.get('usable_cores')} usable), {facts.get('mem_total_gib')} GiB, "
                     f"Python {facts.get('python')}.")
    else:
        from bench.common import machine

        facts = machine()
        lines.append(f"Machine (read now, no JSON of ours found): {facts['cpu_model']}, "
                     f"{facts['cores']} cores.")
    for name, d in data["peers"].items():
        hw = (d.get("hardware") or {}).get("lscpu") or {}
        if hw:
            lines.append(f"Peers' machine ({name}): {hw.get('Model name')}, "
                         f"{hw.get('CPU(s)')} CPUs.")
            break
    loads = [f"{name} {d.get('loadavg_start')}->{d.get('loadavg_end')}"
             for name, d in data["ours"].items() if d]
    if loads:
        lines.append("Load average (1/5/15 min) at start->end of our runs: " + "; ".join(loads)
                     + ". Other jobs on the machine inflate every time.")
    versions = next((d["versions"] for d in data["ours"].values() if d and "versions" in d), {})
    if versions:
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v) + ".")
    return lines


def ours_decode(data: dict) -> dict:
    """(runtime, config, batch, beam, new_tokens, cache) -> row."""
    out = {}
    for runtime in DECODE_VARIANTS:
        for r in ok_rows(data["ours"][runtime]):
            out[(runtime, r["config"], r["batch"], r["beam"], r["new_tokens"], r["cache"])] = r
    return out


def peer_decode(data: dict) -> dict:
    """(config, batch, beam) -> [(name, tok/s, float32?)] over every peer variant (32 tokens)."""
    out: dict = {}
    for stem in PEER_INFER:
        d = data["peers"].get(stem)
        for r in ok_rows(d):
            if "compute_type" in r:
                variant, fp32 = r["compute_type"], r["compute_type"] == "float32"
            elif "jit_compile" in r:
                variant, fp32 = f"XLA {'on' if r['jit_compile'] else 'off'}", True
            else:
                variant, fp32 = "", True
            name = f"{d.get('peer', stem)} {variant}".strip()
            if stem == "ctranslate2_mkl_infer":
                name += " (MKL)"
            out.setdefault((r["config"], r["batch"], r["beam"]), []).append(
                (name, r["tokens_per_s"]["best"], fp32))
    return out


def decoding_section(data: dict, short: int) -> list[str]:
    ours, peers = ours_decode(data), peer_decode(data)
    keys = sorted({k[1:4] for k in ours if k[4] == short and k[5]} | set(peers),
                  key=lambda k: (list(CONFIGS).index(k[0]) if k[0] in CONFIGS else 99, *k[1:]))
    rows = []
    for config, batch, beam in keys:
        cells = {rt: ours.get((rt, config, batch, beam, short, True)) for rt in DECODE_VARIANTS}
        rates = {rt: c["tokens_per_s"] for rt, c in cells.items() if c}
        best_ours = max(rates, key=rates.get) if rates else None
        # The peers measured exactly 32 new tokens; other lengths have no peer to compare.
        candidates = peers.get((config, batch, beam), []) if short == NEW_TOKENS else []
        best_peer = max(candidates, key=lambda p: p[1]) if candidates else None
        fp32 = [p for p in candidates if p[2]]
        best_fp32 = max(fp32, key=lambda p: p[1]) if fp32 else None
        ours_rate = rates.get(best_ours) if best_ours else None
        rows.append([config, batch, beam, *(rate(rates.get(rt)) for rt in DECODE_VARIANTS),
                     f"{best_ours} {rate(ours_rate)}" if best_ours else NA,
                     f"{best_peer[0]} {rate(best_peer[1])}" if best_peer else NA,
                     ratio(ours_rate, best_peer[1] if best_peer else None),
                     f"{best_fp32[0]} {rate(best_fp32[1])}" if best_fp32 else NA,
                     ratio(ours_rate, best_fp32[1] if best_fp32 else None)])
    return [f"## Decoding: tokens/s at {short} new tokens (source 32, cached step)", "",
            "tokens/s = batch x new tokens / latency of one full call (encoder + steps + "
            "search). 'best peer' may be CTranslate2 int8; 'best fp32 peer' excludes it.", "",
            *table(["config", "batch", "beam", *DECODE_VARIANTS, "best ours", "best peer",
                    "ours/peer", "best fp32 peer", "ours/fp32 peer"], rows), ""]


def cache_section(data: dict, short: int, long: int) -> list[str]:
    ours = ours_decode(data)
    growth = []
    for rt, config, batch, beam, n, cache in sorted(ours, key=str):
        if n != short or not cache:
            continue
        a, b = ours[(rt, config, batch, beam, short, True)], ours.get(
            (rt, config, batch, beam, long, True))
        growth.append([rt, config, batch, beam, f"{a['per_token_ms']:.2f}",
                       f"{b['per_token_ms']:.2f}" if b else NA,
                       ratio(b["per_token_ms"] if b else None, a["per_token_ms"])])
    nocache = []
    for rt, config, batch, beam, n, cache in sorted(ours, key=str):
        if cache:
            continue
        without, with_ = ours[(rt, config, batch, beam, n, False)], ours.get(
            (rt, config, batch, beam, n, True))
        nocache.append([rt, config, batch, beam, n,
                        f"{with_['ms_per_batch']['median']:.0f}" if with_ else NA,
                        f"{without['ms_per_batch']['median']:.0f}",
                        ratio(without["ms_per_batch"]["median"],
                              with_["ms_per_batch"]["median"] if with_ else None)])
    return [f"## Key/value cache: per-token ms at {long} vs {short} new tokens", "",
            "With a cache the per-token cost should stay nearly flat as the output grows; a "
            f"ratio well above 1 means each step costs more at {long} tokens.", "",
            *table(["runtime", "config", "batch", "beam", f"ms/token @{short}",
                    f"ms/token @{long}", "ratio"], growth), "",
            "### No cache vs cache (ms per batch; ratio > 1 = the cache helps)", "",
            *table(["runtime", "config", "batch", "beam", "new tokens", "cache ms",
                    "no-cache ms", "no-cache/cache"], nocache), ""]


def training_section(data: dict, peak: float | None, any_shape: bool = False) -> list[str]:
    """Ours (XLA off/on x fp32/bf16) against keras-hub; any_shape for --quick's small batch."""
    ours = [r for r in ok_rows(data["ours"]["train"])
            if any_shape or (r["batch"], r["length"]) == (TRAIN_BATCH, TRAIN_LENGTH)]
    peers: dict = {}
    for stem in PEER_TRAIN:
        for r in ok_rows(data["peers"].get(stem)):
            peers[(stem, r["config"], r.get("jit_compile"))] = r["target_tokens_per_s"]["best"]
    configs = sorted({r["config"] for r in ours} | {k[1] for k in peers},
                     key=lambda c: list(CONFIGS).index(c) if c in CONFIGS else 99)

    def pct(config: str, tok_s: float | None, batch=TRAIN_BATCH, length=TRAIN_LENGTH) -> str:
        if not (peak and tok_s and config in CONFIGS):
            return NA
        flops = train_step_flops(CONFIGS[config], batch, length, length)
        return f"{100 * flops * tok_s / (batch * length) / 1e9 / peak:.1f}%"

    def ms(tok_s: float | None) -> str:
        return f"{TRAIN_BATCH * TRAIN_LENGTH / tok_s * 1e3:.0f}" if tok_s else NA

    rows = []
    for config in configs:
        for jit in (False, True):
            xla = f"XLA {'on' if jit else 'off'}"
            hub = peers.get(("keras_hub_train", config, jit))
            for precision in ("float32", "mixed_bfloat16"):
                r = next((r for r in ours if r["config"] == config and r["jit_compile"] == jit
                          and r.get("precision", "float32") == precision), None)
                if r is None:
                    rows.append([config, f"ours {xla} {precision}", NA, NA, NA, NA, NA])
                    continue
                tok = r["target_tokens_per_s"]
                rows.append([config, f"ours {xla} {precision} ({r['batch']}x{r['length']})",
                             rate(tok), f"{r['median_s'] * 1e3:.0f}",
                             pct(config, tok, r["batch"], r["length"]),
                             rate(r.get("peak_rss_mb")), ratio(tok, hub)])
            rows.append([config, f"keras-hub {xla}", rate(hub), ms(hub), pct(config, hub), NA,
                         "(reference)" if hub else NA])
        marian = peers.get(("hf_marian_train", config, None))
        rows.append([config, "HF Marian (torch)", rate(marian), ms(marian), pct(config, marian),
                     NA, NA])
    return ["## Training step (32 x 32 src x 32 tgt, fwd+bwd+Adam, label smoothing 0.1)", "",
            "ours/keras-hub compares with keras-hub at the same XLA setting. % roofline = model "
            "matmul GFLOP/s (analytic, bench/flops.py) / the roofline peak above.", "",
            *table(["config", "system", "target tok/s", "ms/step", "% roofline",
                    "peak RSS MiB", "ours/keras-hub"], rows), ""]


def rss_section(data: dict) -> list[str]:
    rows = []
    for runtime in DECODE_VARIANTS:
        per_config: dict = {}
        for r in ok_rows(data["ours"][runtime]):
            if r.get("process_peak_rss_mb"):
                per_config[r["config"]] = max(per_config.get(r["config"], 0),
                                              r["process_peak_rss_mb"])
        rows.append([runtime, *(f"{per_config[c]:,.0f}" if c in per_config else NA
                                for c in CONFIGS)])
    return ["## Peak RSS of the decoding process (MiB)", "",
            "ru_maxrss of the process that ran the runtime's cells (bench.decode runs one "
            "process per runtime and config, so a column is that config's), taken before the "
            "no-cache cells load their prefix decoder.", "",
            *table(["runtime", *CONFIGS], rows), ""]


def duel_section(data: dict) -> list[str]:
    rows = ok_rows(data["ours"]["duel"])
    if not rows:
        return []
    return ["## Against CTranslate2, call by call (bench.duel)", "",
            "The two sides alternate every few calls, the order swapped each round, so the "
            "host's drift cancels. ct2/ours > 1: ours is faster.", "",
            *table(*duel_table(rows)), ""]


def failures_section(data: dict) -> list[str]:
    """Cells of ours that recorded an error, so a missing number has its reason next to it."""
    lines = []
    for name, d in data["ours"].items():
        for r in (d or {}).get("results", []):
            if "error" in r:
                where = " ".join(f"{k}={r[k]}" for k in ("config", "batch", "beam", "new_tokens",
                                                          "cache", "jit_compile", "precision")
                                 if k in r)
                error = " ".join(str(r["error"]).split())[:400]
                lines.append(f"- {name} {where}: {error}")
    return ["## Failed cells", "", *lines, ""] if lines else []


def safe(section, *args) -> list[str]:
    """A section's lines; a JSON of an unexpected shape gives a note, not a crash."""
    try:
        return section(*args)
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as err:
        return [f"## {section.__name__}: {NA} (unexpected data: {type(err).__name__} {err})", ""]


def build(results: Path, peers: Path, short: int = NEW_TOKENS, long: int = LONG_TOKENS,
          any_train_shape: bool = False) -> str:
    data = load(Path(results), Path(peers))
    try:
        peak, source = roofline(data)
    except (KeyError, TypeError, ValueError) as err:
        peak, source = None, f"unexpected roofline data: {err}"
    lines = ["# Benchmark summary", "", *safe(machine_lines, data),
             f"Roofline peak: {f'{peak:.1f} GFLOP/s, {source}' if peak else NA}.", "",
             *safe(decoding_section, data, short), *safe(cache_section, data, short, long),
             *safe(duel_section, data),
             *safe(training_section, data, peak, any_train_shape), *safe(rss_section, data),
             *safe(failures_section, data)]
    return "\n".join(lines) + "\n"


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_results_option(parser, help="our results directory")
    parser.add_argument("--peers", default=str(PEER_RESULTS), help="the peers' results")
    parser.add_argument("--quick", action="store_true",
                        help="read bench/results/quick, where decoding made 4 new tokens")
    parser.add_argument("--short", type=int_in(1), default=None, help="32 (4 with --quick)")
    parser.add_argument("--long", type=int_in(1), default=LONG_TOKENS)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    results = results_dir(args)
    text = build(results, Path(args.peers), args.short or (4 if args.quick else NEW_TOKENS),
                 args.long, any_train_shape=args.quick)
    (results / "SUMMARY.md").parent.mkdir(parents=True, exist_ok=True)
    (results / "SUMMARY.md").write_text(text)
    print(text)
    print(f"wrote {results / 'SUMMARY.md'}")


if __name__ == "__main__":
    sys.exit(main())
