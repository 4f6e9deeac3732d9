"""Distributed training gives the single-device loss trajectory: MirroredStrategy over two
logical CPU devices, and MultiWorkerMirroredStrategy with two worker processes on 127.0.0.1.

Each run is a subprocess (logical devices and TF_CONFIG must be set before TensorFlow starts).
Every replica gets its rows of the same global batch and the loss is normalised by the global
token count, so the runs differ only in the order of floating-point sums (the gradient
all-reduce): losses must agree to 1e-4 relative.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "train" / "configs" / "demo.yaml"
TOLERANCE = 1e-4

# A tiny model on a few hundred demo pairs; buckets padded to 6/12/18/24 tokens with a
# 576-token budget give even batch sizes (96/48/32/24), so both replicas get equal halves.
TINY = [
    "data.train_size=300", "data.dev_size=20", "data.test_size=10",
    "data.max_source_length=24", "data.max_target_length=24", "data.tokens_per_batch=576",
    "tokenizer.vocab_size=200", "model.overrides.d_model=32", "model.overrides.d_ff=64",
    "model.overrides.dropout=0.0", "training.steps_per_epoch=3", "training.epochs=3",
    "training.verbose=0", "training.tensorboard=false", "eval.dev_score_sentences=0",
    "eval.beam_size=1", "eval.max_sentences=3", "eval.samples=0",
]

TWO_CPUS = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from train.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def start(out: Path, log: Path, *overrides: str, env=None, two_cpus=False) -> subprocess.Popen:
    """The run in the background, its output into `log` (a pipe left unread could block it)."""
    args = ["--config", str(DEMO), "--out", str(out)]
    for item in (*TINY, *overrides):
        args += ["--set", item]
    command = [sys.executable, "-c", TWO_CPUS] if two_cpus else [sys.executable, "-m", "train"]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
                   "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    with log.open("w") as sink:
        return subprocess.Popen([*command, *args], cwd=ROOT, env=environment, stdout=sink,
                                stderr=subprocess.STDOUT)


def wait_all(processes: dict, timeout: int) -> dict:
    """Each process's exit code; any still running when a wait times out is killed."""
    try:
        for process in processes.values():
            process.wait(timeout=timeout)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
    return {name: process.returncode for name, process in processes.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_same_trajectory(single: dict, other: dict):
    assert other["steps"] == single["steps"] == 9
    assert other["epoch_losses"] == pytest.approx(single["epoch_losses"], rel=TOLERANCE)
    # Not dev_loss: Keras averages the replicas' validation losses weighted by their row
    # counts, which differ when a partial dev batch has an odd size. The decoded sentences
    # show that the trained weights agree.
    assert other["hypotheses"] == single["hypotheses"]


def load_run(out: Path) -> dict:
    metrics = json.loads((out / "metrics.json").read_text())
    metrics["hypotheses"] = (out / "test.hyp").read_text(encoding="utf-8")
    return metrics


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The single-device, mirrored and two-worker runs, started together to share the wait."""
    outs = {name: tmp_path_factory.mktemp(name) for name in ("single", "mirrored", "workers")}
    logs = tmp_path_factory.mktemp("logs")
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = {
        "single": start(outs["single"], logs / "single", "training.strategy=default"),
        "mirrored": start(outs["mirrored"], logs / "mirrored", "training.strategy=mirrored",
                          two_cpus=True),
        # The workers log TensorFlow's errors (level 2, the command's default): a successful
        # run must show none.
        **{f"worker{i}": start(outs["workers"], logs / f"worker{i}",
                               "training.strategy=multiworker", env={
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})})
           for i in range(2)},
    }
    codes = wait_all(processes, timeout=400)
    outputs = {name: (logs / name).read_text() for name in processes}
    return outs, outputs, codes


def completed(runs, *names):
    outs, outputs, codes = runs
    for name in names:
        assert codes[name] == 0, outputs[name][-3000:]
    return outs, outputs


@pytest.mark.slow
def test_mirrored_over_two_cpu_devices_matches_one_device(runs):
    outs, outputs = completed(runs, "single", "mirrored")
    metrics = load_run(outs["mirrored"])
    assert "MirroredStrategy with 2 replica(s)" in outputs["mirrored"]
    assert metrics["strategy"] == "MirroredStrategy"
    assert metrics["replicas"] == 2
    assert_same_trajectory(load_run(outs["single"]), metrics)


@pytest.mark.slow
def test_multiworker_with_two_local_workers_matches_one_device(runs):
    outs, outputs = completed(runs, "single", "worker0", "worker1")
    assert "test: BLEU" in outputs["worker0"]  # the chief evaluates
    metrics = load_run(outs["workers"])
    assert metrics["strategy"] == "MultiWorkerMirroredStrategy"
    assert metrics["replicas"] == 2
    assert_same_trajectory(load_run(outs["single"]), metrics)
    # Only the chief writes the run directory; the other worker keeps to its own folder.
    assert (outs["workers"] / "model.keras").is_file()
    assert not (outs["workers"] / ".worker1" / "model.keras").exists()
    # Worker 1 waits for the chief's scores and exits with it: no worker was missed by
    # TensorFlow's coordination service ("StartAbort UNAVAILABLE ... The tasks have crashed").
    assert "waiting for the chief to save and score the model" in outputs["worker1"]
    for name in ("worker0", "worker1"):
        assert "StartAbort" not in outputs[name], outputs[name][-3000:]
        assert "tasks have crashed" not in outputs[name], outputs[name][-3000:]


# Two workers that meet at train.distribute.end_together, as at train.engine.train's end, and
# leave as train.cli does: the chief after `argv[0]` seconds of "scoring" (then failing, with
# argv[1] "fail"), the other worker slow to get there after it (12 s, past TensorFlow's 5 s
# between heartbeats), and each process's teardown slow (15 s at exit, as TensorFlow's cluster
# context takes on a busy CPU: the chief's coordination service, still up meanwhile, would
# log the worker that had left as crashed).
END_TOGETHER = """
import atexit, sys, time
from keras_transformer.command_line import entry_point
from train.distribute import end_together, is_chief, leave_after_cluster_run, make_strategy

atexit.register(time.sleep, 15)

@entry_point
def main(argv):
    strategy = make_strategy("multiworker")
    chief = is_chief(strategy)
    if chief:
        time.sleep(float(argv[0]))
        if argv[1] == "fail":
            raise ValueError("the chief failed while scoring")
    start = time.monotonic()
    end_together(strategy)
    print(f"waited {time.monotonic() - start:.0f} s", flush=True)
    if not chief:
        time.sleep(12)
    leave_after_cluster_run(0)
    return 0

raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_workers_wait_for_a_long_final_decode_and_a_failed_chief_ends_the_wait(tmp_path):
    """The other workers wait for the chief's scoring at a last collective, however long it
    takes (here past the 10 s after which TensorFlow's coordination service reports a silent
    worker as crashed), and the chief, which hosts the service, exits after them (else a
    worker still exiting logs that it lost the service): no error is logged. A chief that
    fails before the end ends their wait with a one-line error."""
    processes = {}
    for case in ("ok", "fail"):
        cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
        for i in range(2):
            environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT),
                           "CUDA_VISIBLE_DEVICES": "", "TF_CONFIG": json.dumps(
                               {"cluster": cluster, "task": {"type": "worker", "index": i}})}
            with (tmp_path / f"{case}{i}.log").open("w") as sink:
                processes[f"{case}{i}"] = subprocess.Popen(
                    [sys.executable, "-c", END_TOGETHER, "25", case], cwd=ROOT,
                    env=environment, stdout=sink, stderr=subprocess.STDOUT)
    codes = wait_all(processes, timeout=300)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in processes}
    assert codes["ok0"] == codes["ok1"] == 0, logs

    def waited(log: str) -> int:
        return int(log.split("waited ")[1].split()[0])

    assert waited(logs["ok1"]) >= 20, logs["ok1"]  # the chief's 25 s
    assert waited(logs["ok0"]) >= 10, logs["ok0"]  # worker 1's exit, 12 s after
    for name in ("ok0", "ok1"):
        assert "StartAbort" not in logs[name] and "tasks have crashed" not in logs[name], \
            logs[name][-3000:]
    assert codes["fail0"] != 0 and "error: the chief failed while scoring" in logs["fail0"]
    assert codes["fail1"] == 1, logs["fail1"][-3000:]
    assert ("error: worker 1 trained, but the chief stopped before it had saved and scored "
            "the model") in logs["fail1"]
    assert "Traceback" not in logs["fail1"]


