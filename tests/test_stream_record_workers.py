"""Each worker of a MultiWorkerMirroredStrategy reads only its part of a streamed record corpus
(train.record_stream, here the classification task's `text<TAB>label` records): two worker
processes on 127.0.0.1 (TF_CONFIG) build one pass of their batches through
train.distribute.distribute(reads_part=True) and record what their replica was given. The
parts are disjoint and together exactly the records of one single-process pass: whole shards
apiece with at least as many shards as workers, every other line of the one shard with fewer;
each worker's scan counts what its pipeline reads. (tests/test_stream_workers.py: translation.)
"""

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from keras_transformer.text.demo_corpus import demo_splits
from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece
from tests.test_stream_workers import start_workers
from tests.test_train_distribute import wait_all
from train.record_stream import labeled_reader, record_rows, scan_records

pytestmark = pytest.mark.tf_only  # about 15 s: two worker processes, one pass each
CLASSES, SEED, BUFFER = 3, 5, 16

# A worker: the strategy from TF_CONFIG, each case's scan of its part, then one pass of its
# pipeline's batches (rows shuffled in a buffer, batched by the classification task's own
# function); written: the ids and label of every row its replica got, its scan's count, the
# parts it was given and the shards its scan and its pipeline opened.
WORKER = """
import json, sys
from pathlib import Path
import tensorflow as tf
from keras_transformer.text.pipeline import make_classification_dataset
from keras_transformer.text.tokenizer import SentencePieceTokenizer
from train.distribute import distribute, input_part, make_strategy
from train.record_stream import labeled_reader, record_rows, rows_dataset, scan_records

strategy = make_strategy("multiworker")
tok = SentencePieceTokenizer(sys.argv[1])
plain, opened, out = labeled_reader([], 3), [], {}

def reader(path):
    opened.append(path.name)
    return plain(path)

for name, files in json.loads(sys.argv[2]).items():
    opened.clear()
    scan = scan_records([Path(f) for f in files], reader, 0, 5, input_part(strategy))
    scanned, parts, rows = sorted(opened), [], []
    opened.clear()

    def make(part):
        parts.append(list(part))
        def generate():
            return record_rows(scan, list, shuffle_buffer=16, seed=5, part=part, chunk=8,
                               repeat=False)
        data = rows_dataset(generate, (tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int32)))
        return make_classification_dataset(data, None, tok, max_length=64, batch_size=8)

    for ids, labels in distribute(strategy, make, reads_part=True):
        for row, label in zip(strategy.experimental_local_results(ids)[0].numpy(),
                              strategy.experimental_local_results(labels)[0].numpy()):
            rows.append([row[row != tok.pad_id].tolist(), int(label)])
    out[name] = {"rows": rows, "scanned": scan.records, "parts": parts,
                 "scan_opened": scanned, "pipeline_opened": sorted(opened)}
Path(sys.argv[3]).write_text(json.dumps(out))
"""


def write_shard(path: Path, lines: list[str], gz: bool) -> str:
    text = "".join(f"{line}\n" for line in lines).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(folder, {case: shard paths}, {shard name: its lines}, tokenizer model): distinct demo
    sentences labelled by word count, each shard with a header; one blank line is dropped."""
    folder = tmp_path_factory.mktemp("record_workers")
    texts = [source for source, _ in demo_splits(240, 1, 1, 11)["train"]]
    lines = [f"{t}\t{len(t.split()) % CLASSES}" for t in texts]
    shard_lines = {"train-0.tsv": ["sentence\tlabel", *lines[0::3][:20], "", *lines[0::3][20:]],
                   "train-1.tsv.gz": ["sentence\tlabel", *lines[1::3]],
                   "train-2.tsv": ["sentence\tlabel", *lines[2::3]],  # gzip under a plain name
                   "all.tsv": ["sentence\tlabel", *lines]}
    paths = {n: write_shard(folder / n, v, n != "train-0.tsv" and n != "all.tsv")
             for n, v in shard_lines.items()}
    cases = {"three_shards": [paths[f"train-{i}.tsv{'.gz' * (i == 1)}"] for i in range(3)],
             "one_shard": [paths["all.tsv"]]}
    model = train_sentencepiece(texts, folder / "spm", 150)
    return folder, cases, shard_lines, model


def records(lines) -> Counter:
    """(text, label) of shard lines, the header and blank lines left out."""
    return Counter((t, int(label)) for t, _, label in (line.rpartition("\t") for line in lines)
                   if t and label.isdigit())


def one_pass(files) -> tuple[int, Counter]:
    """The single-process reference: the scan's count and the rows of one pass."""
    scan = scan_records([Path(f) for f in files], labeled_reader([], CLASSES), 0, SEED)
    rows = record_rows(scan, list, shuffle_buffer=BUFFER, seed=SEED, chunk=8, repeat=False)
    return scan.records, Counter(map(tuple, rows))


