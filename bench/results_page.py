"""docs/results.md from the committed result files: every figure that README.md and docs/
quote, each with the file it comes from, the CPU it ran on and its date.

    python -m bench.results_page [--check]

Reads the bench scripts' JSON under bench/results/ (recipe.json holds the spa_eng_small runs'
metrics.json) and bench/results/hand_kept.json: the figures of trained runs whose
metrics.json is not in the repository, each with its run, CPU and date, marked as kept by
hand. --check writes nothing and exits 1 when docs/results.md is not what this would write.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.common import ROOT
from keras_transformer.command_line import add_debug_flag, entry_point

RESULTS = Path("bench/results")
PAGE = Path("docs/results.md")
HAND_KEPT = RESULTS / "hand_kept.json"
DUEL_RUNS = [RESULTS / "zen5" / "duel" / f"run{i}" / "duel.json" for i in range(1, 10)]
CELLS = [(c, b, k) for c in ("small", "base") for b in (1, 16) for k in (1, 4)]
HAND_KEPT_FIELDS = ("run", "what", "result", "cpu", "date", "reproduce")


def read(root: Path, path: Path) -> dict:
    return json.loads((root / path).read_text(encoding="utf-8"))


def when(data: dict) -> str:
    start = data["started_utc"].replace("T", " ")[:16]
    end = data.get("finished_utc")
    if end and end[:10] == data["started_utc"][:10]:
        return f"{start}–{end[11:16]} UTC"
    return f"{start} UTC" + (f" – {end.replace('T', ' ')[:16]} UTC" if end else "")


def source(root: Path, path: Path) -> str:
    """`file`: CPU, cores, date: the line under every generated table."""
    data = read(root, path)
    machine = data["machine"]
    return f"`{path}`: {machine['cpu_model']}, {machine['cores']} cores, {when(data)}"


def table(headers: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), ""]


def cell_name(config: str, batch: int, beam: int) -> str:
    return f"{config} b{batch} {'greedy' if beam == 1 else f'beam {beam}'}"


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if len(values) == 1:
        return fmt.format(values[0])
    return (f"{fmt.format(statistics.median(values))} "
            f"[{fmt.format(min(values))}–{fmt.format(max(values))}]")


def hand_kept(root: Path) -> list[str]:
    rows = []
    for entry in read(root, HAND_KEPT)["runs"]:
        missing = [k for k in HAND_KEPT_FIELDS if not entry.get(k)]
        if missing:
            raise ValueError(f"{HAND_KEPT}: run {entry.get('run')!r} lacks {', '.join(missing)}")
        rows.append([f"`{entry['run']}`", entry["what"], entry["result"], entry["cpu"],
                     entry["date"], f"`{entry['reproduce']}`"])
    return ["## Trained runs", "",
            "Kept by hand: these runs' `metrics.json` is not in the repository "
            f"(`{HAND_KEPT}`); the date is the day the figure was first reported.", "",
            *table(["run", "what", "result", "CPU", "date", "reproduce"], rows)]


def recipe(root: Path) -> list[str]:
    path = RESULTS / "recipe.json"
    data = read(root, path)
    rows = [[r["name"], f"{r['steps']:,}", f"{r['target_tokens_per_second']:,.0f}",
             r["final"]["dev_bleu"], r["final"]["test_bleu"], r["final"]["test_chrf"]]
            for r in data["runs"]]
    trials_path = RESULTS / "recipe_trials.json"
    trials = read(root, trials_path)
    trial_rows = [[t["name"], f"{t['train_minutes']:.0f}", f"{t['steps']:,}",
                   t["final"]["best_dev_bleu_greedy"], t["final"]["dev_bleu"]]
                  for t in trials["runs"]]
    return ["## spa_eng_small: old recipe against new, 40 training minutes each", "",
            "Copies of the two runs' `metrics.json`; they differ in "
            + ", ".join(f"`{k}`" for k in data["differing_config"])
            + ". Beam 4, the first 1,000 sentences of each split.", "",
            *table(["recipe", "steps", "target tokens/s", "dev BLEU", "test BLEU",
                    "test chrF"], rows), source(root, path), "",
            "The short trials the new recipe was chosen from (dev only):", "",
            *table(["trial", "minutes", "steps", "best greedy dev BLEU (300)",
                    "dev BLEU, beam 4"], trial_rows), source(root, trials_path), ""]


def duel(root: Path) -> list[str]:
    runs = [(path, read(root, path)) for path in DUEL_RUNS]
    rows = []
    for cell in CELLS:
        by_pair: dict[str, list[dict]] = {"float32": [], "int8": []}
        for _, data in runs:
            for r in data["results"]:
                if (r["config"], r["batch"], r["beam"]) == cell and "error" not in r:
                    by_pair[r["ct2"]].append(r)
        f32, i8 = by_pair["float32"], by_pair["int8"]
        rows.append([cell_name(*cell), spread([r["ratio"] for r in f32]),
                     f"{min(r['rounds_won'] for r in f32)}–{max(r['rounds_won'] for r in f32)}"
                     f" of {f32[0]['rounds']}",
                     spread([r["ours_ms"]["median"] for r in f32], "{:.1f}"),
                     spread([r["ct2_ms"]["median"] for r in f32], "{:.1f}"),
                     spread([r["ratio"] for r in i8], "{:.1f}"),
                     f"{min(r['rounds_won'] for r in i8)}–{max(r['rounds_won'] for r in i8)}"])
    return ["## Decoding against CTranslate2, call by call (`python -m bench.duel`)", "",
            f"{len(runs)} sittings. ratio = CTranslate2's median call / ours (> 1: ours is "
            "faster), median [min–max] over the sittings; `search.onnx` against CTranslate2 "
            "float32, `search.int8.onnx` against CTranslate2 int8. Random-weight models, 32 "
            "source ids, exactly 32 new tokens.", "",
            *table(["cell", "float32 ratio", "rounds won", "ours ms", "CTranslate2 ms",
                    "int8 ratio", "int8 rounds won"], rows),
            *(f"- sitting {i}: {source(root, path)}" for i, (path, _) in enumerate(runs, 1)),
            ""]


def quiet_sitting(root: Path) -> list[str]:
    path = RESULTS / "zen5" / "precision_search" / "precision.json"
    data = read(root, path)
    best: dict = {}
    for r in data["results"]:
        if r.get("median_s") and "config" in r and r["runtime"] in ("onnx-search", "ctranslate2"):
            key = (r["runtime"], r["precision"], r["config"], r["batch"], r["beam"])
            best[key] = min(best.get(key, float("inf")), r["median_s"] * 1e3)
    rows = []
    for cell in CELLS:
        ms = {(rt, p): best.get((rt, p, *cell)) for rt in ("onnx-search", "ctranslate2")
              for p in ("float32", "int8")}
        rows.append([cell_name(*cell), *(f"{ms[k]:.1f}" for k in (
            ("onnx-search", "float32"), ("ctranslate2", "float32"), ("onnx-search", "int8"),
            ("ctranslate2", "int8")))])
    train_path = RESULTS / "zen5" / "train_step.json"
    train = read(root, train_path)
    ours = {(r["config"], r["jit_compile"], r["precision"]): r["median_s"]
            for r in train["results"] if "error" not in r}
    hub = {(r["config"], r["jit_compile"], r["precision"]): r["median_s"]
           for r in train["keras_hub"] if r.get("median_s")}
    train_rows = [[c, "on" if jit else "off",
                   *(f"{side[(c, jit, p)] * 1e3:,.0f}" if (c, jit, p) in side else "n/a"
                     for side in (ours, hub) for p in ("float32", "mixed_bfloat16"))]
                  for c in ("small", "base") for jit in (False, True)]
    best_rows = [[c, f"{r['ratio']:.2f}x", r["ours"], r["keras_hub"]]
                 for c, r in train["ratios"].items()]
    return ["## One quiet sitting: decoding, one variant after another (`python -m "
            "bench.precision`)", "",
            "Milliseconds per call; CTranslate2 the faster of `CT2_USE_MKL=0` and `1`.", "",
            *table(["cell", "search.onnx", "CTranslate2 float32", "search.int8.onnx",
                    "CTranslate2 int8"], rows), source(root, path), "",
            "## Training step against keras-hub (`python -m bench.train_step --keras-hub`)", "",
            "Milliseconds per step of 32 × 32 × 32 tokens (forward, backward, Adam).", "",
            *table(["config", "XLA", "ours float32", "ours mixed_bfloat16",
                    "keras-hub float32", "keras-hub mixed_bfloat16"], train_rows),
            "Each side's best setting against the other's:", "",
            *table(["config", "ours / keras-hub", "ours", "keras-hub"], best_rows),
            source(root, train_path), ""]


def train_real(root: Path) -> list[str]:
    rows = []
    for path in (RESULTS / "train_real.json", RESULTS / "repeats" / "train_real2" /
                 "train_real.json"):
        data = read(root, path)
        ratios = data["ratios"]
        rows.append([f"`{path}`", f"{ratios['best']['target_tokens']:.2f}x",
                     f"{ratios['best']['sentences']:.2f}x",
                     f"{ratios['jit_off']['target_tokens']:.2f}x",
                     f"{ratios['jit_on']['target_tokens']:.2f}x", when(data)])
    cpu = read(root, RESULTS / "train_real.json")["machine"]["cpu_model"]
    curve_rows = []
    for label, path, side in (
            ("ours, `small` size", RESULTS / "train_real_40" / "train_real.json", "ours"),
            ("keras-hub's recipe at our `small` size", RESULTS / "train_real_40" /
             "train_real.json", "keras-hub"),
            ("ours, again", RESULTS / "train_real_40_ours" / "train_real.json", "ours"),
            ("keras-hub's example at its own size", RESULTS / "train_real_40_example" /
             "train_real.json", "keras-hub")):
        data = read(root, path)
        curve = next(c for c in data["curves"] if c["side"] == side)["checkpoints"]
        last = curve[-1]
        curve_rows.append([label, f"{last['minutes']:.0f}", f"{last['steps']:,}", last["bleu"],
                           last["plain_bleu"], f"`{path}`", data["machine"]["cpu_model"],
                           when(data)])
    return ["## Training on real data (`python -m bench.train_real`)", "",
            "`train/configs/spa_eng_small.yaml` against the Keras example \"English-to-Spanish "
            "translation with KerasHub\" on the same pairs. Throughput: non-padding target "
            f"tokens/s and sentence pairs/s, ours / keras-hub ({cpu}, 2 cores):", "",
            *table(["run", "best against best, tokens", "best against best, sentences",
                    "XLA off", "XLA on", "date"], rows),
            "Dev BLEU (greedy, 300 sentences) after 40 training minutes; \"plain\" without "
            "case and punctuation:", "",
            *table(["side", "minutes", "steps", "BLEU", "plain BLEU", "file", "CPU", "date"],
                   curve_rows)]


def precision(root: Path) -> list[str]:
    paths = [RESULTS / "precision.json", RESULTS / "repeats" / "precision2" / "precision.json"]
    speedups: dict = {}
    for path in paths:
        for r in read(root, path)["results"]:
            # CTranslate2's own compute types are in the duel and the quiet sitting.
            if (r.get("speedup_vs_float32") and r["precision"] != "float32"
                    and r["runtime"] != "ctranslate2"):
                speedups.setdefault((r["runtime"], r["precision"]), []).append(
                    r["speedup_vs_float32"])
    rows = [[runtime, p, f"{min(v):.2f}–{max(v):.2f}x", len(v)]
            for (runtime, p), v in sorted(speedups.items())]
    quality_path = paths[0]
    quality = [[q["runtime"], q["precision"], f"{q['bleu']:.2f}",
                q["sentences_differing_from_float32"]]
               for q in read(root, quality_path)["quality"]]
    return ["## Precision (`python -m bench.precision`)", "",
            "Speed-up over the same runtime's float32, range over the cells of both runs "
            "(decoding: `small` and `base`, batch 1 and 16, greedy and beam 4; `keras-train`: "
            "a `small` training step, XLA off and on; `tf-matmul`: one matmul at 16, 512 "
            "and 2,048 rows):", "",
            *table(["runtime", "precision", "speed-up", "cells"], rows),
            *(f"- {source(root, path)}" for path in paths), "",
            "Greedy BLEU of each variant on the 1,000 demo test sentences "
            f"(`{read(root, quality_path)['quality_export']}`):", "",
            *table(["runtime", "precision", "BLEU", "translations unlike float32"], quality),
            source(root, quality_path), ""]


def memory(root: Path) -> list[str]:
    rows = []
    for config in ("small", "base"):
        mib = {}
        for mode in ("eager", "lazy"):
            path = RESULTS / "zen5" / "memory" / f"decode_onnx-search_{config}_{mode}.json"
            mib[mode] = max(r["process_peak_rss_mb"] for r in read(root, path)["results"])
        rows.append([config, f"{mib['eager']:,.0f}", f"{mib['lazy']:,.0f}"])
    return ["## Memory of a `search.onnx` process (`python -m bench.decode --runtime "
            "onnx-search`)", "",
            "Peak RSS (MiB) of the process, with `encoder.onnx` and `decoder_step.onnx` "
            "loaded beside `search.onnx` (before) and made only when something steps (now):",
            "", *table(["config", "before", "now"], rows),
            source(root, RESULTS / "zen5" / "memory" / "decode_onnx-search_small_lazy.json"),
            ""]


# bench.serve's results: the demo's size, spa_eng_small's, two workers, int8, and the VNDS
# summarizer's size (articles).
SERVE_RESULTS = ("serve.json", "serve_small/serve.json", "serve_workers2/serve.json",
                 "serve_small_workers2/serve.json", "serve_small_int8/serve.json",
                 "serve_summarizer/serve.json")


def serve(root: Path) -> list[str]:
    sections = [serve_one(root, RESULTS / name) for name in SERVE_RESULTS
                if (root / RESULTS / name).is_file()]
    if not sections:
        return []
    return ["## The API server under load (`python -m bench.serve`)", "",
            *(line for section in sections for line in section)]


def serve_one(root: Path, path: Path) -> list[str]:
    data = read(root, path)
    cells = {(r["mode"], r["beam_size"], r["clients"]): r for r in data["results"]}
    rows = []
    for beam, clients in sorted({(b, c) for _, b, c in cells}, key=lambda k: (-k[0], k[1])):
        on, off = cells.get(("batching", beam, clients)), cells.get(("no batching", beam, clients))
        if on is None or off is None:
            continue
        rows.append([beam, clients, f"{on['sentences_per_s']:,.1f}", on.get("mean_batch", ""),
                     f"{on['p50_ms']:,.0f} / {on['p99_ms']:,.0f}",
                     f"{off['sentences_per_s']:,.1f}",
                     f"{off['p50_ms']:,.0f} / {off['p99_ms']:,.0f}",
                     f"{on['sentences_per_s'] / max(off['sentences_per_s'], 1e-9):.2f}x",
                     f"{on.get('server_cpu_ms', '–')} / {off.get('server_cpu_ms', '–')}",
                     f"{on['failed']} / {off['failed']}",
                     f"{max(on['peak_rss_mb'], off['peak_rss_mb']):,.0f}"])
    return [f"`{data['export']}`" + (f" ({data['note']})" if data.get("note") else "")
            + f", one {input_word(data)} per request, {data['seconds']:g} s per cell, "
            f"`--max-batch-size {data['max_batch_size']}` against 1, "
            f"{data.get('workers', 1)} worker(s), the {data.get('variant', 'float32')} "
            f"variant; load average "
            f"{data['loadavg_start'][0]:g} at the start (other processes shared the CPU):",
            "", *table(["beam", "clients", "sentences/s batched", "mean batch",
                        "p50 / p99 ms batched",
                        "sentences/s unbatched", "p50 / p99 ms unbatched", "batched / unbatched",
                        "server CPU ms an input, batched / unbatched",
                        "not 200 batched / unbatched", "peak MiB"], rows),
            *serve_ceiling(data), source(root, path), ""]


def input_word(data: dict) -> str:
    """What one request sent: an article of a TSV file (a summarizer's), else a sentence."""
    return "article" if str(data.get("sentences_file", "")).endswith((".tsv", ".tsv.gz")) \
        else "sentence"


def serve_ceiling(data: dict) -> list[str]:
    """The CTranslate2 ceiling's line, when the run measured it."""
    rows = [r for r in data.get("against_ceiling", []) if r.get("of_ceiling") is not None]
    if not rows:
        return []
    ceiling = {c["beam_size"]: c for c in data["ceiling"]}
    some = data["ceiling"][0]
    return ["", f"CTranslate2's in-process ceiling (`translate_batch`, batches of "
            f"{some['max_batch_size']}, {some['compute_type']}, a random Marian model of the "
            f"export's shape, each sentence to the server's length limit): "
            + "; ".join(f"beam {r['beam_size']} {r['ceiling_sentences_per_s']:,.1f} "
                        f"sentences/s in calls of {call_size(ceiling[r['beam_size']])} "
                        f"(CT2_USE_MKL={ceiling[r['beam_size']]['ct2_use_mkl']}"
                        + ceiling_layout(ceiling[r['beam_size']])
                        + ceiling_gain(ceiling[r['beam_size']]) + "), "
                        f"batching at {r['clients']} clients {r['of_ceiling']:.2f}x of it"
                        for r in rows) + "."]


def call_size(row: dict) -> str:
    """The ceiling's mean sentences a call: its calls group sentences of one length limit, so
    a small sentence file batches little however large --max-batch-size is."""
    if not row.get("calls"):
        return "?"
    return f"{row['sentences'] / row['calls']:.1f} on average"


def ceiling_layout(row: dict) -> str:
    """The kept setting's replicas and threads each, where the run records them (runs
    before replicas were measured had one replica of all the cores)."""
    if row.get("replicas") is None:
        return ""
    replicas, threads = row["replicas"], row.get("intra_threads", "?")
    return (f", {replicas} replica{'s' * (replicas != 1)} of {threads} "
            f"thread{'s' * (threads != 1)}")


def ceiling_gain(row: dict) -> str:
    """What batching gains CTranslate2 itself, where the run timed one sentence a call."""
    if row.get("unbatched_sentences_per_s") is None:
        return ""
    return (f"; one sentence a call {row['unbatched_sentences_per_s']:,.1f}"
            + (" with one replica" if row.get("replicas", 1) != 1 else "")
            + f", so batching gains it {row['batching_gain']:.2f}x")


def demo_shapes(root: Path) -> list[str]:
    path = RESULTS / "train_step_budget.json"
    steps: dict = {}
    for r in read(root, path)["results"]:
        steps.setdefault((r["batch"], r["length"]), {})[r["jit_compile"]] = r
    rows = [[f"{b} × {n}", f"{s[False]['median_s'] * 1e3:,.0f}",
             f"{s[True]['median_s'] * 1e3:,.0f}",
             f"{s[False]['median_s'] / s[True]['median_s']:.2f}x",
             f"{s[True]['first_call_s'] - s[False]['first_call_s']:.1f}"]
            for (b, n), s in sorted(steps.items())]
    return ["## XLA on the demo's bucket shapes (`python -m bench.train_step --configs demo "
            "--token-budget 6144`)", "",
            *table(["batch × length", "ms XLA off", "ms XLA on", "XLA speed-up",
                    "extra first-call seconds"], rows), source(root, path), ""]


def masked_lm_head(root: Path) -> list[str]:
    path = RESULTS / "masked_lm_head.json"
    if not (root / path).is_file():
        return []
    data = read(root, path)
    rows = [[r["config"], r["head"], f"{r['batch']} × {r['length']}", r["predictions_per_row"],
             r["steps"], f"{1000 / r['steps_per_s']:,.0f}", f"{r['steps_per_s']:.2f}",
             f"{r['target_tokens_per_s']:,.0f}", f"{r['model_flops_per_step'] / 1e9:.1f}"]
            for r in data["results"]]
    ratios = "; ".join(f"{name} {r['steps_per_s_ratio']:.2f}x the steps per second "
                       f"({r['flops_ratio']:.2f}x fewer analytic FLOPs)"
                       for name, r in data["ratios"].items())
    return ["## The masked language model's head at the masked positions only "
            "(`python -m bench.masked_lm_head`)", "",
            "One batch masked at 15%, a train step of each head in alternating rounds, XLA "
            f"off; load average {data['loadavg_start'][0]:g} at the start and "
            f"{data['loadavg_end'][0]:g} at the end (other processes shared the CPU):", "",
            *table(["config", "head", "batch × length", "predictions a row", "steps",
                    "ms/step", "steps/s", "masked tokens/s", "GFLOP a step"], rows),
            f"Masked positions against every position: {ratios}.", "",
            source(root, path), ""]


def roofline(root: Path) -> list[str]:
    path = RESULTS / "roofline.json"
    data = read(root, path)
    rows = [[r["op"], r["n"], f"{r['gflops']:.0f}"] for r in data["results"] if "error" not in r]
    return ["## Roofline (`python -m bench.roofline`)", "",
            "float32 matmul GFLOP/s, all cores:", "", *table(["op", "n", "GFLOP/s"], rows),
            source(root, path), ""]


# The studies behind each recipe (runs, per-epoch figures, what was compared on dev), one file
# each under docs/experiments/, hand-written.
STUDIES = [
    ("demo", "demo.md"), ("spa_eng_small", "spa_eng_recipe.md"),
    ("tatoeba_envi", "tatoeba_envi.md"), ("sst2_classifier", "sst2_classifier.md"),
    ("uit_vsfc_sentiment", "uit_vsfc.md"),
    ("vietnews_summarization", "vietnews_summarization.md"),
    ("vietnews_extractive", "vietnews_extractive.md"), ("vi_news_lm", "language_model.md"),
    ("uit_vsfc_pretrained", "pretraining.md"), ("vi_denoising", "denoising.md"),
]


def studies() -> list[str]:
    links = ", ".join(f"`{name}` ([experiments/{page}](experiments/{page}))"
                      for name, page in STUDIES)
    return ["The studies behind each recipe, with their runs and per-epoch figures: "
            f"{links}.", ""]


def build(root: Path | None = None) -> str:
    root = ROOT if root is None else root
    lines = ["# Results", "",
             f"Written by `python -m bench.results_page` from `{RESULTS}/`; do not edit by "
             "hand. How each figure is measured and reproduced: "
             "[performance.md](performance.md) and [training.md](training.md#results).", "",
             *studies(), *hand_kept(root), *recipe(root), *duel(root), *quiet_sitting(root),
             *train_real(root), *precision(root), *memory(root), *serve(root),
             *demo_shapes(root), *masked_lm_head(root),
             *roofline(root)]
    return "\n".join(lines).rstrip("\n") + "\n"


@entry_point
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if {PAGE} is not what this would write")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    text, page = build(), ROOT / PAGE
    if args.check:
        if not page.is_file() or page.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run python -m bench.results_page", file=sys.stderr)
            return 1
        print(f"{PAGE} is current")
        return 0
    page.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
