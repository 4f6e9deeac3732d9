"""A mixed_bfloat16 + XLA run that reloads and decodes as it did in training; the evaluation,
attention-plot and checkpoint-averaging commands on that run."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import pytest

from keras_transformer.decoding import SearchSettings
from train.config import DataConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "train" / "configs" / "demo.yaml"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
       "CUDA_VISIBLE_DEVICES": ""}
DATA = dict(train_size=300, dev_size=20, test_size=6, max_source_length=24,
            max_target_length=24, tokens_per_batch=576)
TINY = [*(f"data.{k}={v}" for k, v in DATA.items()),
        "tokenizer.vocab_size=200", "model.overrides.d_model=32", "model.overrides.d_ff=64",
        "training.steps_per_epoch=3", "training.epochs=2", "training.verbose=0",
        "eval.dev_score_sentences=4", "eval.beam_size=2", "eval.samples=0"]


def python(*args, timeout=400):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bf16")
    args = ["-m", "train", "--config", str(DEMO), "--out", str(out)]
    for item in (*TINY, "training.precision=mixed_bfloat16", "training.jit_compile=true"):
        args += ["--set", item]
    result = python(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result.stdout + result.stderr


@pytest.mark.slow
def test_mixed_bfloat16_xla_run_reloads_and_decodes_the_same(bf16_run):
    out, log = bf16_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["precision"] == "mixed_bfloat16"
    assert metrics["jit_compile"] is True
    assert 1 <= metrics["distinct_batch_shapes"] <= 8  # few buckets, so few XLA compilations
    assert "distinct batch shapes" in log
    for name in ("best.keras", "model.keras"):
        assert (out / name).is_file()
    assert (out / "logs").is_dir()  # TensorBoard event files

    import keras_transformer.models.transformer  # noqa: F401  (registers it for load_model)
    from keras_transformer.translator import translate
    from train.data import load_corpus
    from train.tokenizers import load_run_tokenizers

    model = keras.models.load_model(out / "model.keras", compile=False)
    assert model.dtype_policy.name == "mixed_bfloat16"
    source_tok, target_tok = load_run_tokenizers(out)
    config = load_config(DEMO, [f"data.{k}={v}" for k, v in DATA.items()])
    corpus = load_corpus(DataConfig(**{**config.data.__dict__}))
    sources = [s for s in corpus.test.sources
               if len(source_tok.encode([s])[0]) + 1 <= model.config.max_source_length]
    hypotheses = translate(model, source_tok, target_tok, sources,
                           SearchSettings(beam_size=2, alpha=0.6))
    assert hypotheses == (out / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert all(isinstance(h, str) for h in hypotheses)


@pytest.mark.slow
def test_evaluate_plots_attention_and_average_writes_a_model(bf16_run, tmp_path):
    import keras_transformer.models.transformer  # noqa: F401  (registers it for load_model)

    out, _ = bf16_run
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("she bought a dog\n\nseventy-five\n", encoding="utf-8")
    ref.write_text("cô ấy đã mua một con chó\n\nbảy mươi lăm\n", encoding="utf-8")
    result = python("-m", "train.evaluate", "--run", str(out), "--src", str(src), "--ref",
                    str(ref), "--beam", "2", "--plot-attention", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "BLEU" in result.stdout and "nrefs:1|case:mixed" in result.stdout
    assert "chrF" in result.stdout
    assert "skipped 1 empty" in result.stderr
    hypotheses = (out / "eval" / "model" / "src.txt.hyp").read_text(
        encoding="utf-8").splitlines()
    assert len(hypotheses) == 3 and hypotheses[1] == ""  # line-aligned with the source
    assert hypotheses[0] and hypotheses[2]
    scores = json.loads((out / "metrics.json").read_text())["evaluations"]["model.keras"][
        "src.txt"]
    assert scores["sentences"] == 2 and 0.0 <= scores["bleu"] <= 100.0
    plots = sorted((out / "eval" / "model" / "attention").glob("*.png"))
    # Named by --src line: the empty line 2 is skipped.
    assert [p.name for p in plots] == ["attention_001.png", "attention_003.png"]
    assert plots[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    result = python("-m", "train.average", "--run", str(out), "--last", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    averaged = keras.models.load_model(out / "average.keras", compile=False)
    last = keras.models.load_model(out / "model.keras", compile=False)
    assert len(averaged.get_weights()) == len(last.get_weights())
    result = python("-m", "train.average", "--run", str(out), "--last", "9")
    assert result.returncode == 1 and "fewer than --last 9" in result.stderr
    corrupt = tmp_path / "corrupt"
    shutil.copytree(out, corrupt)
    last_checkpoint = sorted((corrupt / "checkpoints").glob("epoch_*.npz"))[-1]
    last_checkpoint.write_bytes(b"not a zip file")
    result = python("-m", "train.average", "--run", str(corrupt), "--last", "2")
    assert result.returncode == 1
    assert f"checkpoint {last_checkpoint} is unreadable or corrupt" in result.stderr

    result = python("-m", "train.evaluate", "--run", str(out), "--src", str(tmp_path / "no"))
    assert result.returncode == 2 and "file not found" in result.stderr
    result = python("-m", "train.evaluate", "--run", str(out), "--src", str(src), "--beam", "0")
    assert result.returncode == 2
    assert "--beam: 0 is out of range: give an integer from 1 to 64" in result.stderr


def test_mixed_float16_gets_a_loss_scale_optimizer():
    from train.engine import make_optimizer

    config = load_config(DEMO, ["training.precision=mixed_float16"])
    assert isinstance(make_optimizer(config, 32), keras.optimizers.LossScaleOptimizer)
    config = load_config(DEMO, ["training.precision=mixed_bfloat16"])
    assert not isinstance(make_optimizer(config, 32), keras.optimizers.LossScaleOptimizer)


@pytest.mark.slow
def test_evaluate_reads_lines_as_every_reader_does(bf16_run, tmp_path):
    from keras_transformer.text.lines import read_lines

    out, _ = bf16_run
    src, ref = tmp_path / "bom.txt", tmp_path / "bom_ref.txt"
    # A BOM, a CRLF ending and a lone CR inside the second line: two lines.
    src.write_bytes("\ufeffshe bought a dog\r\nseventy-five\rtwo\n".encode())
    hyp = tmp_path / "bom.hyp"
    result = python("-m", "train.evaluate", "--run", str(out), "--src", str(src), "--beam", "1",
                    "--hyp", str(hyp))
    assert result.returncode == 0, result.stderr[-3000:]
    hypotheses = read_lines(hyp)
    assert len(hypotheses) == len(read_lines(src)) == 2
    # The translations as references, behind a BOM: identical text scores chrF 100.
    ref.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(hypotheses).encode() + b"\r\n")
    result = python("-m", "train.evaluate", "--run", str(out), "--src", str(src), "--ref",
                    str(ref), "--beam", "1", "--hyp", str(hyp), "--overwrite")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "chrF 100.00" in result.stdout
    src.write_bytes(b"fine\nbad \xff byte\n")
    result = python("-m", "train.evaluate", "--run", str(out), "--src", str(src))
    assert result.returncode == 2 and f"{src} line 2 is not valid UTF-8" in result.stderr


# precision: auto

def _flags(**present):
    from keras_transformer.cpu import MATRIX_FLAGS

    return {name: present.get(name, False) for name in MATRIX_FLAGS}


@pytest.mark.parametrize("flags, capability, jit, expected", [
    (_flags(avx512f=True, avx512_bf16=True), None, False,
     [("float32", True), ("mixed_bfloat16", False)]),
    (_flags(avx2=True), None, False, [("float32", False)]),
    (_flags(amx_tile=True, amx_bf16=True, avx512_bf16=True), None, True,
     [("mixed_bfloat16", False)]),
    (_flags(), (8, 0), True, [("mixed_bfloat16", True)]),
    (_flags(amx_bf16=True), (7, 5), True, [("mixed_float16", True)]),
], ids=["zen-avx512-bf16-measured", "avx2", "amx", "ampere-gpu", "turing-gpu"])
def test_auto_precision_follows_the_matrix_units(flags, capability, jit, expected):
    from train.distribute import choose_precision

    assert choose_precision(flags, capability, jit)[0] == expected


def test_auto_precision_reads_this_machine_and_fixed_settings_pass_through(caplog):
    import logging

    from keras_transformer.cpu import cpu_flags, cpu_model
    from train.distribute import choose_precision, resolve_precision

    assert resolve_precision("mixed_bfloat16", True) == [("mixed_bfloat16", True)]
    with caplog.at_level(logging.INFO, logger="train"):
        chosen = resolve_precision("auto", True)
    assert chosen == choose_precision(cpu_flags(), None, True)[0]
    assert cpu_model() in caplog.text
    with pytest.raises(ValueError, match="training.precision must be one of"):
        resolve_precision("bfloat16", True)


def test_cpu_flags_read_the_first_processor(tmp_path):
    from keras_transformer.cpu import cpu_flags

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16 amx_tile\n\n"
                    "processor\t: 1\nflags\t\t: fpu avx512f\n")
    flags = cpu_flags(str(info))
    assert flags["amx_bf16"] and flags["avx2"] and not flags["avx512f"]


def test_the_probe_picks_the_setting_whose_steps_are_fastest():
    """Two fake models whose train steps take known times: the probe times them interleaved
    and returns the faster one's setting, whichever comes first."""
    import time

    import numpy as np

    from train.precision_probe import fastest_setting

    class Fake:
        def __init__(self, seconds):
            self.seconds, self.steps = seconds, 0

        def train_on_batch(self, x, y):
            self.steps += 1
            time.sleep(self.seconds)

    batch = (np.zeros((2, 3), np.int32), np.zeros((2, 4), np.int32))
    for slow_first in (True, False):
        made = []

        def build_and_compile(jit, made=made, slow_first=slow_first):
            made.append(Fake(0.03 if (len(made) == 0) == slow_first else 0.005))
            return made[-1]

        candidates = [("float32", True), ("mixed_bfloat16", False)]
        chosen = fastest_setting(build_and_compile, candidates, batch, rounds=2)
        assert chosen == candidates[1 if slow_first else 0]
        assert [m.steps for m in made] == [4, 4]  # 2 warm-up + 2 timed each
    assert keras.mixed_precision.global_policy().name in ("float32", "mixed_bfloat16")
    keras.mixed_precision.set_global_policy("float32")
