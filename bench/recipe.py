"""Training recipes compared: dev BLEU against wall-clock training minutes, and final scores.

    python -m bench.recipe --run old=runs/spa_old --run new=runs/spa_new [--results DIR]
                           [--name recipe] [--every 5] [--dev-only]

Each --run is a finished `python -m train` run directory. Its metrics.json holds, per epoch,
the training minutes at the epoch's end (model.fit's wall clock, earlier epochs' validation and
dev scoring included) and the dev BLEU scored after it (greedy, `eval.dev_bleu_sentences`
sentences): the curve. The final scores are the run's own (`eval.beam_size`, the first
`eval.max_sentences` of dev and test). The table lists the config keys in which the runs
differ, so a recipe change is read off the report, not retold. --dev-only leaves the test
split's scores out: for the trials a recipe is chosen from, which are read on dev only.

Writes <results>/<name>.json and <name>.md (default bench/results/recipe). The machine
recorded is the one this script runs on: run it where the runs ran.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from bench.common import add_results_option, payload, print_table, results_dir, write_json
from keras_transformer.command_line import add_debug_flag, entry_point, float_in

# metrics.json key -> report name (the test split's scores carry no prefix there).
FINAL = {"dev_bleu": "dev_bleu", "dev_chrf": "dev_chrf", "bleu": "test_bleu",
         "chrf": "test_chrf", "best_dev_bleu": "best_dev_bleu_greedy", "best_epoch": "best_epoch"}
FINAL_KEYS = tuple(FINAL.values())


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def read_run(name: str, directory: Path, dev_only: bool = False) -> dict:
    metrics_path, config_path = directory / "metrics.json", directory / "config.yaml"
    for path in (metrics_path, config_path):
        if not path.is_file():
            raise SystemExit(f"error: {path} not found: --run {name}={directory} must be a "
                             f"finished `python -m train` run directory")
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
        config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        raise SystemExit(f"error: --run {name}={directory}: unreadable metrics.json or "
                         f"config.yaml ({type(err).__name__}: {err})") from None
    if not isinstance(metrics, dict) or not isinstance(config, dict):
        raise SystemExit(f"error: --run {name}={directory}: metrics.json and config.yaml must "
                         f"each hold a mapping")
    config = flatten(config)
    minutes = metrics.get("epoch_minutes", [])
    bleu = metrics.get("epoch_dev", {}).get("bleu", [])
    return {
        "name": name, "run": str(directory), "config": config,
        "steps": metrics.get("steps"), "epochs": metrics.get("epochs"),
        "train_minutes": round(metrics.get("train_seconds", 0.0) / 60.0, 2),
        "target_tokens_per_second": metrics.get("target_tokens_per_second"),
        "curve": [{"minutes": m, "dev_bleu": b} for m, b in zip(minutes, bleu, strict=False)],
        "final": {name: metrics[key] for key, name in FINAL.items()
                  if key in metrics and not (dev_only and name.startswith("test_"))},
    }


def differing_keys(runs: list[dict]) -> list[str]:
    keys = sorted(set().union(*(r["config"] for r in runs)))
    return [k for k in keys if len({json.dumps(r["config"].get(k)) for r in runs}) > 1]


def at_minute(curve: list[dict], minute: float, every: float):
    """The dev BLEU of the last epoch that ended by `minute`: None before the first, and None
    once the run had ended by the mark before (a shorter run's row stops there)."""
    done = [p["dev_bleu"] for p in curve if p["minutes"] <= minute]
    if not done or minute - every >= curve[-1]["minutes"]:
        return None
    return done[-1]


def tables(data: dict, every: float) -> list[tuple[list[str], list[list]]]:
    runs, keys = data["runs"], data["differing_config"]
    recipe = (["run", *keys, "steps", "minutes", "target tok/s", *FINAL_KEYS],
              [[r["name"], *(r["config"].get(k) for k in keys), r["steps"], r["train_minutes"],
                r["target_tokens_per_second"], *(r["final"].get(k) for k in FINAL_KEYS)]
               for r in runs])
    last = max((p["minutes"] for r in runs for p in r["curve"]), default=0.0)
    marks = [every * i for i in range(1, int(last // every) + 2)]
    curve = (["minutes", *(r["name"] for r in runs)],
             [[m, *(at_minute(r["curve"], m, every) for r in runs)] for m in marks])
    return [recipe, curve]


def markdown(data: dict, every: float) -> str:
    def md(headers, rows):
        lines = ["| " + " | ".join(map(str, headers)) + " |",
                 "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |"
                  for row in rows]
        return "\n".join(lines)

    facts = data["machine"]
    recipe, curve = tables(data, every)
    return "\n\n".join([
        "# Recipes: dev BLEU against training minutes",
        f"Machine: {facts['cpu_model']}, {facts['cores']} cores; written by `python -m "
        f"bench.recipe`.",
        "Runs and the config keys in which they differ (blank: not set, the default); final "
        "scores are each run's own (beam search on the first `eval.max_sentences` of dev and "
        "test).",
        md(*recipe),
        f"Dev BLEU (greedy, per-epoch dev subset) of the last epoch ended by each minute, "
        f"every {every:g} minutes of training:",
        md(*curve),
    ])


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, metavar="NAME=DIR",
                        help="a finished run directory, named for the report; give two or more")
    parser.add_argument("--every", type=float_in(0, 10000, low_open=True), default=5.0,
                        help="minutes between the curve table's rows (default 5)")
    parser.add_argument("--dev-only", action="store_true",
                        help="leave out the test split's scores (runs that choose a recipe)")
    parser.add_argument("--name", default="recipe", help="file name of the report")
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    if args.every <= 0:
        parser.error("--every must be positive")
    runs = []
    for item in args.run:
        name, sep, directory = item.partition("=")
        if not sep or not name or not directory:
            parser.error(f"--run {item!r} must be NAME=DIR")
        runs.append(read_run(name, Path(directory), args.dev_only))
    data = payload("recipe", dev_only=args.dev_only, runs=runs, differing_config=differing_keys(runs))
    out = results_dir(args)
    path = write_json(out / f"{args.name}.json", data)
    (out / f"{args.name}.md").write_text(
        markdown(json.loads(path.read_text()), args.every) + "\n", encoding="utf-8")
    for headers, rows in tables(data, args.every):
        print_table(headers, rows)
        print()
    print(f"wrote {path} and {path.with_suffix('.md')}")


if __name__ == "__main__":
    sys.exit(main())
