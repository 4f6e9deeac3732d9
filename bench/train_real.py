"""Training on real data: throughput and dev BLEU against wall-clock time, ours and keras-hub's.

    python -m bench.train_real [--parts throughput curve] [--jit off on] [--steps 100]
                               [--budget-minutes 10] [--eval-every-minutes 2.5] [--quick]

Ours: the `spa_eng_small` recipe (train/configs/spa_eng_small.yaml) as `python -m train`
builds it: the same split of ../shared/data/spa_eng/spa.txt, SentencePiece, the bucketed,
token-budgeted stream, the `small` model, Adam with the warm-up schedule, label smoothing.
keras-hub: the Keras example "English-to-Spanish translation with KerasHub" at the same model
size on the same training pairs (bench/train_real_keras_hub.py, run as a subprocess with the
peer environment's Python, $PEER_VENVS/tf/bin/python); with `--keras-hub-size example`, the
example's own model instead (1 + 1 layers, two 15,000-word vocabularies, untied output layer).

Throughput: non-padding target tokens (labels that are not padding; EOS counted) per second
over `--steps` `model.fit` steps after `--warmup` steps and after the first batch of every
shape (a trace, with XLA a compile), for each XLA setting; also sentence pairs per second and
the padding fractions of the same batches.

Curve: each side trains for `--budget-minutes` of training time (dev scoring not counted) at
its faster XLA setting of the throughput part (else --curve-jit), and translates the same
`--dev-sentences` dev sources greedily every `--eval-every-minutes`. BLEU is sacreBLEU on the
text each side outputs (keras-hub's is lowercased, punctuation split off by spaces) against
the cased references, and again with hypotheses and references lowercased and punctuation
removed ("plain" BLEU), which compares the two.

Writes bench/results/train_real.json and train_real.md (--quick: bench/results/quick/).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

from keras_transformer.decoding import SearchSettings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.common import (  # noqa: E402
    PEER_TF_PYTHON,
    ROOT,
    add_results_option,
    command_line,
    payload,
    print_table,
    results_dir,
    write_json,
)
from keras_transformer.command_line import (  # noqa: E402
    add_debug_flag,
    entry_point,
    float_in,
    int_in,
)

CONFIG = Path("train/configs/spa_eng_small.yaml")
# --quick: a 1-in-40 sample of the pairs, tiny models, a few steps.
QUICK_SETS = ["data.dev_size=60", "data.test_size=0", "tokenizer.vocab_size=400",
              "model.preset=tiny", "data.tokens_per_batch=512"]
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")


def log(*args) -> None:
    print(f"[train_real {time.strftime('%H:%M:%S')}]", *args, flush=True)


def plain(text: str) -> str:
    """Lowercased, every Unicode punctuation character replaced by a space, spaces collapsed:
    the form in which keras-hub's lowercased, re-spaced output and ours compare."""
    text = "".join(" " if unicodedata.category(c).startswith("P") else c for c in text.lower())
    return " ".join(text.split())


def bleu_scores(hypotheses: list[str], references: list[str]) -> dict:
    """sacreBLEU on the output as it is (cased references), and on `plain` text both sides."""
    import sacrebleu

    # force: keras-hub's output is split at punctuation ("está ?"); scored as it comes,
    # without sacreBLEU's warning about tokenized text on every checkpoint.
    cased = sacrebleu.metrics.BLEU(force=True)
    score = cased.corpus_score(hypotheses, [references])
    plain_bleu = sacrebleu.metrics.BLEU(force=True)
    plain_score = plain_bleu.corpus_score([plain(h) for h in hypotheses],
                                          [[plain(r) for r in references]])
    return {"bleu": round(score.score, 2), "plain_bleu": round(plain_score.score, 2),
            "signature": str(cased.get_signature())}


