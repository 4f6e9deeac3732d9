"""Fault and fuzz tests of the training commands (`python -m train`, `train.evaluate`,
`train.average`): generated bad inputs with a fixed seed, and kill -9 during a run.

Every case asserts (1) no traceback, (2) the documented exit code (2 bad usage or input, 1 a
failure while working), (3) no file outside the command's target changed (tree digests
before and after) and (4) the good run still loads and evaluates. Most cases call the tool's
`main` in this process (`cli_probe.call_main`); the kill -9 cases run it as a process.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_probe import ROOT, assert_clean_failure, call_main, run_cli, tree_digest
from tests.tiny_runs import DEMO, train_args

SEED = 20240611


def train_main(*args):
    from train.cli import main

    return call_main(main, *args)


def evaluate_main(*args):
    from train.evaluate import main

    return call_main(main, *args)


def average_main(*args):
    from train.average import main

    return call_main(main, *args)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """A finished tiny run (2 epochs of 3 steps), made once for the module."""
    out = tmp_path_factory.mktemp("fuzz") / "run"
    result = run_cli("train", *train_args(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.code == 0, result.stderr[-3000:]
    return out


@pytest.fixture
def run_copy(good_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(good_run, copy, symlinks=True)
    return copy


def digest_outside(root: Path, target: str) -> dict[str, str]:
    """tree_digest of `root` without `target` (the command's own directory)."""
    return {k: v for k, v in tree_digest(root).items()
            if k != target and not k.startswith(f"{target}/")}


def assert_still_good(run: Path, tmp_path: Path) -> None:
    """(4): the run's model loads and `train.evaluate` translates with it."""
    src = tmp_path / "check.src"
    src.write_text("she bought three dogs\n", encoding="utf-8")
    result = evaluate_main("--run", run, "--src", src, "--beam", 1, "--hyp",
                           tmp_path / "check.hyp", "--overwrite")
    assert result.code == 0, result.stderr[-3000:]
    assert len((tmp_path / "check.hyp").read_text(encoding="utf-8").splitlines()) == 1


# --- python -m train: configs, --set values and the run directory ------------------------

def _random_configs() -> list[bytes]:
    rng = random.Random(SEED)
    blobs = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) for _ in range(6)]
    text = DEMO.read_bytes()
    for _ in range(4):  # the demo config with a few bytes flipped
        data = bytearray(text)
        for _ in range(3):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        blobs.append(bytes(data))
    return blobs


BAD_YAML = [
    b"data:\n  train_size: [1\n",  # unclosed flow sequence
    b"data:\n\ttrain_size: 3\n",  # a tab as indentation
    b"training: *nowhere\n",  # an undefined alias
    b"a: b: c\n",
    b"- just\n- a list\n",
    b"42\n",
    b"data: 3\n",
    b"\xef\xbb\xbf\x00\x00\n",
    b"training:\n  epochs: !!python/object/apply:os.system ['true']\n",  # safe_load refuses
    b"{unknown_section: {}}\n",
]

BAD_SETS = [
    "training.epochs=-1", "training.epochs=1e309", "training.lr_scale=.nan",
    "training.lr_scale=.inf", "eval.beam_size=65", "eval.beam_size=1000000000000",
    "eval.alpha=11", "eval.batch_size=0", "data.max_source_length=100000",
    "tokenizer.vocab_size=3", "training.epochs=[1", "training.epochs", "=3",
    "training.jit_compile=maybe", "data.corpus=nope", "task=summarize",
    "training.epochs.deeper=1", "data.tokens_per_batch=abc",
    # The model's own checks (TransformerConfig), once made only after the data and the
    # tokenizer, with the run directory already claimed.
    "model.overrides.d_model=30", "model.overrides.dropout=2", "model.overrides.num_heads=0",
    "model.overrides.nope=1", "model.preset=huge", "model.num_classes=-2",
]


