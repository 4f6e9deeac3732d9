"""Training over several JAX processes (`training.strategy: multiworker` under
KERAS_BACKEND=jax, `jax.distributed` over gloo on CPUs): two processes on 127.0.0.1 give the
single-device run's losses and translations, each reading its rows of every global batch; only
process 0 writes the run directory; a process started without the other variables is refused
in one line; over a streamed corpus each process reads only its own shards."""

import json
import os
import subprocess
import sys

import keras
import pytest

from tests.cli_probe import ROOT
from tests.stream_runs import command, stream_config
from tests.test_train_distribute import DEMO, TINY, free_port, load_run, start, wait_all

pytestmark = pytest.mark.skipif(keras.backend.backend() != "jax",
                                reason="jax.distributed runs under KERAS_BACKEND=jax")


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    return stream_config(tmp_path_factory.mktemp("stream"))


def jax_process(index: int, port: int, processes: int = 2) -> dict:
    return {"KERAS_BACKEND": "jax", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "JAX_NUM_PROCESSES": str(processes), "JAX_PROCESS_ID": str(index)}


@pytest.mark.slow
def test_two_jax_processes_train_as_one_device(tmp_path):
    port = free_port()
    outs = {"single": tmp_path / "single", "processes": tmp_path / "processes"}
    # A dev score after every epoch: each process decodes with a copy of its own.
    scored = "eval.dev_score_sentences=4"
    processes = {
        "single": start(outs["single"], tmp_path / "single.log", "training.strategy=default",
                        scored, env={"KERAS_BACKEND": "jax"}),
        **{f"process{i}": start(outs["processes"], tmp_path / f"process{i}.log",
                                "training.strategy=multiworker", scored,
                                env=jax_process(i, port))
           for i in range(2)}}
    codes = wait_all(processes, timeout=600)
    for name, code in codes.items():
        assert code == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    single, multi = load_run(outs["single"]), load_run(outs["processes"])
    assert (multi["strategy"], multi["replicas"]) == ("DataParallel", 2)
    assert multi["steps"] == single["steps"] == 9
    # One program over the global batch, each process feeding its rows: the same steps.
    assert multi["epoch_losses"] == pytest.approx(single["epoch_losses"], rel=1e-4)
    assert multi["hypotheses"] == single["hypotheses"]
    assert multi["epoch_dev"]["bleu"] == single["epoch_dev"]["bleu"]
    assert len(multi["epoch_dev"]["bleu"]) == 3
    # Process 0 writes the run; process 1 keeps to its folder and writes no model.
    assert (outs["processes"] / "model.keras").is_file()
    assert not (outs["processes"] / ".worker1" / "model.keras").exists()
    assert "process 0 saves and scores" in (tmp_path / "process1.log").read_text()


def test_a_process_without_its_id_is_refused_in_one_line(tmp_path):
    env = jax_process(0, free_port())
    del env["JAX_PROCESS_ID"]
    done = subprocess.run(
        [sys.executable, "-m", "train", "--config", str(DEMO), "--out", str(tmp_path / "run"),
         *[a for item in TINY for a in ("--set", item)], "--set",
         "training.strategy=multiworker"],
        env={**os.environ, **env}, capture_output=True, text=True,
        cwd=DEMO.parents[2], timeout=300)
    assert done.returncode != 0
    assert "set JAX_PROCESS_ID too" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_two_jax_processes_each_read_their_own_shards(config_file, tmp_path):
    """A streamed corpus of 3 shards: process 0 reads shards 0 and 2, process 1 shard 1, and
    the pass before training, summed over both, counts the pairs a single process counts."""
    port = free_port()
    runs = {"single": ({"KERAS_BACKEND": "jax"}, tmp_path / "single"),
            **{f"process{i}": (jax_process(i, port), tmp_path / "processes") for i in range(2)}}
    processes = {}
    for name, (env, out) in runs.items():
        args, environment = command("jax", config_file, out)
        if name != "single":
            args += ["--set", "training.strategy=multiworker"]
        with (tmp_path / f"{name}.log").open("w") as sink:
            processes[name] = subprocess.Popen(args, cwd=ROOT, env={**environment, **env},
                                               stdout=sink, stderr=subprocess.STDOUT)
    codes = wait_all(processes, timeout=600)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in processes}
    for name, code in codes.items():
        assert code == 0, logs[name][-3000:]
    assert "input pipeline 0 of 2 reads 2 of the 3 shards" in logs["process0"]
    assert "input pipeline 1 of 2 reads 1 of the 3 shards" in logs["process1"]
    single = json.loads((tmp_path / "single" / "metrics.json").read_text())
    multi = json.loads((tmp_path / "processes" / "metrics.json").read_text())
    counted = [key for key in single if "pairs" in key]
    assert counted and all(multi[key] == single[key] for key in counted), counted
    assert multi["steps"] == single["steps"] == 12


def test_processes_started_with_different_configs_stop_in_one_line(tmp_path):
    port = free_port()
    processes = {f"process{i}": start(tmp_path / "run", tmp_path / f"process{i}.log",
                                      "training.strategy=multiworker", f"training.seed={i}",
                                      env=jax_process(i, port)) for i in range(2)}
    codes = wait_all(processes, timeout=300)
    for i in range(2):
        log = (tmp_path / f"process{i}.log").read_text()
        assert codes[f"process{i}"] != 0, log[-2000:]
        assert (f"the processes of training.strategy=multiworker differ in their config "
                f"(this is process {i})") in log
        assert "Traceback" not in log