@pytest.mark.slow
def test_xla_with_several_cpu_replicas_fails_early(tmp_path):
    """TensorFlow's XLA cannot run a replicated step on CPUs (Mirrored: each replica's step is
    compiled for CPU:0 and reads variables on CPU:1; multi-worker: no CPU collectives under
    XLA): a clear error before any work, where TensorFlow failed at the first step."""
    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    processes = {"mirrored": start(tmp_path / "mirrored", tmp_path / "mirrored.log",
                                   "training.strategy=mirrored", "training.jit_compile=true",
                                   two_cpus=True)}
    for i in range(2):
        processes[f"worker{i}"] = start(
            tmp_path / "workers", tmp_path / f"worker{i}.log", "training.strategy=multiworker",
            "training.jit_compile=true", env={"TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": i}})})
    codes = wait_all(processes, timeout=300)
    for name, kind in (("mirrored", "MirroredStrategy"),
                       ("worker0", "MultiWorkerMirroredStrategy")):
        log = (tmp_path / f"{name}.log").read_text()
        assert codes[name] != 0, log[-2000:]
        assert f"training.jit_compile=true cannot run on {kind} with 2 CPU replicas" in log
        assert "Set training.jit_compile=false" in log
    assert codes["worker1"] != 0
    assert not (tmp_path / "mirrored" / "config.yaml").exists()