def score_curve(checkpoints: list[dict], references: list[str], samples: int = 3) -> list[dict]:
    """Checkpoints holding "hypotheses" -> the same with BLEU and a few samples instead."""
    scored = []
    for point in checkpoints:
        point = dict(point)
        hypotheses = point.pop("hypotheses")
        scored.append({**point, **bleu_scores(hypotheses, references),
                       "samples": hypotheses[:samples]})
    return scored


# -- the data, as python -m train reads it -------------------------------------------------------


def load_recipe(args, work: Path):
    """The spa_eng_small config (with --set and, for --quick, a sample of the corpus), and its
    TranslationTask prepared as `python -m train` prepares it: split, SentencePiece, limits."""
    import keras

    from train.config import load_config
    from train.data import resolve
    from train.tasks.translation import TranslationTask

    sets = list(args.set)
    if args.quick:
        full = resolve(load_config(args.config).data, load_config(args.config).data.tsv)
        lines = full.read_text(encoding="utf-8").splitlines()[::40]
        sample = work / "sample.tsv"
        sample.write_text("\n".join(lines) + "\n", encoding="utf-8")
        sets = [*QUICK_SETS, f"data.tsv={sample.resolve()}", *sets]
    config = load_config(args.config, sets)
    # The seed first: it frees tensorflow-text state made before it (see docs/design.md).
    keras.utils.set_random_seed(config.training.seed)
    task = TranslationTask(config)
    task.prepare(work)
    return config, task


def dev_subset(task, count: int) -> tuple[list[str], list[str]]:
    """The first `count` dev pairs whose source fits the model (train.scoring.fitting_pairs)."""
    from train.scoring import fitting_pairs

    dev = task.corpus.dev
    sources, references, _ = fitting_pairs(dev.sources, dev.targets, task.source_tok,
                                           task.model_config.max_source_length)
    return sources[:count], references[:count]


def write_pairs(path: Path, sources, targets) -> None:
    path.write_text(json.dumps({"sources": list(sources), "targets": list(targets)},
                               ensure_ascii=False), encoding="utf-8")


# -- our side ------------------------------------------------------------------------------------


def our_model(config, task, jit: bool):
    from train.engine import compile_model

    model = task.build_model(task.model_config)
    loss, metrics = task.loss_and_metrics(model, 1)
    compile_model(model, config, loss, metrics, jit)
    return model


def our_throughput(config, task, jit: bool, warmup: int, steps: int) -> dict:
    from bench.real_harness import BatchCounter, StepClock, measured_row, timed_window

    model = our_model(config, task, jit)
    make_train, _ = task.datasets()
    counter = BatchCounter(task.model_config.pad_id)
    cap = warmup + 3 * steps

    def enough(done: int) -> bool:
        return timed_window(counter.batches[:done], warmup, steps) is not None or done >= cap

    clock = StepClock(enough)
    t0 = time.perf_counter()
    model.fit(make_train().map(counter), epochs=1, steps_per_epoch=cap, callbacks=[clock],
              verbose=0, shuffle=False)
    row = measured_row("ours", jit, counter, clock, t0, warmup, steps,
                       "warm-up, every bucket's first batch")
    log(f"ours jit={jit}: {row['target_tokens_per_s']:,.0f} target tok/s over {row['steps']} "
        f"steps (median step {row['median_step_s']:.2f} s)")
    return row


def our_curve(config, task, jit: bool, sources, budget_s: float, every_s: float) -> dict:
    from bench.real_harness import TrainingBudget
    from keras_transformer.translator import translate

    model = our_model(config, task, jit)
    make_train, _ = task.datasets()

    def evaluate(model):
        return {"hypotheses": translate(model, task.source_tok, task.target_tok, sources,
                                        SearchSettings(beam_size=1),
                                        batch_size=config.eval.batch_size)}

    budget = TrainingBudget(budget_s, every_s, evaluate, log=log)
    model.fit(make_train(), epochs=1, steps_per_epoch=10**9, callbacks=[budget], verbose=0,
              shuffle=False)
    return {"side": "ours", "jit_compile": jit, "checkpoints": budget.checkpoints}


