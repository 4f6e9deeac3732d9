"""Each worker of a MultiWorkerMirroredStrategy reads only its part of a streamed corpus: two
worker processes on 127.0.0.1 (TF_CONFIG) read their parts through train.distribute.distribute
and record every pair they were given. Their parts are disjoint and together exactly the pairs
of one single-worker pass: whole shards apiece with at least as many shards as workers, every
other line of the shards with fewer. Workers started with different configs stop in one line.
"""

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from keras_transformer.text.demo_corpus import demo_splits
from keras_transformer.text.pipeline import make_tsv_stream_dataset
from keras_transformer.text.shards import compression_of
from keras_transformer.text.tokenizer import PAD_ID, SentencePieceTokenizer, train_sentencepiece
from tests.cli_probe import ROOT
from tests.test_train_distribute import free_port, start, wait_all

pytestmark = pytest.mark.tf_only
LIMITS = dict(max_source_length=24, max_target_length=24, tokens_per_batch=240,
              shuffle_buffer=64, seed=5)

# A worker: the strategy from TF_CONFIG, then one pass over its part of each case's shards,
# every (source, target_out) its replica was given written to a JSON file.
WORKER = """
import json, sys
from pathlib import Path
import numpy as np
from train.distribute import distribute, make_strategy
from keras_transformer.text.pipeline import make_tsv_stream_dataset
from keras_transformer.text.shards import compression_of
from keras_transformer.text.tokenizer import SentencePieceTokenizer

strategy = make_strategy("multiworker")
tok = SentencePieceTokenizer(sys.argv[1])
cases, read = json.loads(sys.argv[2]), {}
for name, files in cases.items():
    def make(part):
        return make_tsv_stream_dataset(files, [compression_of(Path(f)) for f in files], tok, tok,
                                       repeat=False, workers=part[0], worker=part[1],
                                       **json.loads(sys.argv[3]))
    rows = []
    for (source, _), target_out in distribute(strategy, make, reads_part=True):
        for s, t in zip(strategy.experimental_local_results(source)[0].numpy(),
                        strategy.experimental_local_results(target_out)[0].numpy()):
            rows.append([s[s != 0].tolist(), t[t != 0].tolist()])
    read[name] = rows
Path(sys.argv[4]).write_text(json.dumps(read))
"""


def write_shard(path, pairs):
    text = "".join(f"{s}\t{t}\n" for s, t in pairs).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("workers")
    pairs = demo_splits(300, 1, 1, 11)["train"]
    cases = {"three_shards": [write_shard(folder / f"train-{i}.tsv{'.gz' * (i % 2)}",
                                          pairs[i::3]) for i in range(3)],
             "one_shard": [write_shard(folder / "all.tsv.gz", pairs)]}
    model = train_sentencepiece([text for pair in pairs for text in pair], folder / "spm", 150)
    return folder, cases, model


def rows(pairs) -> Counter:
    return Counter((tuple(s), tuple(t)) for s, t in pairs)


def one_pass(files, model) -> Counter:
    """The single-worker reference: every (source, target_out) of one pass."""
    tok = SentencePieceTokenizer(model)
    found = Counter()
    data = make_tsv_stream_dataset(files, [compression_of(f) for f in files], tok, tok,
                                   repeat=False, **LIMITS)
    for (source, _), target_out in data.as_numpy_iterator():
        for s, t in zip(source, target_out, strict=True):
            found[(tuple(s[s != PAD_ID].tolist()), tuple(t[t != PAD_ID].tolist()))] += 1
    return found


def start_workers(script_args, logs, script=WORKER, name="worker"):
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = {}
    for i in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
               "CUDA_VISIBLE_DEVICES": "", "TF_CONFIG": json.dumps(
                   {"cluster": cluster, "task": {"type": "worker", "index": i}})}
        with (logs / f"{name}{i}.log").open("w") as sink:
            processes[i] = subprocess.Popen([sys.executable, "-c", script, *script_args(i)],
                                            cwd=ROOT, env=env, stdout=sink,
                                            stderr=subprocess.STDOUT)
    return processes


@pytest.mark.slow
def test_two_workers_read_disjoint_parts_that_make_one_pass(corpus, tmp_path):
    folder, cases, model = corpus
    processes = start_workers(lambda i: [str(model), json.dumps(cases), json.dumps(LIMITS),
                                         str(tmp_path / f"read{i}.json")], tmp_path)
    codes = wait_all(processes, timeout=300)
    for i, code in codes.items():
        assert code == 0, (tmp_path / f"worker{i}.log").read_text()[-3000:]
    read = [json.loads((tmp_path / f"read{i}.json").read_text()) for i in range(2)]
    tok = SentencePieceTokenizer(model)
    for name, files in cases.items():
        parts = [rows(read[i][name]) for i in range(2)]
        assert all(sum(part.values()) > 50 for part in parts), name
        assert not set(parts[0]) & set(parts[1]), name  # demo pairs are distinct
        assert parts[0] + parts[1] == one_pass(files, model), name
    # Three shards for two workers: whole shards, worker 0 the first and third, worker 1 the
    # second (shards.worker_part).
    for worker, shards in ((0, [0, 2]), (1, [1])):
        expected = sum((one_pass([cases["three_shards"][i]], model) for i in shards), Counter())
        assert rows(read[worker]["three_shards"]) == expected
    assert tok.vocab_size == 150


