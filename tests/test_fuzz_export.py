"""Fault and fuzz tests of `python -m export`, `export.parity` and `export.translate`.

Every case runs the command as a user would (tests/cli_probe.py) against generated bad input
(fixed seed) and asserts: (1) no traceback, (2) the documented exit code, (3) no file outside
the command's target changed (a digest of the whole temporary tree before and after), and
(4) the previous good export still loads and translates as before. `python -m export` is also
killed (SIGKILL) at several points while it replaces a good export.

A tiny untrained model and its tokenizer are made in-process once for the module and exported
once; every hostile export is a copy of that one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.decoding import SearchSettings
from tests.cli_probe import ROOT, Result, assert_clean_failure, run_cli, tree_digest

pytestmark = pytest.mark.slow  # the module's fixture exports a model

SEED = 20240607
SENTENCES = ["one red cat", "two big dogs", "", "I saw three small cats"]
COUNTS: Counter = Counter()  # cases tried / handled / with nothing lost, per command


def _flip_bits(data: bytes, rng: np.random.Generator, count: int = 8) -> bytes:
    out = bytearray(data)
    for position in rng.integers(0, len(out), count):
        out[position] ^= 1 << int(rng.integers(0, 8))
    return bytes(out)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """{root, run, good, baseline}: a tiny run, its export (every format) and the export's
    greedy translations of SENTENCES."""
    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.transformer import Transformer
    from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

    root = tmp_path_factory.mktemp("fuzz_export")
    run = root / "run"
    run.mkdir()
    words = ["red", "blue", "cat", "dog", "big", "small", "one", "two", "three", "I", "saw"]
    rng = np.random.default_rng(SEED)
    texts = [" ".join(rng.choice(words, size=rng.integers(2, 7))) for _ in range(300)]
    model_path = train_sentencepiece(texts, root / "spm", 60)
    shutil.copyfile(model_path, run / "spm.model")
    vocab = SentencePieceTokenizer(run / "spm.model").vocab_size
    model = Transformer(TransformerConfig.preset(
        "tiny", source_vocab_size=vocab, target_vocab_size=vocab, d_model=32, num_heads=4,
        d_ff=64, max_source_length=16, max_target_length=12, dropout=0.0), dtype="float32")
    model.build()
    model.set_weights([w + rng.normal(scale=0.2, size=w.shape).astype(np.float32)
                       for w in model.get_weights()])
    model.save(run / "model.keras")
    good = root / "good"
    done = run_cli("export", "--run", run, "--format", "all", "--out", good)
    assert done.code == 0, done.stderr[-3000:]
    return {"root": root, "run": run, "good": good, "baseline": _translate(good)}


def _translate(export_dir: Path, runtime: str = "onnx") -> list[str]:
    from export.kinds import open_export

    return open_export(export_dir, runtime).translate(SENTENCES, SearchSettings(beam_size=1))


def _case(world, command: str, run, expect: int, *words: str, target: Path | None = None,
          usage: bool = False):
    """Run one case; assert (1) no traceback, (2) exit `expect` with an error line naming
    `words` (when it fails; argparse's own `prog: error:` line when `usage`), (3) nothing
    outside `target` changed. Returns the result."""
    COUNTS[f"{command} tried"] += 1
    before = tree_digest(world["root"])
    result: Result = run()
    if usage:
        assert result.code == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
        assert ": error: argument" in result.stderr, result.stderr[-3000:]
    elif expect == 0:
        assert result.code == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
    else:
        assert_clean_failure(result, expect, *words)
    COUNTS[f"{command} handled"] += 1
    after = tree_digest(world["root"])
    if target is not None:
        prefix = target.relative_to(world["root"]).as_posix()
        # The staging directories of `target`'s own killed commands are the command's to remove.
        leftovers = (target.parent.relative_to(world["root"]) / f".{target.name}.").as_posix()

        def keep(key):
            return (key != prefix and not key.startswith(prefix + "/")
                    and not (key.startswith(leftovers) and ".staging" in key))
        before = {k: v for k, v in before.items() if keep(k)}
        after = {k: v for k, v in after.items() if keep(k)}
    assert after == before, sorted(set(after.items()) ^ set(before.items()))[:10]
    COUNTS[f"{command} nothing lost"] += 1
    return result


def _hostile_copy(world, name: str) -> Path:
    copy = world["root"] / "hostile" / name
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(world["good"], copy, symlinks=True)
    return copy


def _edit_manifest(export_dir: Path, edit) -> None:
    path = export_dir / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _translate_cli(export_dir, *args, stdin=b"one red cat\n"):
    return lambda: run_cli("export.translate", "--export", export_dir, *args, stdin=stdin)


# ---- damaged model files: random bytes, truncated, bit-flipped ----------------------------

DAMAGE = [(name, how) for name in ("encoder.onnx", "decoder_step.onnx", "model.tflite",
                                   "spm.model", "savedmodel/saved_model.pb")
          for how in ("random", "truncated", "flipped")]


@pytest.mark.parametrize("name, how", DAMAGE, ids=[f"{n}-{h}" for n, h in DAMAGE])
def test_damaged_export_file_is_named(world, name, how):
    rng = np.random.default_rng([SEED, DAMAGE.index((name, how))])
    export_dir = _hostile_copy(world, "damaged")
    path = export_dir / name
    data = path.read_bytes()
    path.write_bytes({"random": lambda: rng.bytes(len(data)),
                      "truncated": lambda: data[:int(rng.integers(1, len(data)))],
                      "flipped": lambda: _flip_bits(data, rng)}[how]())
    runtime = {"model.tflite": "tflite", "savedmodel/saved_model.pb": "savedmodel"}.get(name,
                                                                                        "onnx")
    _case(world, "export.translate", _translate_cli(export_dir, "--runtime", runtime), 2,
          name.split("/")[-1], "corrupt")


@pytest.mark.parametrize("how", ["random", "truncated", "flipped", "list", "empty", "nul"])
def test_damaged_manifest_is_refused(world, how):
    """A manifest.json that is damaged. A bit flip may leave valid JSON that changes a value;
    then the command must still fail cleanly or, if the change is harmless, translate."""
    rng = np.random.default_rng([SEED, 99, len(how)])
    export_dir = _hostile_copy(world, "manifest")
    path = export_dir / "manifest.json"
    data = path.read_bytes()
    path.write_bytes({"random": lambda: rng.bytes(len(data)),
                      "truncated": lambda: data[:len(data) // 3],
                      "flipped": lambda: _flip_bits(data, rng, 3),
                      "list": lambda: b"[1, 2, 3]", "empty": lambda: b"",
                      "nul": lambda: data.replace(b"\"", b"\x00", 5)}[how]())
    result = run_cli("export.translate", "--export", export_dir, stdin=b"one red cat\n")
    expect = 0 if how == "flipped" and result.code == 0 else 2
    _case(world, "export.translate", lambda: result, expect, "manifest.json")


# ---- hostile manifests: paths that leave the export, directories, missing keys -------------

def _outside_copy(world, name: str) -> Path:
    """A copy of the good encoder outside the export: a manifest that points at it carries
    the right sha256 (the same file supplies both), so only the path rule can refuse it."""
    outside = world["root"] / "outside"
    outside.mkdir(exist_ok=True)
    shutil.copyfile(world["good"] / "encoder.onnx", outside / name)
    return outside / name


def _repoint(data: dict, new: str) -> None:
    data["files"][new] = data["files"].pop("encoder.onnx")
    data["formats"]["onnx"]["variants"]["float32"]["encoder"] = new


def _absolute(world, export_dir, data):
    _repoint(data, str(_outside_copy(world, "abs.onnx")))


def _dotdot(world, export_dir, data):
    _outside_copy(world, "dotdot.onnx")
    _repoint(data, "../../outside/dotdot.onnx")


def _symlink_out(world, export_dir, data):
    (export_dir / "encoder.onnx").unlink()
    (export_dir / "encoder.onnx").symlink_to(_outside_copy(world, "linked.onnx"))


def _directory(world, export_dir, data):
    (export_dir / "sub").mkdir()
    _repoint(data, "sub")


def _savedmodel_dotdot(world, export_dir, data):
    data["formats"]["savedmodel"]["variants"]["float32"]["model"] = "../good/savedmodel"


def _tokenizer_outside(world, export_dir, data):
    outside = world["root"] / "outside"
    outside.mkdir(exist_ok=True)
    shutil.copyfile(world["run"] / "spm.model", outside / "spm.model")
    data["files"][str(outside / "spm.model")] = data["files"]["spm.model"]
    data["tokenizer"]["source"] = str(outside / "spm.model")


HOSTILE = {"absolute": (_absolute, "onnx", "absolute path"),
           "dotdot": (_dotdot, "onnx", "'..'"),
           "symlink-out": (_symlink_out, "onnx", "symlink"),
           "directory": (_directory, "onnx", "is a directory"),
           "savedmodel-dotdot": (_savedmodel_dotdot, "onnx", "'..'"),
           "tokenizer-absolute": (_tokenizer_outside, "onnx", "absolute path")}


@pytest.mark.parametrize("command", ["export.translate", "export.parity"])
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_manifest_paths_stay_inside_the_export(world, kind, command):
    edit, runtime, words = HOSTILE[kind]
    export_dir = _hostile_copy(world, f"hostile-{kind}")
    _edit_manifest(export_dir, lambda data: edit(world, export_dir, data))
    if command == "export.translate":
        run = _translate_cli(export_dir, "--runtime", runtime)
    else:
        run = lambda: run_cli("export.parity", "--export", export_dir, "--run", world["run"],  # noqa: E731
                              "--sentences", "2", "--beam-sentences", "1",
                              "--bleu-sentences", "2")
    if kind == "savedmodel-dotdot" and command == "export.translate":
        run = _translate_cli(export_dir, "--runtime", "savedmodel")
    _case(world, command, run, 2, words)


MISSING = [("files",), ("formats",), ("tokenizer",), ("special_ids",), ("special_ids", "eos"),
           ("model",), ("model", "num_heads"), ("vocab",), ("max_target_length",),
           ("formats", "onnx", "variants"), ("files", "encoder.onnx", "sha256")]
WRONG = [(("files",), []), (("special_ids", "eos"), "3"), (("max_target_length",), 10 ** 12),
         (("model", "d_model"), -32), (("model", "num_heads"), 5), (("special_ids", "pad"), 10 ** 6),
         (("tokenizer", "source"), 7), (("formats", "onnx", "variants", "float32"), {}),
         (("files", "encoder.onnx", "bytes"), True)]


def _walk(data, keys):
    for key in keys[:-1]:
        data = data[key]
    return data


@pytest.mark.parametrize("keys", MISSING, ids=[".".join(k) for k in MISSING])
def test_manifest_missing_key_is_named(world, keys):
    export_dir = _hostile_copy(world, "missing-key")
    _edit_manifest(export_dir, lambda data: _walk(data, keys).pop(keys[-1]))
    _case(world, "export.translate", _translate_cli(export_dir), 2,
          repr(".".join(keys)) if keys[-1] != "variants" else "variants", "missing")


@pytest.mark.parametrize("keys, value", WRONG, ids=[".".join(k) for k, _ in WRONG])
def test_manifest_wrong_value_is_named(world, keys, value):
    export_dir = _hostile_copy(world, "wrong-value")
    _edit_manifest(export_dir, lambda data: _walk(data, keys).__setitem__(keys[-1], value))
    named = ".".join(keys[:2]) if keys[0] != "files" else "files"
    _case(world, "export.translate", _translate_cli(export_dir), 2, named)


# ---- export.translate: options, stdin, output -----------------------------------------------

EXTREME = [["--beam", "0"], ["--beam", "65"], ["--beam", "500"], ["--beam", "-1"],
           ["--beam", "1e3"], ["--alpha", "nan"], ["--alpha", "inf"], ["--alpha", "-0.1"],
           ["--alpha", "11"], ["--batch-size", "0"], ["--batch-size", "4097"],
           ["--batch-size", str(10 ** 20)], ["--batch-size", "4096", "--beam", "64"],
           ["--variant", "int4"], ["--runtime", "pytorch"]]


@pytest.mark.parametrize("args", EXTREME, ids=[" ".join(a) for a in EXTREME])
def test_translate_options_are_bounded_at_parse_time(args, capsys):
    from export import translate

    COUNTS["export.translate tried"] += 1
    with pytest.raises(SystemExit) as exit_info:
        translate.parse_args(["--export", "unused", *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    if args[0] in ("--beam", "--alpha", "--batch-size"):
        assert any(w in err for w in ("range", "rows per search", "not an integer")), err
    COUNTS["export.translate handled"] += 1
    COUNTS["export.translate nothing lost"] += 1  # nothing was opened


def test_help_states_the_bounds(capsys):
    from export import parity, translate

    with pytest.raises(SystemExit):
        translate.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "1 (greedy) to 64" in text and "in [0, 10]" in text and "1 to 4096" in text
    with pytest.raises(SystemExit):
        parity.main(["--help"])
    assert "1 to 5000" in " ".join(capsys.readouterr().out.split())


STDIN = {"random-bytes": lambda rng: rng.bytes(300),
         "nul": lambda rng: b"one\x00red cat\n\x00\n",
         "bom": lambda rng: b"\xef\xbb\xbfone red cat\r\ntwo dogs\n",
         "lone-cr": lambda rng: b"one red\rcat\n",
         "empty": lambda rng: b"",
         "long-line": lambda rng: b"cat " * 5000 + b"\n",
         "latin-1": lambda rng: "un chat élevé\n".encode("latin-1")}


@pytest.mark.parametrize("kind", list(STDIN))
def test_translate_stdin_keeps_one_line_per_line(world, kind):
    raw = STDIN[kind](np.random.default_rng([SEED, len(kind)]))
    result = _case(world, "export.translate",
                   _translate_cli(world["good"], "--beam", "2", stdin=raw), 0)
    from keras_transformer.text.lines import decode_lines

    assert len(result.stdout.splitlines()) == len(decode_lines(raw, errors="replace"))
    if kind in ("random-bytes", "nul", "latin-1"):
        assert "stdin line" in result.stderr  # the warning names the line


def test_translate_output_is_checked_before_and_written_after(world, tmp_path):
    root, good = world["root"], world["good"]
    missing = root / "no-such-dir" / "out.txt"
    _case(world, "export.translate", _translate_cli(good, "-o", missing), 2,
          "does not exist")
    _case(world, "export.translate", _translate_cli(good, "-o", root), 2, "is a directory")
    _case(world, "export.translate", _translate_cli(good, "-o", good / "hyp.txt"), 2,
          "inside the export")
    source = root / "input.txt"
    source.write_text("one red cat\n")
    _case(world, "export.translate",
          lambda: run_cli("export.translate", "--export", good, source, "-o", source), 2,
          "is the input file")
    out = root / "translations" / "out.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text("previous\n")
    _case(world, "export.translate", _translate_cli(good, "-o", out, "--beam", "1",
                                                    stdin="\n".join(SENTENCES).encode() + b"\n"),
          0, target=out.parent)
    assert out.read_text().splitlines() == world["baseline"]
    assert [p.name for p in out.parent.iterdir()] == ["out.txt"]  # no temporary left
    _case(world, "export.translate", _translate_cli(good, "--run", root / "nowhere",
                                                    "--runtime", "keras"), 2, "model.keras")
    # Beside another runtime --run was once ignored without a word.
    _case(world, "export.translate", _translate_cli(good, "--run", world["run"],
                                                    "--runtime", "tflite"), 2,
          "--run is read by --runtime keras only", "runs tflite")


@pytest.mark.parametrize("runtime", ["savedmodel", "keras"])
def test_tf_runtime_without_tensorflow_says_what_to_install(world, runtime):
    def run():
        return run_cli("export.translate", "--export", world["good"], "--runtime", runtime,
                       stdin=b"one cat\n", timeout=300, without_tensorflow=True)

    _case(world, "export.translate", run, 2, "needs TensorFlow", "pip install tensorflow")


# ---- export.parity ------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--sentences", "0"], ["--sentences", "100000"],
                                  ["--beam-sentences", "-1"], ["--bleu-sentences", "x"]])
def test_parity_options_are_bounded(world, args):
    result = _case(world, "export.parity",
                   lambda: run_cli("export.parity", "--export", world["good"], *args), 2,
                   usage=True)
    assert f"argument {args[0]}" in result.stderr
    assert "from 1 to" in result.stderr or "not an integer" in result.stderr


def test_parity_of_a_missing_or_foreign_directory(world):
    _case(world, "export.parity", lambda: run_cli("export.parity", "--export",
                                                  world["root"] / "absent"), 2, "not found")
    _case(world, "export.parity", lambda: run_cli("export.parity", "--export", world["run"]),
          2, "manifest.json is missing")


# ---- python -m export: the output directory and the run are checked first -----------------

def _export_cli(run, out, *args):
    return lambda: run_cli("export", "--run", run, "--format", "onnx", "--out", out, *args)


def test_export_refuses_outputs_it_must_not_replace(world):
    root, run = world["root"], world["run"]
    a_file = root / "a-file"
    a_file.write_text("mine\n")
    _case(world, "export", _export_cli(run, a_file), 2, "is a file")
    _case(world, "export", _export_cli(run, run), 2, "is the training run")
    _case(world, "export", _export_cli(run, root), 2, "contains the training run")
    foreign = root / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me\n")
    _case(world, "export", _export_cli(run, foreign), 2, "notes.txt", "--overwrite")
    fake = root / "fake-export"
    fake.mkdir()
    (fake / "manifest.json").write_text('{"manifest_version": 3, "formats": {}, "files": {}}')
    (fake / "thesis.pdf").write_text("not listed\n")
    _case(world, "export", _export_cli(run, fake), 2, "thesis.pdf", "--overwrite")
    # With --overwrite the export is made there and replaces only what an export made: the
    # user's file stays; an export over that one (without --overwrite) is refused again.
    _case(world, "export", _export_cli(run, foreign, "--overwrite"), 0, target=foreign)
    assert (foreign / "notes.txt").read_text() == "keep me\n"
    assert (foreign / "manifest.json").is_file() and _translate(foreign) == world["baseline"]
    _case(world, "export", _export_cli(run, foreign), 2, "notes.txt", "--overwrite")
    # Inside the run, a directory of the run's own files is not replaced even with
    # --overwrite (it once replaced the run's checkpoints with an export).
    def with_checkpoints(copy):
        (copy / "checkpoints").mkdir(exist_ok=True)
        (copy / "checkpoints" / "epoch_1.npz").write_bytes(b"weights")

    copy = _broken_run(world, "with-checkpoints", with_checkpoints)
    _case(world, "export", _export_cli(copy, copy / "checkpoints", "--overwrite"), 2,
          "a directory of the training run", "does not replace")
    assert (copy / "checkpoints" / "epoch_1.npz").read_bytes() == b"weights"


def _broken_run(world, name: str, edit) -> Path:
    run = world["root"] / "runs" / name
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(world["run"], run)
    edit(run)
    return run


def _truncate(path: Path, keep: float = 0.5):
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


BROKEN_RUNS = {
    "no-model": (lambda run: (run / "model.keras").unlink(), "model.keras is missing"),
    "truncated-model": (lambda run: _truncate(run / "model.keras"), "could not be loaded"),
    "random-model": (lambda run: (run / "model.keras").write_bytes(
        np.random.default_rng(SEED).bytes(4096)), "could not be loaded"),
    "no-tokenizer": (lambda run: (run / "spm.model").unlink(), "neither spm.model"),
    "random-tokenizer": (lambda run: (run / "spm.model").write_bytes(
        np.random.default_rng(SEED).bytes(2048)), "not a valid SentencePiece model"),
    "bad-model-config": (lambda run: (run / "model_config.json").write_text("{nope"),
                         "not a valid model config"),
    "missing-run": (lambda run: shutil.rmtree(run), "training run not found"),
    # Exported with the defaults instead, it would decode unlike the run, silently.
    "unreadable-config": (lambda run: (run / "config.yaml").write_text("task: [unclosed\n"),
                          "config.yaml is unreadable"),
}


@pytest.mark.parametrize("kind", list(BROKEN_RUNS))
def test_broken_run_leaves_the_previous_export(world, kind):
    """Over a good export (a copy of it, its target): the run is checked before anything is
    written, so the failure leaves the export byte for byte."""
    edit, words = BROKEN_RUNS[kind]
    run = _broken_run(world, kind, edit)
    target = _hostile_copy(world, "previous")
    before = tree_digest(target)
    _case(world, "export", _export_cli(run, target), 2, words, target=target)
    assert tree_digest(target) == before
    assert _translate(target) == world["baseline"]


# ---- python -m export killed (SIGKILL) while it replaces a good export ---------------------

def _kill_export_at(world, target: Path, when) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen(
        [sys.executable, "-m", "export", "--run", str(world["run"]), "--format", "all",
         "--out", str(target)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not when(target, process.pid) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()


def _staging(target: Path, pid: int | str = "*") -> list[Path]:
    return list(target.parent.glob(f".{target.name}.{pid}.*.staging"))


def _after(seconds: float):
    start = []

    def ready(target, pid):
        start[:] = start or [time.monotonic()]
        return time.monotonic() - start[0] >= seconds
    return ready


def _staged(file: str, delay: float = 0.0):
    """Once the staging directory of process `pid` holds `file` (and `delay` seconds later)."""
    seen = []

    def ready(target, pid):
        if not seen and any((s / file).exists() for s in _staging(target, pid)):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= delay
    return ready


KILL_POINTS = {"0.5s": _after(0.5), "3s": _after(3.0), "staging-made": _staged("."),
               "tokenizer-copied": _staged("spm.model"), "savedmodel-written":
               _staged("savedmodel/saved_model.pb"), "onnx-written": _staged("encoder.onnx"),
               "manifest-written": _staged("manifest.json")}


def test_export_killed_at_any_point_leaves_the_previous_export(world):
    target = _hostile_copy(world, "killed")
    before = tree_digest(target)  # the previous export: replaced whole or not at all
    for name, when in KILL_POINTS.items():
        COUNTS["export tried"] += 1
        _kill_export_at(world, target, when)
        COUNTS["export handled"] += 1  # killed: no exit code to check, only the files
        after = tree_digest(target)
        if after != before:
            # Killed only after the swap: then the new export must be whole, and it is the
            # previous export of the next kill.
            from export.common import Manifest

            manifest = Manifest(target)
            manifest.verify()
            files = {k for k, v in after.items() if v != "dir"}
            assert files == {*manifest["files"], "manifest.json"}, name
            before = after
        assert _translate(target) == world["baseline"], name
        COUNTS["export nothing lost"] += 1
    # A rerun completes over the leftovers of the killed ones, and removes them. The last kill
    # point may fall after the swap, so one more kill leaves a staging directory for certain.
    _kill_export_at(world, target, _staged("."))
    assert _staging(target)
    result = _case(world, "export", lambda: run_cli("export", "--run", world["run"],
                                                    "--format", "onnx", "--out", target), 0,
                   target=target)
    assert "exported" in result.stdout and not _staging(target)
    assert not list(target.parent.glob(f".{target.name}.previous"))
    assert _translate(target) == world["baseline"]
    assert sorted(json.loads((target / "manifest.json").read_text())["formats"]) == ["onnx"]


def test_previous_good_export_is_unchanged_and_translates_the_same(world):
    """Runs after the cases above: the good export was never touched."""
    assert _translate(world["good"]) == world["baseline"]
    assert _translate(world["good"], "tflite") == _translate(world["good"], "tflite")
    manifest = json.loads((world["good"] / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        assert _sha(world["good"] / name) == entry["sha256"], name
    tried = sum(v for k, v in COUNTS.items() if k.endswith(" tried"))
    print("\nfault and fuzz cases:", dict(sorted(COUNTS.items())), "total tried:", tried)


def test_counts_are_consistent():
    for key, tried in COUNTS.items():
        if key.endswith(" tried"):
            command = key[:-len(" tried")]
            assert COUNTS[f"{command} handled"] == tried
            assert COUNTS[f"{command} nothing lost"] == tried