# -- keras-hub's side ----------------------------------------------------------------------------


def keras_hub_side(args, work: Path, mode: str, jits: list[bool], vocab_size: int) -> dict:
    out = work / f"keras_hub_{mode}.json"
    cmd = [str(args.peer_python), "-m", "bench.train_real_keras_hub", "--work", str(work),
           "--out", str(out), "--mode", mode, "--jit", *("on" if j else "off" for j in jits),
           "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--budget-minutes", str(args.budget_minutes),
           "--eval-every-minutes", str(args.eval_every_minutes),
           "--vocab-size", str(vocab_size), "--seed", str(args.seed)]
    size = args.keras_hub_size
    cmd += ["--size", {"small": "tiny", "example": "tiny-example"}[size] if args.quick else size]
    log("keras-hub:", " ".join(cmd))
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    tail = [line for line in proc.stdout.splitlines()
            if line.startswith(("[keras-hub", "Traceback")) or line.endswith("Error")
            or "Error: " in line]
    for line in tail[-20:]:
        print("  " + line, flush=True)
    if proc.returncode or not out.is_file():
        raise RuntimeError(f"the keras-hub side failed ({proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


# -- the report ----------------------------------------------------------------------------------


def throughput_table(rows: list[dict]) -> tuple[list[str], list[list]]:
    headers = ["side", "XLA", "steps", "target tok/s", "windows p25-p75", "sentences/s",
               "tok/sentence", "target pad", "source pad", "median step s"]
    table = []
    for r in rows:
        w = r["window_tokens_per_s"]
        table.append([r["side"], "on" if r["jit_compile"] else "off", r["steps"],
                      f"{r['target_tokens_per_s']:,.0f}", f"{w['p25']:,.0f}-{w['p75']:,.0f}",
                      f"{r['sentences_per_s']:.1f}", f"{r['target_tokens_per_sentence']:.2f}",
                      f"{r['target_padding_fraction']:.1%}",
                      f"{r['source_padding_fraction']:.1%}", f"{r['median_step_s']:.2f}"])
    return headers, table


def curve_table(curves: list[dict]) -> tuple[list[str], list[list]]:
    headers = ["side", "XLA", "minutes", "steps", "BLEU (as output)", "plain BLEU"]
    table = [[c["side"], "on" if c["jit_compile"] else "off", f"{p['minutes']:.1f}",
              p["steps"], f"{p['bleu']:.2f}", f"{p['plain_bleu']:.2f}"]
             for c in curves for p in c["checkpoints"]]
    return headers, table


def ratios(rows: list[dict]) -> dict:
    """Ours / keras-hub: best against best, and per XLA setting measured on both sides."""
    best = {side: max((r for r in rows if r["side"] == side),
                      key=lambda r: r["target_tokens_per_s"], default=None)
            for side in ("ours", "keras-hub")}
    out = {}
    if best["ours"] and best["keras-hub"]:
        o, k = best["ours"], best["keras-hub"]
        out["best"] = {"ours_jit": o["jit_compile"], "keras_hub_jit": k["jit_compile"],
                       "target_tokens": o["target_tokens_per_s"] / k["target_tokens_per_s"],
                       "sentences": o["sentences_per_s"] / k["sentences_per_s"]}
    for jit in (False, True):
        pair = [next((r for r in rows if r["side"] == s and r["jit_compile"] == jit), None)
                for s in ("ours", "keras-hub")]
        if all(pair):
            out[f"jit_{'on' if jit else 'off'}"] = {
                "target_tokens": pair[0]["target_tokens_per_s"] / pair[1]["target_tokens_per_s"],
                "sentences": pair[0]["sentences_per_s"] / pair[1]["sentences_per_s"]}
    return out


def markdown(data: dict) -> str:
    def md(headers, rows):
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])

    cpu = data.get("machine", {})
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in cpu.get("cpu_flags", {}).items()
                      if k in CPU_FLAGS)
    parts = [f"# Training on real data ({data['started_utc']})", "",
             f"`{' '.join(data['command_line'])}`", "",
             f"CPU: {cpu.get('cpu_model')} ({cpu.get('usable_cores')} usable cores; {flags}); "
             f"load average "
             f"{data['loadavg_start']} at the start, {data.get('loadavg_end')} at the end.", ""]
    hub = data.get("keras_hub", {})
    if hub.get("model"):
        m = hub["model"]
        vocab = (f"one joint vocabulary of {hub['vocabulary_size']:,} tied to the output layer"
                 if m["joint"] else
                 f"vocabularies of {hub['vocabulary_size']:,} (source) and "
                 f"{hub['target_vocabulary_size']:,} (target), an untied output layer")
        parts += [f"keras-hub's model (`--size {hub['size']}`): {m['layers']} + {m['layers']} "
                  f"layers, d_model {m['d_model']}, {m['heads']} heads, d_ff {m['ffn']}, "
                  f"dropout {m['dropout']}, {vocab}.", ""]
    if data.get("throughput"):
        parts += ["## Throughput", "", md(*throughput_table(data["throughput"])), ""]
        for name, r in data.get("ratios", {}).items():
            parts.append(f"- ours / keras-hub ({name}): {r['target_tokens']:.2f}x target "
                         f"tokens/s, {r['sentences']:.2f}x sentences/s")
        parts.append("")
    if data.get("curves"):
        parts += ["## Dev BLEU against training minutes", "",
                  md(*curve_table(data["curves"])), ""]
    return "\n".join(parts)