@pytest.mark.slow
def test_workers_started_with_different_configs_stop_in_one_line(tmp_path):
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = {
        i: start(tmp_path / "run", tmp_path / f"worker{i}.log", "training.strategy=multiworker",
                 f"data.tokens_per_batch={576 + 24 * i}", env={"TF_CONFIG": json.dumps(
                     {"cluster": cluster, "task": {"type": "worker", "index": i}})})
        for i in range(2)}
    codes = wait_all(processes, timeout=300)
    for i in range(2):
        log = (tmp_path / f"worker{i}.log").read_text()
        assert codes[i] != 0, log[-2000:]
        assert (f"the workers of training.strategy=multiworker differ in their config (this "
                f"is worker {i})") in log, log[-2000:]
        assert "Traceback" not in log


# A worker's counting pass: train.shards.scan_shards over its part (as the engine runs it),
# every line it read from each shard recorded (line by line, or counted in blocks), the counts
# summed over the workers.
SCAN_WORKER = """
import json, sys
from collections import Counter
from pathlib import Path
import keras_transformer.text.shards as shards
import train.shards
from train.distribute import input_part, make_strategy, sum_over_workers

strategy = make_strategy("multiworker")
lines = Counter()
plain = shards.shard_pairs

def counting(path):
    for item in plain(path):
        lines[Path(path).name] += 1
        yield item

shards.shard_pairs = train.shards.shard_pairs = counting
whole = train.shards.count_lines

def counting_whole(path):
    count = whole(path)
    lines[Path(path).name] += count.lines
    return count

train.shards.count_lines = counting_whole
out = {}
for name, files in json.loads(sys.argv[1]).items():
    lines.clear()
    scan = train.shards.scan_shards([Path(f) for f in files], int(sys.argv[2]), 5,
                                    input_part(strategy))
    out[name] = {"part": list(input_part(strategy)), "pairs": scan.pairs,
                 "total": sum_over_workers(strategy, [scan.pairs, scan.dropped_empty]),
                 "sample": scan.sample_sources, "lines": dict(lines)}
Path(sys.argv[3]).write_text(json.dumps(out))
"""


@pytest.mark.slow
def test_each_worker_counts_its_own_part_and_the_counts_add_up(corpus, tmp_path):
    """The pass before training reads only a worker's part (whole shards apiece, or every
    other line of the one shard) and a bounded sample of the first pairs of every shard, the
    same on both workers; the summed count is every pair of the shards."""
    folder, cases, _ = corpus
    sample = 30
    processes = start_workers(lambda i: [json.dumps(cases), str(sample),
                                         str(tmp_path / f"scan{i}.json")],
                              tmp_path, SCAN_WORKER, "scan")
    codes = wait_all(processes, timeout=300)
    for i, code in codes.items():
        assert code == 0, (tmp_path / f"scan{i}.log").read_text()[-3000:]
    got = [json.loads((tmp_path / f"scan{i}.json").read_text()) for i in range(2)]

    def shard_lines(path):
        raw = Path(path).read_bytes()
        return (gzip.decompress(raw) if path.endswith(".gz") else raw).decode().splitlines()

    for name, files in cases.items():
        lines = {Path(f).name: shard_lines(f) for f in files}
        every = sum(len(v) for v in lines.values())
        assert [g[name]["part"] for g in got] == [[2, 0], [2, 1]]
        assert got[0][name]["total"] == got[1][name]["total"] == [every, 0], name
        assert got[0][name]["pairs"] + got[1][name]["pairs"] == every
        assert got[0][name]["sample"] == got[1][name]["sample"], name
        first = -(-sample // len(files))
        assert got[0][name]["sample"] == [line.split("\t")[0] for v in lines.values()
                                          for line in v[:first]][:sample]
        if name == "one_shard":  # fewer shards than workers: every other line apiece
            [only] = lines.values()
            assert [g[name]["pairs"] for g in got] == [len(only[0::2]), len(only[1::2])]
            continue
        for worker, own in ((0, [0, 2]), (1, [1])):
            names = [Path(files[i]).name for i in own]
            assert got[worker][name]["pairs"] == sum(len(lines[n]) for n in names)
            for shard, count in got[worker][name]["lines"].items():
                # Its own shards whole (and their start again for the sample); another's
                # only as far as the sample's share.
                assert count == (len(lines[shard]) if shard in names else 0) + first, shard
