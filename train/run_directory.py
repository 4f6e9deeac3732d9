"""What `python -m train --out DIR` may do with DIR, decided before anything in it is touched.

A run directory holds `run.json`: the fingerprint of the config fields a run must agree on to
be resumed (`fingerprint_fields`), written before any other file of the run. Then:

- DIR is missing or empty: a new run. An earlier stage of the run's pipeline inside DIR (the
  selector run that eval.selector names, as DIR/selector) does not count, and is kept.
- DIR holds a run with the same fingerprint that has not finished (no `metrics.json`, or a
  backup still there): the run resumes.
- DIR holds a run of another config, a finished run, or files this tool did not make: refused
  (exit 2, naming DIR and `--overwrite`). With `--overwrite`, the files a run and
  `train.evaluate` make there (`RUN_ENTRIES`) are deleted and the run starts afresh; anything
  else in DIR is left alone.

A run directory from before `run.json` (its entries all in `RUN_ENTRIES`, with a readable
`config.yaml`) is recognised by the fingerprint of its `config.yaml`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from keras_transformer.command_line import CommandError, first_few
from keras_transformer.file_safety import atomic_write_text

from .config import RunConfig

RUN_FILE = "run.json"
# A run's SentencePiece files: spm.* for a joint vocabulary, else spm_source.* and spm_target.*.
TOKENIZER_FILES = ("spm.model", "spm.vocab", "spm_source.model", "spm_source.vocab",
                   "spm_target.model", "spm_target.vocab")
# What `python -m train` writes in a run directory (the chief; each other worker of a
# multi-worker run writes its own .worker<N>/), and what `train.evaluate` adds to it.
RUN_ENTRIES = {
    RUN_FILE, "config.yaml", "model_config.json", *TOKENIZER_FILES, "model.keras",
    "best.keras", "best.npz", "metrics.json", "dev.src", "dev.ref", "dev.hyp", "test.src",
    "test.ref", "test.hyp", "checkpoints", "logs", "backup", "eval", "attention", "labels.json",
}


def fingerprint_fields(config: RunConfig) -> dict:
    """What a backup must agree on to be resumed: data, tokenizer, model and step plan."""
    d = config.to_dict()
    keyed = {k: d[k] for k in ("task", "data", "tokenizer", "model")}
    keyed["steps_per_epoch"] = d["training"]["steps_per_epoch"]
    keyed["seed"] = d["training"]["seed"]
    if d["training"]["accumulate_steps"] != 1:  # absent, so older backups keep their print
        keyed["accumulate_steps"] = d["training"]["accumulate_steps"]
    return keyed


def fingerprint(config: RunConfig) -> str:
    return hashlib.sha256(json.dumps(fingerprint_fields(config), sort_keys=True)
                          .encode()).hexdigest()[:16]


def _ours(name: str) -> bool:
    # Temporary files of an interrupted atomic write (".<name>.<random>.tmp") count as ours.
    return name in RUN_ENTRIES or name.startswith(".worker") or (
        name.startswith(".") and name.endswith((".tmp", ".tmp.keras", ".tmp.npz")))


def _flat(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _differences(recorded: dict, wanted: dict) -> str:
    old, new = _flat(recorded), _flat(wanted)
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k, "-") != new.get(k, "-"))
    changes = [f"{k}: {old.get(k, '-')!r} -> {new.get(k, '-')!r}" for k in keys]
    return f" ({first_few(changes, 3)})" if changes else ""


def _recorded(out: Path) -> dict | None:
    """The fingerprint fields the run in `out` recorded, or None if `out` is not a run of ours."""
    run_file = out / RUN_FILE
    if run_file.is_file():
        try:
            fields = json.loads(run_file.read_text(encoding="utf-8"))["fields"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return fields if isinstance(fields, dict) else None
    config_file = out / "config.yaml"
    if config_file.is_file() and all(_ours(p.name) for p in out.iterdir()):
        from .config import load_config

        try:
            return fingerprint_fields(load_config(config_file))
        except (OSError, ValueError):
            return None
    return None


def stage_entries(out: Path, config: RunConfig) -> set[str]:
    """The entries of `out` that are an earlier stage of this run's pipeline, not its own
    files: the selector run (eval.selector) when it lies directly in `out`. Never deleted."""
    selector = config.eval.selector
    if selector and Path(selector).resolve().parent == out.resolve():
        return {Path(selector).name}
    return set()


def prepare_run_directory(out: Path, config: RunConfig, *, overwrite: bool = False) -> str:
    """Check `out` for a run of `config` and claim it; "new" or "resume". Raises CommandError
    (exit 2) for a directory it must not train into, before touching anything."""
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out} is a file, not a run directory")
    wanted = json.loads(json.dumps(fingerprint_fields(config)))  # as run.json holds it
    # The other workers of a multi-worker run may have made their .worker<N>/ already.
    stages = stage_entries(out, config)
    entries = sorted(p.name for p in out.iterdir() if not p.name.startswith(".worker")
                     and p.name not in stages) if out.is_dir() else []
    state = "new"
    if entries:
        recorded = _recorded(out)
        finished = (out / "metrics.json").is_file() and not (out / "backup").exists()
        if recorded is None:
            problem = (f"--out {out} already holds files this tool did not make "
                       f"({', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''})")
        elif recorded != wanted:
            problem = (f"run directory {out} was written by a run with a different data, "
                       f"tokenizer or model config{_differences(recorded, wanted)}")
        elif finished:
            problem = f"run directory {out} holds a finished run (metrics.json)"
        else:
            problem, state = None, "resume"
        if problem and not overwrite:
            raise CommandError(f"{problem}; pass --overwrite to replace it, or choose another "
                               f"--out")
        if problem:
            clear_run(out)
            state = "new"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / RUN_FILE, json.dumps(
        {"fingerprint": fingerprint(config), "fields": wanted}, indent=2, sort_keys=True))
    return state


def abandon_run(out: Path, remove: bool) -> None:
    """A new run that stopped before training (its data refused): its files deleted, and
    `out` itself when this run made it and nothing else lies there, so that the corrected
    command starts afresh instead of finding a run of another config."""
    clear_run(out)
    if remove and not any(out.iterdir()):
        out.rmdir()


def clear_run(out: Path) -> None:
    """Delete what a run and train.evaluate made in `out` (RUN_ENTRIES); leave the rest."""
    for path in out.iterdir():
        if not _ours(path.name):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