@pytest.fixture(scope="module")
def got(corpus, tmp_path_factory):
    """Per worker, per case: what it wrote, its rows decoded to Counter((text, label))."""
    folder, cases, _, model = corpus
    logs = tmp_path_factory.mktemp("logs")
    processes = start_workers(lambda i: [str(model), json.dumps(cases),
                                         str(logs / f"read{i}.json")], logs, WORKER)
    codes = wait_all(processes, timeout=300)
    for i, code in codes.items():
        assert code == 0, (logs / f"worker{i}.log").read_text()[-3000:]
    tok = SentencePieceTokenizer(model)
    read = [json.loads((logs / f"read{i}.json").read_text()) for i in range(2)]
    for worker in read:
        for case in worker.values():
            # No row was cut at max_length: each ends in its EOS, which decode stops at.
            assert all(ids and ids[-1] == tok.eos_id for ids, _ in case["rows"])
            texts = tok.decode([ids for ids, _ in case["rows"]])
            case["read"] = Counter(zip(texts, (label for _, label in case["rows"]), strict=True))
    return read


def test_three_shards_whole_shards_apiece_make_one_pass(corpus, got):
    _, cases, shard_lines, _ = corpus
    parts = [got[i]["three_shards"]["read"] for i in range(2)]
    count, reference = one_pass(cases["three_shards"])
    assert reference == sum((records(v) for n, v in shard_lines.items() if n != "all.tsv"),
                            Counter())
    assert not set(parts[0]) & set(parts[1])  # the texts are distinct
    assert parts[0] + parts[1] == reference and count == sum(reference.values()) == 240
    # shards.worker_part: worker 0 the first and third shard, worker 1 the second, each
    # opened once by its scan and once by its pipeline, another's never.
    for worker, own in ((0, ["train-0.tsv", "train-2.tsv"]), (1, ["train-1.tsv.gz"])):
        seen = got[worker]["three_shards"]
        assert seen["parts"] == [[2, worker]]
        assert seen["read"] == sum((records(shard_lines[n]) for n in own), Counter())
        assert seen["scan_opened"] == seen["pipeline_opened"] == own


def test_one_shard_every_other_line_apiece_makes_one_pass(corpus, got):
    _, cases, shard_lines, _ = corpus
    lines = shard_lines["all.tsv"]
    parts = [got[i]["one_shard"]["read"] for i in range(2)]
    assert not set(parts[0]) & set(parts[1])
    assert parts[0] + parts[1] == one_pass(cases["one_shard"])[1] == records(lines)
    for worker in range(2):  # tf.data's shard: every other line (the header is line 0)
        assert parts[worker] == records(lines[worker::2]) and sum(parts[worker].values()) > 100
        assert got[worker]["one_shard"]["pipeline_opened"] == ["all.tsv"]


@pytest.mark.parametrize("case", ["three_shards", "one_shard"])
def test_each_workers_scan_counts_what_its_pipeline_reads(corpus, got, case):
    _, cases, _, _ = corpus
    counts = [got[i][case]["scanned"] for i in range(2)]
    assert counts == [sum(got[i][case]["read"].values()) for i in range(2)]
    assert sum(counts) == one_pass(cases[case])[0]
