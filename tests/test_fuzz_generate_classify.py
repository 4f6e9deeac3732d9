"""Fault and fuzz tests of the language-model and classifier tools: `train.generate`,
`export.generate` and `export.classify`, with the promises of tests/test_fuzz_export.py: (1)
no traceback and no warning from inside the library, (2) the documented exit code with an
`error:` line naming the option or file (argparse's own line for an option out of its
range), or a correct result, (3) nothing on disk changed (these tools write stdout, and
export.classify's -o only), (4) the export still answers as before. Inputs come also from a
FIFO, /dev/stdin and a pipe's /dev/fd/N, as a shell passes them.

A tiny untrained language model and classifier (random weights) are made in-process and
exported (ONNX) once for the module.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.cli_probe import Result, assert_clean_failure, call_main, run_cli, tree_digest

pytestmark = pytest.mark.slow  # the module's fixture exports two models

SEED = 20240622
WORDS = ["red", "blue", "cat", "dog", "big", "small", "one", "two", "three", "I", "saw"]
COUNTS: Counter = Counter()


def _tokenizer(run: Path) -> int:
    from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

    rng = np.random.default_rng(SEED)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))) for _ in range(300)]
    shutil.copyfile(train_sentencepiece(texts, run.parent / f"spm_{run.name}", 60),
                    run / "spm.model")
    return SentencePieceTokenizer(run / "spm.model").vocab_size


def _randomize(model, rng) -> None:
    model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(np.float32)
                       for w in model.get_weights()])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """{root, lm_run, lm_export, classifier_export}."""
    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.classifier import TransformerClassifier
    from keras_transformer.models.language_model import TransformerLM
    from train.config import RunConfig, save_config

    root = tmp_path_factory.mktemp("fuzz_tools")
    rng = np.random.default_rng(SEED)
    runs = {}
    for name, task in (("lm", "language_model"), ("classifier", "classification")):
        run = root / name
        run.mkdir()
        vocab = _tokenizer(run)
        config = TransformerConfig.preset(
            "tiny", source_vocab_size=vocab, target_vocab_size=vocab, d_model=32,
            num_heads=4, d_ff=64, num_encoder_layers=1, num_decoder_layers=1,
            max_source_length=16, max_target_length=24, dropout=0.0)
        model = (TransformerLM(config) if name == "lm"
                 else TransformerClassifier(config, num_classes=3))
        model.build()
        _randomize(model, rng)
        model.save(run / "model.keras")
        (run / "model_config.json").write_text(json.dumps(config.to_dict()))
        save_config(RunConfig(task=task), run / "config.yaml")
        if name == "classifier":
            (run / "labels.json").write_text(json.dumps(["neg", "neu", "pos"]))
        done = run_cli("export", "--run", run, "--format", "onnx", "--out", root / f"{name}_x")
        assert done.code == 0, done.stderr[-3000:]
        runs[name] = run
    return {"root": root, "lm_run": runs["lm"], "lm_export": root / "lm_x",
            "classifier_export": root / "classifier_x"}


def _case(world, command: str, run, expect: int, *words: str, usage: bool = False,
          target: Path | None = None) -> Result:
    """One case: (1) no traceback, no warning; (2) exit `expect`, its error line naming
    `words` (argparse's `error: argument FLAG` when `usage`); (3) nothing outside `target`
    changed."""
    COUNTS[f"{command} tried"] += 1
    before = tree_digest(world["root"])
    result: Result = run()
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr, \
        result.stderr[-3000:]
    if usage:
        assert result.code == 2, result.stderr[-3000:]
        for word in words:
            assert word in result.stderr, (word, result.stderr[-3000:])
    elif expect == 0:
        assert result.code == 0, result.stderr[-3000:]
    else:
        assert_clean_failure(result, expect, *words)
    COUNTS[f"{command} handled"] += 1
    after = tree_digest(world["root"])
    if target is not None:
        name = target.relative_to(world["root"]).as_posix()
        before.pop(name, None)
        after.pop(name, None)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))[:10]
    COUNTS[f"{command} nothing lost"] += 1
    return result


# --- the generators -------------------------------------------------------------------------

def _train_generate(world, *args) -> Result:
    from train.generate import main

    return call_main(main, "--run", world["lm_run"], *args)


def _export_generate(world, *args) -> Result:
    from export.generate import main

    return call_main(main, "--export", world["lm_export"], *args)


GENERATORS = {"train.generate": _train_generate, "export.generate": _export_generate}

# (flag, value, words of the message): refused when parsed, naming the flag.
BAD_SAMPLING = [
    ("--temperature", "0", "(0, 100]"), ("--temperature", "-1", "(0, 100]"),
    ("--temperature", "nan", "(0, 100]"), ("--temperature", "inf", "(0, 100]"),
    ("--temperature", "1e999", "(0, 100]"), ("--temperature", "100.0001", "(0, 100]"),
    ("--temperature", "²", "not a number"), ("--top-p", "0", "(0, 1]"),
    ("--top-p", "1.0000001", "(0, 1]"), ("--top-p", "nan", "(0, 1]"),
    ("--top-k", "0", "at least 1"), ("--top-k", "-3", "at least 1"),
    ("--top-k", "²", "not an integer"), ("--top-k", "9" * 5000, "at least 1"),
    ("--max-new-tokens", "0", "from 1 to 4096"), ("--max-new-tokens", "4097", "from 1 to 4096"),
    ("--num-samples", "0", "from 1"), ("--seed", "-1", "out of range"),
    ("--seed", "1.5", "not an integer"),
]


@pytest.mark.parametrize("tool", GENERATORS)
@pytest.mark.parametrize("flag, value, words", BAD_SAMPLING)
def test_generators_refuse_bad_sampling_options_naming_them(world, tool, flag, value, words):
    _case(world, tool, lambda: GENERATORS[tool](world, "--prompt", "one cat", flag, value), 2,
          f"argument {flag}", words, usage=True)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("tool", GENERATORS)
def test_generators_at_numeric_edges_give_the_greedy_text_without_warnings(world, tool):
    """A vanishing temperature or nucleus is the argmax: the greedy text, and no NumPy
    warning; a top-k past the vocabulary and the largest seed are accepted."""
    run = GENERATORS[tool]
    greedy = _case(world, tool, lambda: run(world, "--prompt", "one red", "--seed", "3"), 0)
    assert greedy.stdout.strip()
    for extra in (["--temperature", "5e-324"], ["--temperature", "1e-300"],
                  ["--top-p", "5e-324"], ["--top-k", "1"],
                  ["--temperature", "5e-324", "--top-k", str(10**30), "--top-p", "1e-300"]):
        sampled = _case(world, tool, lambda extra=extra: run(world, "--prompt", "one red",
                                                             "--seed", "3", *extra), 0)
        assert sampled.stdout == greedy.stdout, extra
    largest = 2**63 - 1 if tool == "export.generate" else 2**32 - 1
    _case(world, tool, lambda: run(world, "--prompt", "one red", "--temperature", "100",
                                   "--seed", str(largest)), 0)


@pytest.mark.parametrize("tool", GENERATORS)
def test_generators_refuse_bad_prompts_in_one_line(world, tool):
    run = GENERATORS[tool]
    for prompt, words in (("", "prompt"), ("   ", "prompt"), ("\t\n", "prompt"),
                          (" ".join(["cat"] * 40), "prompt")):
        _case(world, tool, lambda prompt=prompt: run(world, "--prompt", prompt), 2, words)
    _case(world, tool, lambda: run(world, "--prompt", "cat", "--num-samples", "2"), 2,
          "--temperature")


# --- the classifier -------------------------------------------------------------------------

def _classify(world, *args, stdin: bytes | None = None) -> Result:
    if stdin is not None:
        return run_cli("export.classify", "--export", world["classifier_export"], *args,
                       stdin=stdin)
    from export.classify import main

    return call_main(main, "--export", world["classifier_export"], *args)


LINES = ["one red cat", "I saw two big dogs", "three", "blue blue blue dog cat"]
TEXT = "".join(line + "\n" for line in LINES).encode()


@pytest.fixture(scope="module")
def labels(world):
    """What export.classify prints for LINES from a regular file."""
    source = world["root"] / "lines.txt"
    source.write_bytes(TEXT)
    result = _classify(world, source)
    assert result.code == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == len(LINES) and all(line.split("\t")[0] in ("neg", "neu", "pos")
                                            for line in lines)
    return result.stdout


def _feed(path: Path | str, data: bytes) -> threading.Thread:
    def write():
        with open(path, "wb") as out:
            out.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_classify_reads_a_fifo_dev_stdin_and_a_pipe(world, labels, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = _feed(fifo, TEXT)
    result = _case(world, "export.classify", lambda: _classify(world, fifo), 0)
    writer.join(10)
    assert result.stdout == labels
    result = _case(world, "export.classify", lambda: _classify(world, "/dev/stdin", stdin=TEXT),
                   0)
    assert result.stdout == labels
    read, write = os.pipe()  # a shell's <(cat lines.txt)
    writer = _feed(f"/dev/fd/{write}", TEXT)
    writer.join(10)
    os.close(write)
    try:
        result = _case(world, "export.classify", lambda: _classify(world, f"/dev/fd/{read}"), 0)
    finally:
        os.close(read)
    assert result.stdout == labels
    result = _case(world, "export.classify", lambda: _classify(world, stdin=TEXT), 0)
    assert result.stdout == labels


def test_classify_bad_inputs_and_options(world, labels, tmp_path):
    rng = np.random.default_rng(SEED)
    _case(world, "export.classify", lambda: _classify(world, tmp_path / "absent.txt"), 2,
          "absent.txt", "not found")
    _case(world, "export.classify", lambda: _classify(world, tmp_path), 2, "is a directory")
    for data, words in ((b"one cat\n\ntwo dogs\n", "line 2"), (b"   \n", "line 1"),
                        (b"\xef\xbb\xbf\r\n", "line 1")):
        _case(world, "export.classify", lambda data=data: _classify(world, stdin=data), 2,
              words)
    for _ in range(6):  # random bytes: lines with U+FFFD (a warning naming the line) or empty
        data = rng.bytes(int(rng.integers(1, 400))).replace(b"\n", b" ") + b"\n"
        result = _classify(world, stdin=data)
        COUNTS["export.classify tried"] += 1
        assert "Traceback" not in result.stderr
        if result.code == 0:
            assert len(result.stdout.splitlines()) == 1
        else:
            assert_clean_failure(result, 2, "line 1")
        COUNTS["export.classify handled"] += 1
        COUNTS["export.classify nothing lost"] += 1
    for flag, value, words in (("--top-k", "0", "from 1"), ("--top-k", "²", "not an integer"),
                               ("--batch-size", "0", "from 1 to 4096"),
                               ("--batch-size", "9" * 5000, "from 1 to 4096"),
                               ("--runtime", "nope", "invalid choice")):
        _case(world, "export.classify", lambda flag=flag, value=value: _classify(
            world, flag, value, stdin=TEXT), 2, f"argument {flag}", words, usage=True)
    _case(world, "export.classify", lambda: _classify(world, "--top-k", "4", stdin=TEXT), 2,
          "--top-k")
    _case(world, "export.classify", lambda: _classify(world, "--runtime", "onnx", "--run",
                                                      world["root"], stdin=TEXT), 2, "--run")
    # -o: inside the export, the input itself, a directory, in a missing directory.
    source = world["root"] / "lines.txt"
    for out, words in ((world["classifier_export"] / "labels.txt", "inside the export"),
                       (source, "input"), (tmp_path, "is a directory"),
                       (tmp_path / "no" / "out.txt", "does not exist")):
        _case(world, "export.classify", lambda out=out: _classify(world, source, "-o", out), 2,
              words)
    out = world["root"] / "labels.txt"
    _case(world, "export.classify", lambda: _classify(world, source, "-o", out), 0, target=out)
    assert out.read_text(encoding="utf-8") == labels
    # The other kinds of export are named with the tool that runs them.
    _case(world, "export.classify", lambda: call_main(
        __import__("export.classify", fromlist=["main"]).main, "--export",
        world["lm_export"]), 2, "export.generate")
    _case(world, "export.generate", lambda: call_main(
        __import__("export.generate", fromlist=["main"]).main, "--export",
        world["classifier_export"], "--prompt", "cat"), 2, "export.classify")
    assert _classify(world, source).stdout == labels  # the export answers as before


def test_zz_report_counts():
    """The tallies docs/safety.md reports (run with -s to see them)."""
    print(dict(sorted(COUNTS.items())))
    for tool in ("train.generate", "export.generate", "export.classify"):
        assert COUNTS[f"{tool} tried"] == COUNTS[f"{tool} nothing lost"] > 0