def report(data: dict, out_dir: Path, name: str) -> Path:
    path = write_json(out_dir / f"{name}.json", data)
    (out_dir / f"{name}.md").write_text(markdown(json.loads(path.read_text())) + "\n",
                                        encoding="utf-8")
    return path


# -- main ----------------------------------------------------------------------------------------


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=["throughput", "curve"],
                        default=["throughput", "curve"])
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a value of the config, as python -m train --set")
    parser.add_argument("--jit", nargs="+", choices=["off", "on"], default=None,
                        help="XLA settings of the throughput part, both sides: off on (off "
                             "with --quick)")
    parser.add_argument("--curve-jit", choices=["best", "off", "on"], default="best",
                        help="XLA for the curve: each side's faster throughput setting of "
                             "this run (off without a throughput part), or as given")
    parser.add_argument("--warmup", type=int_in(0), default=None, help="10 (2 with --quick)")
    parser.add_argument("--steps", type=int_in(1), default=None,
                        help="timed steps per setting: 100 (4 with --quick)")
    parser.add_argument("--budget-minutes", type=float_in(0, 10000, low_open=True),
                        default=None,
                        help="training minutes per side for the curve: 10 (0.1 with --quick)")
    parser.add_argument("--eval-every-minutes", type=float_in(0, 10000, low_open=True),
                        default=None,
                        help="2.5 (0.05 with --quick)")
    parser.add_argument("--dev-sentences", type=int_in(1), default=None,
                        help="300 (20 with --quick)")
    sides = parser.add_mutually_exclusive_group()
    sides.add_argument("--no-peer", action="store_true", help="ours only")
    sides.add_argument("--peer-only", action="store_true",
                       help="keras-hub only (no ratios; its curve against ours from another "
                            "run)")
    parser.add_argument("--keras-hub-size", choices=["small", "example"], default="small",
                        help="keras-hub's model: ours (`small`, one joint vocabulary of ours' "
                             "size) or the example's own (1 + 1 layers, a vocabulary of "
                             "--keras-hub-vocab-size per language)")
    parser.add_argument("--keras-hub-vocab-size", type=int_in(1), default=None,
                        help="default: our vocabulary's size; 15000 with --keras-hub-size "
                             "example (the example's)")
    parser.add_argument("--peer-python", type=Path, default=PEER_TF_PYTHON)
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the split, tokenizers and the keras-hub side's "
                             "files (default: a temporary one)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: a 1-in-40 sample of the pairs, tiny models")
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    quick = args.quick
    args.warmup = args.warmup if args.warmup is not None else (2 if quick else 10)
    args.steps = args.steps or (4 if quick else 100)
    args.budget_minutes = args.budget_minutes or (0.1 if quick else 10.0)
    args.eval_every_minutes = args.eval_every_minutes or (0.05 if quick else 2.5)
    args.dev_sentences = args.dev_sentences or (20 if quick else 300)
    peer = not args.no_peer
    if peer and not args.peer_python.is_file():
        parser.error(f"{args.peer_python} is missing (bash ../shared/peers/setup_venvs.sh "
                     f"makes it); --no-peer measures ours only")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        meta = payload("train_real", quick=quick,
                       command_line=command_line([__file__, *(argv or sys.argv[1:])]))
        config, task = load_recipe(args, work)
        args.seed = config.training.seed
        sources, references = dev_subset(task, args.dev_sentences)
        write_pairs(work / "train.json", task.corpus.train.sources, task.corpus.train.targets)
        write_pairs(work / "dev.json", sources, references)
        data = {**meta, "recipe": {"config": args.config, "sets": args.set,
                                   "train_pairs": len(task.corpus.train),
                                   "too_long_dropped": task.too_long,
                                   "vocab_size": task.model_config.target_vocab_size,
                                   "tokens_per_batch": config.data.tokens_per_batch,
                                   "num_buckets": config.data.num_buckets},
                "settings": {k: str(v) for k, v in vars(args).items() if k != "set"},
                "dev_sentences": len(sources)}
        hub_vocab = args.keras_hub_vocab_size or (
            15000 if args.keras_hub_size == "example" and not quick
            else config.tokenizer.vocab_size)
        jits = [j == "on" for j in args.jit or (["off"] if quick else ["off", "on"])]
        if "throughput" in args.parts:
            rows = [] if args.peer_only else [
                our_throughput(config, task, jit, args.warmup, args.steps) for jit in jits]
            if peer:
                side = keras_hub_side(args, work, "throughput", jits, hub_vocab)
                data["keras_hub"] = {k: v for k, v in side.items() if k != "results"}
                rows += side["results"]
            data["throughput"] = rows
            data["ratios"] = ratios(rows)
            headers, table = throughput_table(rows)
            print_table(headers, table)
        if "curve" in args.parts:
            def chosen(side: str) -> bool:
                if args.curve_jit != "best":
                    return args.curve_jit == "on"
                rows = [r for r in data.get("throughput", []) if r["side"] == side]
                return bool(rows) and max(rows, key=lambda r: r["target_tokens_per_s"])[
                    "jit_compile"]

            budget, every = args.budget_minutes * 60, args.eval_every_minutes * 60
            curves = []
            if not args.peer_only:
                log(f"curve: ours, {args.budget_minutes} training minutes")
                curves.append(our_curve(config, task, chosen("ours"), sources, budget, every))
            if peer:
                log(f"curve: keras-hub, {args.budget_minutes} training minutes")
                side = keras_hub_side(args, work, "curve", [chosen("keras-hub")], hub_vocab)
                data.setdefault("keras_hub", {k: v for k, v in side.items() if k != "results"})
                curves += side["results"]
            for c in curves:
                c["checkpoints"] = score_curve(c["checkpoints"], references)
            data["curves"] = curves
            headers, table = curve_table(curves)
            print_table(headers, table)
    path = report(data, results_dir(args), "train_real")
    print(f"wrote {path} and {path.with_suffix('.md')}")


if __name__ == "__main__":
    sys.exit(main())