@pytest.mark.parametrize("index", range(len(_random_configs()) + len(BAD_YAML)))
def test_random_and_invalid_yaml_configs_are_one_line_errors(index, tmp_path):
    blobs = _random_configs() + BAD_YAML
    config = tmp_path / "config.yaml"
    config.write_bytes(blobs[index])
    before = tree_digest(tmp_path)
    result = train_main(*train_args(tmp_path / "out", config=config)[:4])
    if index == len(_random_configs()) + 9:  # a valid config with only an unknown section
        assert_clean_failure(result, 2, "unknown key(s)")
    else:
        assert_clean_failure(result, 2)
    assert tree_digest(tmp_path) == before  # (3): not even the run directory was made


def test_invalid_yaml_names_the_file_and_line(tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_bytes(b"data:\n  train_size: 3\n  dev_size: [1\n")
    result = train_main("--config", config, "--out", tmp_path / "out")
    assert_clean_failure(result, 2, str(config), "line 4", "invalid YAML")


@pytest.mark.parametrize("assignment", BAD_SETS)
def test_bad_set_values_are_refused_before_any_work(assignment, tmp_path):
    result = train_main("--config", DEMO, "--out", tmp_path / "out", "--set", assignment)
    assert_clean_failure(result, 2)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overwrite", [False, True])
def test_out_that_holds_an_input_is_refused_and_the_input_kept(overwrite, tmp_path):
    """A config kept in the run directory was once taken for an old run's config.yaml: the
    run replaced it (and --overwrite would have deleted it). A data file there is refused the
    same way."""
    out = tmp_path / "run"
    out.mkdir()
    config = out / "config.yaml"
    config.write_text(DEMO.read_text(encoding="utf-8") + "# my notes\n", encoding="utf-8")
    flag = ["--overwrite"] if overwrite else []
    result = train_main(*train_args(out, config=config), *flag)
    assert_clean_failure(result, 2, f"--out {out} holds {config}", "an input of this run")
    assert config.read_text(encoding="utf-8").endswith("# my notes\n")
    assert [p.name for p in out.iterdir()] == ["config.yaml"]
    (out / "pairs.tsv").write_text("one cat\tmột con mèo\n" * 40, encoding="utf-8")
    result = train_main(*train_args(tmp_path / "run", "data.corpus=tsv",
                                    f"data.tsv={out / 'pairs.tsv'}"), *flag)
    assert_clean_failure(result, 2, "pairs.tsv, an input of this run")
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "pairs.tsv"]


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_empty_config_is_refused(text, tmp_path):
    """It would train every default for an hour, not what anyone meant."""
    empty = tmp_path / "empty.yaml"
    empty.write_text(text, encoding="utf-8")
    result = train_main("--config", empty, "--out", tmp_path / "out")
    assert_clean_failure(result, 2, "is empty")
    assert not (tmp_path / "out").exists()


def test_a_different_config_over_a_finished_run_is_refused_untouched(good_run):
    before = tree_digest(good_run)
    result = train_main(*train_args(good_run, "model.overrides.d_ff=48"))
    assert_clean_failure(result, 2, str(good_run), "different", "model.overrides.d_ff",
                         "--overwrite")
    result = train_main(*train_args(good_run))
    assert_clean_failure(result, 2, "holds a finished run", "--overwrite")
    assert tree_digest(good_run) == before


def test_a_different_config_over_an_interrupted_run_is_refused_before_anything(run_copy):
    (run_copy / "metrics.json").unlink()  # as a run killed before it finished
    before = tree_digest(run_copy)
    result = train_main(*train_args(run_copy, "data.train_size=150"))
    assert_clean_failure(result, 2, "data.train_size: 200 -> 150", "--overwrite")
    assert tree_digest(run_copy) == before  # config.yaml and spm.model included


