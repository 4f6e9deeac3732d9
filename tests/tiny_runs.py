"""Smoke-size training runs of the demo config, for the tests that train end to end: the
overrides (the smallest run, and a replayable one for resuming) and the command line."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.cli_probe import ROOT

DEMO = ROOT / "train" / "configs" / "demo.yaml"
SMALLEST = [
    "data.train_size=200", "data.dev_size=10", "data.test_size=5",
    "data.max_source_length=24", "data.max_target_length=24", "data.tokens_per_batch=576",
    "tokenizer.vocab_size=120", "model.overrides.d_model=16", "model.overrides.d_ff=32",
    "model.overrides.num_heads=2", "model.overrides.dropout=0.0",
    "training.steps_per_epoch=3", "training.epochs=2", "training.save_every_steps=1",
    "training.verbose=0", "training.tensorboard=false", "eval.dev_score_sentences=3",
    "eval.beam_size=1", "eval.max_sentences=3", "eval.samples=0",
]

# steps_per_epoch makes the training stream replayable, so the resumed run sees exactly the
# batches the uninterrupted one sees after the backup; dropout 0 leaves no other randomness.
REPLAYABLE = [
    "data.train_size=300", "data.dev_size=20", "data.test_size=10",
    "data.max_source_length=24", "data.max_target_length=24", "data.tokens_per_batch=576",
    "tokenizer.vocab_size=200", "model.overrides.d_model=32", "model.overrides.d_ff=64",
    "model.overrides.dropout=0.0", "training.steps_per_epoch=4", "training.epochs=3",
    "training.save_every_steps=2", "training.verbose=0", "training.tensorboard=false",
    "eval.dev_score_sentences=5", "eval.beam_size=1", "eval.max_sentences=3", "eval.samples=0",
]


def train_args(out: Path, *extra: str, config: Path = DEMO,
               overrides: list[str] = SMALLEST) -> list[str]:
    """`python -m train`'s arguments: the config, the output, the overrides, then `extra`."""
    args = ["--config", str(config), "--out", str(out)]
    for item in (*overrides, *extra):
        args += ["--set", item]
    return args


def train_command(out: Path, *extra: str) -> list[str]:
    """`python -m train` of the replayable run, as a process's command line."""
    return [sys.executable, "-m", "train", *train_args(out, *extra, overrides=REPLAYABLE)]
