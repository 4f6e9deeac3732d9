"""python -m train.evaluate: run a trained model over a file and score it with its task's
metric: a translation run by sacreBLEU (BLEU and chrF, with signatures), a summarization run
by ROUGE-1/2/L beside the Lead-1/2/3 baselines and the greedy oracle, a classification run by accuracy,
macro-F1 and per-class F1 against a label file, a language-model run by its perplexity per
token and per syllable and bits per character on the text itself; and draw the
cross-attention heatmaps of a seq2seq model.

The run's task (train.tasks) does the work through its evaluate hooks (Task.evaluate_file and
the methods beside it); an option that does not apply to it (--beam for a classifier, --tsv
beside summarization, --plot-attention beside seq2seq, --ref and --hyp for a language model)
is a one-line error, exit 2.

The search settings default to the run's own (its config.yaml `eval:` section). Translation
leaves out sentences longer than the model accepts (their output lines stay empty);
summarization cuts an article to its first pieces, as in training; a classifier cuts a
sentence to data.max_source_length pieces, as in training. --ref for a classifier holds one
label per line, line-aligned, as the run's data reads labels (a class id, or a name of the
run's labels.json); an unknown label is an error naming the line. A language model reads
each line as an article or a sentence (word joints as data.word_joints says), blank lines
left out, all of them one token stream as in training.

It reads the run and never replaces the run's own files: the outputs (translations,
summaries, or a classifier's label names, line-aligned, empty for a skipped line) go to
`<run>/eval/<model>/<src name>.hyp` (its own directory, replaced on a rerun) or to `--hyp FILE`
(an existing FILE is replaced only with `--overwrite`, never when it is a file of the run),
written atomically; a language model writes no output file. Scores are added to the run's
metrics.json under "evaluations". Every input and the output path are checked before the
model is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    add_search_constraints,
    command,
    entry_point,
    float_in,
    int_in,
    search_bounds,
)
from keras_transformer.file_safety import atomic_write_text, check_output_file
from keras_transformer.text.lines import read_lines

from .data import load_summaries
from .run_model import load_run_model

EVAL_DIR = "eval"  # train.evaluate's own directory in a run
MAX_BATCH, MAX_PLOTS = 4096, 100


def output_path(args, run: Path) -> Path:
    """Where the translations go, checked before any work: never a file of the run (outside
    its eval/ directory), --src or --ref; an existing file only with --overwrite."""
    model_stem = Path(args.model).name.removesuffix(".keras")
    if args.hyp is None:
        return run / EVAL_DIR / model_stem / f"{input_name(args)}.hyp"
    hyp = check_output_file(args.hyp, "--hyp", inputs={"--src": args.src, "--ref": args.ref,
                                                         "--tsv": args.tsv})
    resolved_run = run.resolve()
    inside_run = hyp.resolve().is_relative_to(resolved_run)
    if inside_run and not hyp.resolve().is_relative_to(resolved_run / EVAL_DIR):
        raise CommandError(f"--hyp {hyp} is inside the run directory {run}; the run's files "
                           f"are never replaced (leave --hyp out for {run / EVAL_DIR}/)")
    if hyp.exists() and not args.overwrite:
        raise CommandError(f"--hyp {hyp} already exists; pass --overwrite to replace it")
    return hyp


def input_name(args) -> str:
    """The input file's name, which names the output and the scores' entry."""
    return Path(args.src or args.tsv).name


# train.evaluate's options that a task may take or not (Task.evaluate_options), and whether
# each was given.
TASK_OPTIONS = {
    "--ref": lambda a: a.ref is not None, "--tsv": lambda a: a.tsv is not None,
    "--beam": lambda a: a.beam is not None, "--alpha": lambda a: a.alpha is not None,
    "--no-repeat-ngram-size": lambda a: a.no_repeat_ngram_size is not None,
    "--min-length": lambda a: a.min_length is not None,
    "--plot-attention": lambda a: a.plot_attention is not None,
    "--hyp": lambda a: a.hyp is not None, "--overwrite": lambda a: a.overwrite,
}


def run_task(run: Path, args):
    """The run's task (train.tasks.TASKS by its config.yaml `task:`), its config's eval
    settings replaced by the options given; an option the task does not take is refused."""
    from .tasks import load_run_config, task_class

    config = load_run_config(run / "config.yaml")
    task = task_class(config.task)(config)
    for flag, given in TASK_OPTIONS.items():
        if given(args) and flag not in task.evaluate_options:
            takes = sorted(task.evaluate_options) + ["--batch-size", "--model"]
            raise CommandError(f"{flag} does not apply to a {config.task} run (it takes "
                               f"--src with {', '.join(sorted(takes))})")
    given = {"beam_size": args.beam, "alpha": args.alpha,
             "no_repeat_ngram_size": args.no_repeat_ngram_size, "min_length": args.min_length}
    config.eval = dataclasses.replace(config.eval, **{k: v for k, v in given.items()
                                                      if v is not None})
    return task


def read_inputs(args, task) -> tuple[list[str], list[str] | None]:
    """(sources, references or None) from --src/--ref or --tsv, checked line for line."""
    if args.tsv:
        if args.ref:
            raise CommandError("--tsv holds the references; leave --ref out")
        data = load_summaries(args.tsv)
        return data.articles, data.summaries
    sources = read_lines(args.src, what="--src")
    references = read_lines(args.ref, what="--ref") if args.ref else None
    if references is not None and len(references) != len(sources):
        raise ValueError(f"{args.src} has {len(sources)} lines but {args.ref} has "
                         f"{len(references)}")
    scored = references is not None or task.scored_without_references
    if scored and not any(s.strip() for s in sources):
        raise ValueError(f"{args.src} holds no non-empty line to score")
    return sources, references


def record_scores(run: Path, model: str, src_name: str, entry: dict) -> None:
    """Add the scores to the run's metrics.json (per model, then source file), atomically;
    an unreadable metrics.json is left as it is, with a warning."""
    metrics_path = run / "metrics.json"
    metrics = {}
    if metrics_path.is_file():
        try:
            metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            metrics = err
        if not isinstance(metrics, dict):
            print(f"warning: {metrics_path} is not a JSON object; the scores are not recorded "
                  f"there", file=sys.stderr)
            return
    # Per model, then source file: best.keras and average.keras on one dev set both stay.
    metrics.setdefault("evaluations", {}).setdefault(model, {})[src_name] = entry
    atomic_write_text(metrics_path, json.dumps(metrics, indent=2, ensure_ascii=False))


@entry_point
def main(argv) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog=command("train.evaluate"),
        description="Run a trained model over a file and score it by its task: BLEU and "
                    "chrF (translation), ROUGE with Lead-1/2/3 and the oracle (summarization), accuracy "
                    "and macro-F1 (classification), perplexity (language model). Exit codes: "
                    "0 done, 2 bad usage or input, 1 a failure while working, 130 "
                    "interrupted.")
    parser.add_argument("--run", required=True, help="run directory, e.g. runs/demo")
    inputs = parser.add_mutually_exclusive_group(required=True)
    inputs.add_argument("--src", help="source sentences (articles; a language model's text), "
                                      "one per line")
    inputs.add_argument("--tsv", help="summarization: a TSV file with a header naming its "
                                      "article and summary columns (e.g. VNDS's test.tsv.gz)")
    parser.add_argument("--ref", help="references (a classifier's labels: class ids or names), "
                                      "line-aligned with --src; not for a language model")
    parser.add_argument("--model", default="model.keras",
                        help="model file in the run directory (e.g. best.keras, average.keras)")
    parser.add_argument("--beam", type=int_in(*search_bounds("beam_size")), default=None,
                        help=f"beam size, 1 to {search_bounds('beam_size')[1]} (default: the run's eval.beam_size)")
    parser.add_argument("--alpha", type=float_in(*search_bounds("alpha")), default=None,
                        help="length penalty exponent, 0 to 10 (default: the run's eval.alpha)")
    add_search_constraints(parser, "the run's")
    parser.add_argument("--batch-size", type=int_in(1, MAX_BATCH), default=None,
                        help=f"sentences per batch, 1 to {MAX_BATCH} (default: the run's "
                             f"eval.batch_size; a classifier's training batch; a language "
                             f"model's windows of its training batch)")
    parser.add_argument("--hyp", "--out", dest="hyp",
                        help="file to write the outputs to (default: "
                             "<run>/eval/<model>/<input name>.hyp)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --hyp file")
    parser.add_argument("--plot-attention", type=int_in(0, MAX_PLOTS), default=None, metavar="K",
                        help="seq2seq runs: write cross-attention heatmaps of the first K "
                             f"scored sentences (0 to {MAX_PLOTS}), named by their input line, "
                             "to <run>/eval/<model>/attention/")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    run = Path(args.run)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory not found: {run}")
    model_path = run / args.model
    if Path(args.model).name != args.model:
        raise CommandError(f"--model {args.model!r} must be a file name in the run directory")
    task = run_task(run, args)
    # A task that writes no output file (a language model's perplexities) refuses --hyp.
    hyp_path = output_path(args, run) if "--hyp" in task.evaluate_options else None
    lines, references = read_inputs(args, task)
    if references is not None and args.ref:
        references = task.read_references(run, lines, references, args.ref)
    lines = task.prepare_sources(lines)

    import tensorflow_text  # noqa: F401  (registers the tokenizer ops a saved model may use)

    model = load_run_model(model_path)
    task.use_run(run, model, args.batch_size)
    result = task.evaluate_file(model, lines, references, input_name(args))
    for note in result.notes:
        print(note, file=sys.stderr)
    if hyp_path is not None:
        hyp_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(hyp_path, "".join(f"{line}\n" for line in result.outputs))
        print(f"outputs: {hyp_path}")
    for line in result.printed:
        print(line)
    if result.scores is not None:
        written = {"hypotheses": str(hyp_path)} if hyp_path is not None else {}
        record_scores(run, args.model, input_name(args), {
            **result.scores, "model": args.model, **result.details, **written})
    if args.plot_attention:
        plots = run / EVAL_DIR / args.model.removesuffix(".keras") / "attention"
        paths = task.plot_attention(model, result, args.plot_attention, plots)
        print(f"attention heatmaps: {len(paths)} PNG files in {plots}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