@pytest.mark.parametrize("kind", ["foreign files", "a file", "a legacy run of another config"])
def test_out_that_holds_other_things_is_refused(kind, tmp_path, run_copy):
    out = tmp_path / "target"
    if kind == "foreign files":
        out.mkdir()
        (out / "thesis.tex").write_text("years of work")
        words = ["files this tool did not make", "thesis.tex", "--overwrite"]
    elif kind == "a file":
        out.write_text("not a directory")
        words = ["is a file"]
    else:
        (run_copy / "run.json").unlink()  # a run directory from before run.json
        out = run_copy
        words = ["different", "data.train_size"]
    before = tree_digest(tmp_path)
    result = train_main(*train_args(out, "data.train_size=150"))
    assert_clean_failure(result, 2, *words)
    assert tree_digest(tmp_path) == before


def test_missing_or_empty_data_files_are_named_before_the_run_directory_is_made(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.en", "train.vi", "dev.en", "dev.vi"):
        (data / name).write_text("")
    parallel = ["data.corpus=parallel", f"data.data_dir={data}", "data.train_source=train.en",
                "data.train_target=train.vi", "data.dev_source=dev.en",
                "data.dev_target=dev.vi"]
    result = train_main(*train_args(tmp_path / "out", *parallel, "data.dev_source=nope.en"))
    assert_clean_failure(result, 2, f"data file not found: {data / 'nope.en'}")
    assert not (tmp_path / "out").exists()
    result = train_main(*train_args(tmp_path / "out", *parallel))
    assert_clean_failure(result, 2, str(data / "train.en"), "hold no sentence pairs")


@pytest.mark.slow
def test_overwrite_replaces_the_run_and_leaves_other_files(run_copy, tmp_path):
    (run_copy / "notes.txt").write_text("mine")
    result = run_cli("train", *train_args(run_copy, "model.overrides.d_ff=48"), "--overwrite",
                     env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.code == 0, result.stderr[-3000:]
    assert (run_copy / "notes.txt").read_text() == "mine"
    recorded = json.loads((run_copy / "run.json").read_text())
    assert recorded["fields"]["model"]["overrides"]["d_ff"] == 48
    assert json.loads((run_copy / "model_config.json").read_text())["d_ff"] == 48
    assert_still_good(run_copy, tmp_path)


# --- backups: hostile state.json and damaged weights --------------------------------------

def _backup_of(run: Path) -> tuple[Path, dict]:
    """A backup as a run killed after its last step leaves it, built from the run's files."""
    import keras

    import train.run  # noqa: F401  (registers the model classes)

    (run / "metrics.json").unlink()
    backup = run / "backup"
    backup.mkdir()
    model = keras.models.load_model(run / "model.keras", compile=False)
    model.save_weights(backup / "step_6.weights.h5")
    fingerprint = json.loads((run / "run.json").read_text())["fingerprint"]
    state = {"step": 6, "epoch": 2, "batch": 0, "weights": "step_6.weights.h5",
             "fingerprint": fingerprint}
    (backup / "state.json").write_text(json.dumps(state))
    return backup, state


def _hostile_states(backup: Path, outside: Path) -> list[tuple[str, object]]:
    (backup / "a_directory").mkdir()
    (backup / "link_out.weights.h5").symlink_to(outside)
    return [
        ("absolute path", {"weights": str(outside)}),
        ("dot-dot", {"weights": f"../../{outside.name}"}),
        ("symlink out", {"weights": "link_out.weights.h5"}),
        ("directory", {"weights": "a_directory"}),
        ("empty name", {"weights": ""}),
        ("not text", {"weights": ["step_6.weights.h5"]}),
        ("negative step", {"step": -3}),
        ("step is text", {"step": "six"}),
        ("missing key", {"weights": None}),
        ("random bytes", bytes(random.Random(SEED).randrange(256) for _ in range(64))),
        ("a JSON list", b"[1, 2, 3]"),
    ]


@pytest.mark.parametrize("case", range(11))
def test_hostile_backup_state_is_refused_and_nothing_outside_is_read_or_deleted(
        case, run_copy, tmp_path):
    backup, state = _backup_of(run_copy)
    outside = tmp_path / "outside.weights.h5"
    shutil.copy(backup / "step_6.weights.h5", outside)  # loadable, so only the rule refuses
    name, change = _hostile_states(backup, outside)[case]
    if isinstance(change, bytes):
        (backup / "state.json").write_bytes(change)
    else:
        bad = {**state, **change}
        bad = {k: v for k, v in bad.items() if v is not None}
        (backup / "state.json").write_text(json.dumps(bad))
    before = digest_outside(tmp_path, "run")
    result = train_main(*train_args(run_copy))
    assert_clean_failure(result, 1, str(backup / "state.json"))
    assert digest_outside(tmp_path, "run") == before, name  # the outside file is still there
    assert (backup / "state.json").is_file()  # the backup is kept for the user to look at


@pytest.mark.parametrize("damage", ["random bytes", "truncated", "bit flips", "empty"])
def test_damaged_backup_weights_are_a_clear_error(damage, run_copy, tmp_path):
    backup, _ = _backup_of(run_copy)
    weights = backup / "step_6.weights.h5"
    data = bytearray(weights.read_bytes())
    rng = random.Random(f"{SEED}{damage}")
    if damage == "random bytes":
        data = bytearray(rng.randrange(256) for _ in range(len(data)))
    elif damage == "truncated":
        data = data[: len(data) // 3]
    elif damage == "bit flips":
        for _ in range(64):
            data[rng.randrange(512, len(data))] ^= 0xFF
    else:
        data = bytearray()
    weights.write_bytes(bytes(data))
    before = digest_outside(tmp_path, "run")
    result = train_main(*train_args(run_copy))
    if result.code == 0:  # flips that left the HDF5 file readable resume as usual
        assert damage == "bit flips"
        assert_still_good(run_copy, tmp_path)
        return
    assert_clean_failure(result, 1, str(weights), "corrupt")
    assert digest_outside(tmp_path, "run") == before
    assert weights.is_file()


def test_a_save_deletes_only_a_previous_backup_it_wrote(tmp_path):
    import keras

    from train.callbacks import ResumableBackup

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    backup = ResumableBackup(tmp_path / "backup", 1, "fp")
    backup.set_model(model)
    backup.directory.mkdir()
    precious = tmp_path / "precious.weights.h5"
    precious.write_text("keep")
    (backup.directory / "step_9.weights.h5").symlink_to(precious)
    for named in (str(precious), "../precious.weights.h5", "step_9.weights.h5"):
        backup.state_path.write_text(json.dumps({"weights": named}))
        backup.save(0, 1)
        assert precious.read_text() == "keep", named
    state = json.loads(backup.state_path.read_text())
    assert state["weights"] == "step_0.weights.h5"
    model.optimizer.iterations.assign(1)
    backup.save(0, 2)  # the previous one, written by the backup, goes
    assert not (backup.directory / "step_0.weights.h5").exists()
    assert (backup.directory / "step_1.weights.h5").is_file()


# --- train.evaluate ------------------------------------------------------------------------

def _bad_sources() -> list[tuple[str, bytes, str]]:
    rng = random.Random(SEED)
    return [
        ("random bytes", bytes(rng.randrange(256) for _ in range(300)), "line"),
        ("invalid UTF-8", b"fine\nbad \xff byte\n", "line 2 is not valid UTF-8"),
        ("NUL byte", b"one\ntwo\x00three\n", "line 2 holds a NUL byte"),
        ("lone surrogate", b"\xed\xa0\x80\n", "line 1"),
    ]


@pytest.mark.parametrize("case", range(4))
def test_undecodable_sources_name_the_file_and_line(case, good_run, tmp_path):
    name, data, words = _bad_sources()[case]
    src = tmp_path / "bad.src"
    src.write_bytes(data)
    before, run_before = tree_digest(tmp_path), tree_digest(good_run)
    result = evaluate_main("--run", good_run, "--src", src)
    assert_clean_failure(result, 2, str(src), words)
    assert (tree_digest(tmp_path), tree_digest(good_run)) == (before, run_before)


def test_bom_and_crlf_sources_translate_line_for_line(good_run, tmp_path):
    src, hyp = tmp_path / "bom.src", tmp_path / "bom.hyp"
    src.write_bytes(b"\xef\xbb\xbfshe bought a dog\r\n\r\nseventy-five\n")
    result = evaluate_main("--run", good_run, "--src", src, "--beam", 1, "--hyp", hyp)
    assert result.code == 0, result.stderr[-3000:]
    lines = hyp.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""


def _pipe_with(data: bytes) -> int:
    """The read end of a pipe holding `data`, as a shell's <(...) passes it (/dev/fd/N)."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return read


def test_sources_and_references_from_pipes_fifos_and_dev_stdin(good_run, tmp_path):
    """--src and --ref may be a pipe, a FIFO or /dev/stdin: the translations and the scores
    are those of the same lines from regular files."""
    import threading

    text = b"she bought a dog\nseventy-five\n"
    reference = "cô ấy đã mua một con chó\nbảy mươi lăm\n".encode()
    (tmp_path / "a.src").write_bytes(text)
    (tmp_path / "a.ref").write_bytes(reference)
    files = evaluate_main("--run", good_run, "--src", tmp_path / "a.src", "--ref",
                          tmp_path / "a.ref", "--beam", 1, "--hyp", tmp_path / "files.hyp")
    assert files.code == 0, files.stderr[-3000:]
    bleu = json.loads((good_run / "metrics.json").read_text())["evaluations"]["model.keras"]
    want = (tmp_path / "files.hyp").read_bytes(), bleu["a.src"]["bleu"]
    src_fd, ref_fd = _pipe_with(text), _pipe_with(reference)
    try:
        piped = evaluate_main("--run", good_run, "--src", f"/dev/fd/{src_fd}", "--ref",
                              f"/dev/fd/{ref_fd}", "--beam", 1, "--hyp", tmp_path / "p.hyp")
    finally:
        os.close(src_fd)
        os.close(ref_fd)
    assert piped.code == 0 and "not found" not in piped.stderr, piped.stderr[-3000:]
    scores = json.loads((good_run / "metrics.json").read_text())["evaluations"]["model.keras"]
    assert ((tmp_path / "p.hyp").read_bytes(), scores[str(src_fd)]["bleu"]) == want
    fifo = tmp_path / "fifo.src"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as out:
            out.write(text)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    through_fifo = evaluate_main("--run", good_run, "--src", fifo, "--beam", 1, "--hyp",
                                 tmp_path / "f.hyp")
    writer.join(10)
    assert through_fifo.code == 0, through_fifo.stderr[-3000:]
    assert (tmp_path / "f.hyp").read_bytes() == want[0]
    stdin = run_cli("train.evaluate", "--run", good_run, "--src", "/dev/stdin", "--beam", 1,
                    "--hyp", tmp_path / "s.hyp", stdin=text)
    assert stdin.code == 0, stdin.stderr[-3000:]
    assert (tmp_path / "s.hyp").read_bytes() == want[0]


def visualize_main(*args):
    from train.visualize import main

    return call_main(main, *args)


# --word values that are no word of the sentence or no position in it, and bad --text.
BAD_PICTURES = [
    (["--word", "²"], "--word '²' is not a word"), (["--word", "0"], "--word 0 is not a source"),
    (["--word", "999"], "--word 999 is not a source"), (["--word", "٣"], "--word '٣'"),
    (["--word", ""], "--word is empty"), (["--word", " "], "--word is empty"), (["--word", "\u200b"], "--word"),
    (["--word", "-1"], "--word '-1'"), (["--text", "\u200b"], "--text is empty"),
    (["--text", "dog " * 80], "--text has [0-9]+ tokens .* max_source_length=24"),
    (["--text", " \t "], "--text is empty"), (["--pe-dims", "²"], "argument --pe-dims"),
    (["--dpi", "9" * 5000], "argument --dpi"), (["--beam", "nan"], "argument --beam"),
]


@pytest.mark.parametrize("args, words", BAD_PICTURES)
def test_visualize_bad_words_and_texts_are_named(good_run, tmp_path, args, words):
    import re

    before, run_before = tree_digest(tmp_path), tree_digest(good_run)
    base = ["--run", good_run, "--out", tmp_path / "pics", "--beam", 1]
    if "--text" not in args:
        base += ["--text", "she bought a dog"]
    result = visualize_main(*base, *args)
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert re.search(words, result.stderr), \
        (words, result.stderr[-2000:])
    assert (tree_digest(tmp_path), tree_digest(good_run)) == (before, run_before)


def test_visualize_replaces_only_its_own_files_and_survives_a_failure(good_run, tmp_path):
    """Over its own output with the user's files in it: refused without --overwrite; a
    failing run (a sentence over the model's length) changes nothing; with --overwrite the
    user's files stay byte for byte."""
    out = tmp_path / "v" / "pics"
    first = visualize_main("--run", good_run, "--text", "she bought a dog", "--out", out,
                           "--beam", 1)
    assert first.code == 0, first.stderr[-3000:]
    (out / "my_notes.txt").write_bytes(b"notes\n")
    before = tree_digest(tmp_path)
    for extra, words in (([], "my_notes.txt"), (["--overwrite", "--text", "dog " * 80],
                                                "max_source_length")):
        args = ["--run", good_run, "--out", out, "--beam", 1, *extra]
        if "--text" not in extra:
            args += ["--text", "seventy-five"]
        assert_clean_failure(visualize_main(*args), 2, words)
        assert tree_digest(tmp_path) == before
    again = visualize_main("--run", good_run, "--text", "seventy-five", "--out", out,
                           "--beam", 1, "--overwrite")
    assert again.code == 0, again.stderr[-3000:]
    assert (out / "my_notes.txt").read_bytes() == b"notes\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["pics"]


EXTREME_OPTIONS = [
    ("--beam", "0"), ("--beam", "65"), ("--beam", "500"), ("--beam", "1e9"), ("--beam", "x"),
    ("--alpha", "nan"), ("--alpha", "-1"), ("--alpha", "inf"), ("--alpha", "11"),
    ("--batch-size", "0"), ("--batch-size", "-5"), ("--batch-size", "99999"),
    ("--plot-attention", "-1"), ("--plot-attention", "101"),
]


@pytest.mark.parametrize("flag, value", EXTREME_OPTIONS)
def test_extreme_evaluate_options_are_refused_at_parse_time_with_the_range(
        flag, value, good_run, tmp_path):
    src = tmp_path / "a.src"
    src.write_text("hello\n")
    result = evaluate_main("--run", good_run, "--src", src, flag, value)
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert flag in result.stderr
    if value not in ("x", "1e9"):
        assert "out of range" in result.stderr and ("from" in result.stderr
                                                    or "[" in result.stderr)


def test_evaluate_never_replaces_the_runs_files_or_its_inputs(good_run, tmp_path):
    src, ref = tmp_path / "a.src", tmp_path / "a.ref"
    src.write_text("hello\n")
    ref.write_text("xin chào\n")
    (tmp_path / "existing.hyp").write_text("mine\n")
    before, run_before = tree_digest(tmp_path), tree_digest(good_run)
    cases = [
        (["--hyp", good_run / "test.hyp", "--overwrite"], "inside the run directory"),
        (["--hyp", good_run / "model.keras"], "inside the run directory"),
        (["--hyp", good_run], "is a directory"),
        (["--out", good_run], "is a directory"),
        (["--hyp", tmp_path / "missing" / "x.hyp"], "does not exist"),
        (["--hyp", src, "--overwrite"], "is the --src file"),
        (["--hyp", ref, "--ref", ref, "--overwrite"], "is the --ref file"),
        (["--hyp", tmp_path / "existing.hyp"], "--overwrite"),
        (["--model", "../run/model.keras"], "file name in the run directory"),
        (["--model", "nope.keras", "--hyp", tmp_path / "n.hyp"], "model not found"),
    ]
    for extra, words in cases:
        result = evaluate_main("--run", good_run, "--src", src, *extra)
        assert_clean_failure(result, 2, words)
    assert (tree_digest(tmp_path), tree_digest(good_run)) == (before, run_before)


def test_empty_or_misaligned_sources_with_references_are_refused(good_run, tmp_path):
    empty, src, ref = tmp_path / "empty.src", tmp_path / "a.src", tmp_path / "a.ref"
    empty.write_text("\n\n")
    src.write_text("one\ntwo\n")
    ref.write_text("một\n")
    result = evaluate_main("--run", good_run, "--src", empty, "--ref", empty)
    assert_clean_failure(result, 2, str(empty), "no non-empty line")
    result = evaluate_main("--run", good_run, "--src", src, "--ref", ref)
    assert_clean_failure(result, 2, "has 2 lines", "has 1")
    (tmp_path / "void.src").write_bytes(b"")
    result = evaluate_main("--run", good_run, "--src", tmp_path / "void.src", "--hyp",
                           tmp_path / "void.hyp")
    assert result.code == 0, result.stderr[-3000:]
    assert (tmp_path / "void.hyp").read_bytes() == b""  # zero lines in, zero lines out


def test_default_output_goes_to_the_runs_eval_directory(good_run, run_copy, tmp_path):
    src, ref = tmp_path / "test.src", tmp_path / "test.ref"
    src.write_text("she bought a dog\n")
    ref.write_text("cô ấy đã mua một con chó\n")
    before = tree_digest(run_copy)
    for _ in range(2):  # its own file: replaced on a rerun without --overwrite
        result = evaluate_main("--run", run_copy, "--src", src, "--ref", ref, "--beam", 1)
        assert result.code == 0, result.stderr[-3000:]
    assert (run_copy / "eval" / "model" / "test.src.hyp").is_file()
    after = tree_digest(run_copy)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed == {"metrics.json", "eval", "eval/model", "eval/model/test.src.hyp"}
    metrics = json.loads((run_copy / "metrics.json").read_text())
    assert metrics["bleu"] == json.loads((good_run / "metrics.json").read_text())["bleu"]
    assert "test.src" in metrics["evaluations"]["model.keras"]


def _damaged_models(good: bytes) -> list[bytes]:
    rng = random.Random(SEED)
    flipped = bytearray(good)
    for _ in range(32):
        flipped[rng.randrange(len(flipped))] ^= 0xFF
    return [b"", good[: len(good) // 2], good[:100], bytes(flipped),
            bytes(rng.randrange(256) for _ in range(4096)), b"PK\x03\x04" + b"\x00" * 100]


@pytest.mark.parametrize("case", range(6))
def test_damaged_model_keras_is_called_corrupt_not_missing(case, run_copy, tmp_path):
    model = run_copy / "model.keras"
    model.write_bytes(_damaged_models(model.read_bytes())[case])
    src = tmp_path / "a.src"
    src.write_text("hello\n")
    before = tree_digest(tmp_path)
    result = evaluate_main("--run", run_copy, "--src", src, "--hyp", tmp_path / "a.hyp")
    if result.code == 0:  # flips that missed everything the model reads
        assert case == 3
        return
    assert_clean_failure(result, 2, str(model), "corrupt")
    assert "not found" not in result.stderr
    assert tree_digest(tmp_path) == before
    result = average_main("--run", run_copy, "--last", 1)
    assert_clean_failure(result, 2, str(model), "corrupt")


# --- train.average -------------------------------------------------------------------------

AVERAGE_CASES = [
    (["--last", "0"], 2, "out of range"), (["--last", "1001"], 2, "out of range"),
    (["--last", "abc"], 2, "not an integer"), (["--last", "3"], 1, "fewer than --last 3"),
    (["--out", "model.keras"], 2, "run's own model"), (["--out", "best.keras"], 2, "own model"),
    (["--out", "../x.keras"], 2, "file name"), (["--out", "/tmp/x.keras"], 2, "file name"),
    (["--out", "x.h5"], 2, "ending in .keras"), (["--out", "checkpoints"], 2, "file name"),
    (["--out", "metrics.json"], 2, "ending in .keras"),
]


def test_average_refuses_bad_options_and_leaves_the_run(run_copy, tmp_path):
    before = tree_digest(tmp_path)
    for extra, code, words in AVERAGE_CASES:
        result = average_main("--run", run_copy, *extra)
        assert result.code == code, (extra, result.stderr)
        assert "Traceback" not in result.stderr and words in result.stderr, result.stderr
    assert tree_digest(tmp_path) == before
    result = average_main("--run", run_copy, "--last", 2)
    assert result.code == 0, result.stderr[-3000:]
    written = tree_digest(run_copy)
    result = average_main("--run", run_copy, "--last", 2)  # exists: not replaced
    assert_clean_failure(result, 2, "already exists", "--overwrite")
    assert tree_digest(run_copy) == written
    result = average_main("--run", run_copy, "--last", 1, "--overwrite")
    assert result.code == 0, result.stderr[-3000:]
    assert_still_good(run_copy, tmp_path)


@pytest.mark.parametrize("damage", ["random bytes", "truncated", "empty"])
def test_average_names_a_corrupt_checkpoint(damage, run_copy):
    checkpoint = sorted((run_copy / "checkpoints").glob("epoch_*.npz"))[-1]
    data = checkpoint.read_bytes()
    checkpoint.write_bytes({"random bytes": os.urandom(len(data)),
                            "truncated": data[: len(data) // 2], "empty": b""}[damage])
    before = tree_digest(run_copy)
    result = average_main("--run", run_copy, "--last", 2)
    assert_clean_failure(result, 1, str(checkpoint), "corrupt")
    assert tree_digest(run_copy) == before


# --- kill -9 during python -m train --------------------------------------------------------

KILL_POINTS = ["run.json", "spm.model", "backup/state.json", "checkpoints/epoch_0001.npz",
               "model.keras"]


@pytest.mark.slow
def test_kill_9_at_several_points_then_the_rerun_completes(tmp_path):
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "train", *train_args(out)]
    killed = 0
    for point in KILL_POINTS:
        log = (tmp_path / f"{point.replace('/', '_')}.log").open("wb")
        victim = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 300
        while (not (out / point).exists() and victim.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.01)
        if victim.poll() is None:
            os.kill(victim.pid, signal.SIGKILL)
            killed += 1
        victim.wait()
        if victim.returncode == 0:  # it finished before the point appeared
            break
        log.close()
        assert victim.returncode == -signal.SIGKILL, (point, (tmp_path / f"{point.replace('/', '_')}.log").read_text()[-3000:])
        assert not (out / "metrics.json").exists()
    assert killed >= 3
    result = run_cli("train", *train_args(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.code in (0, 2), result.stderr[-3000:]
    if result.code == 2:  # the last attempt had finished: a rerun is refused, not retrained
        assert "finished run" in result.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 6
    assert not (out / "backup").exists()
    assert_still_good(out, tmp_path)
