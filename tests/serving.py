"""The servers for the tests: `python -m export.serve` (or export.api) started with
TensorFlow blocked, JSON posted to it, the bad requests every route refuses, and a tiny
translator run to serve."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

from tests.cli_probe import ROOT, command, tool_env

SEED = 20240611
WORDS = ["red", "blue", "cat", "dog", "big", "small", "one", "two", "three", "I", "saw"]


def tiny_run(run: Path, config_yaml: str = "task: translation\n", **overrides) -> None:
    """model.keras (random weights, so its attention is far from uniform), model_config.json,
    spm.model (trained on random sentences of WORDS) and a config.yaml (`config_yaml`: by
    default one naming the task); `overrides` are TransformerConfig options."""
    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.transformer import Transformer
    from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

    run.mkdir()
    rng = np.random.default_rng(SEED)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))) for _ in range(300)]
    shutil.copyfile(train_sentencepiece(texts, run.parent / "spm", 60), run / "spm.model")
    vocab = SentencePieceTokenizer(run / "spm.model").vocab_size
    model = Transformer(TransformerConfig.preset(
        "tiny", source_vocab_size=vocab, target_vocab_size=vocab, d_model=32, num_heads=4,
        d_ff=64, num_encoder_layers=2, num_decoder_layers=2, max_source_length=16,
        max_target_length=20, dropout=0.0, **overrides), dtype="float32")
    model.build()
    model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(np.float32)
                       for w in model.get_weights()])
    model.save(run / "model.keras")
    (run / "model_config.json").write_text(json.dumps(model.config.to_dict()))
    (run / "config.yaml").write_text(config_yaml)


def start_server(export: Path, log: Path, *args, module: str = "export.serve"
                 ) -> tuple[subprocess.Popen, str]:
    """`python -m module --export export --port 0 args...` (TensorFlow blocked), its output
    in `log`: the process and its base URL once it prints it."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command(module, "--export", export, "--port", 0, *args, without_tensorflow=True),
            cwd=ROOT, env=tool_env(), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        for word in log.read_text(errors="replace").split():
            if word.startswith("http://"):
                return process, word.rstrip("/")
        time.sleep(0.2)
    process.kill()
    raise AssertionError(log.read_text(errors="replace")[-3000:])


@contextlib.contextmanager
def serving(export: Path, log: Path, *args, module: str = "export.serve"):
    """The base URL of `python -m module --export export args...` (TensorFlow blocked) on a
    free port, its output in `log`; stopped on leaving."""
    process, url = start_server(export, log, *args, module=module)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def post(url: str, body: bytes, route: str = "/translate", **kwargs):
    import httpx

    return httpx.post(f"{url}{route}", content=body,
                      headers={"Content-Type": "application/json"}, timeout=60, **kwargs)


BAD_REQUESTS = [
    (b'{"text": ""}', 422, "empty"),
    (b'{"text": "   "}', 422, "empty"),
    (json.dumps({"text": " ".join(["I saw three big dogs"] * 8)}).encode(), 422,
     "max_source_length=16"),
    (b'{"text": "one red \xff\xfe cat"}', 400, "not valid UTF-8"),
    (b'{"text": "one red \\ud800 cat"}', 400, "lone surrogate"),
    (b"one red cat", 400, "not JSON"),
    (b'{"text": "one red cat"', 400, "not JSON"),
    (b'{"sentence": "one red cat"}', 400, '"text" key'),
    (b'["one red cat"]', 400, '"text" key'),
    (b'{"text": 7}', 422, "must be a string"),
    (b'{"text": "one red cat\\ntwo dogs"}', 422, "line break"),
    (b'{"text": "' + b"a" * 70000 + b'"}', 413, "more than 65536 bytes; send at most 65536"),
]


def batched(engine, requests: list[list[str]], options: dict | None = None,
            stream: bool = False, max_batch_size: int = 32):
    """Every request (a list of inputs) prepared by an API engine (export.engines) and
    submitted at once to one Batcher over it -> (each request's outputs, each request's
    streamed events [(index, event)], the sizes of the batches run)."""
    import threading

    from export.batching import Batcher, Ticket

    sizes: list[int] = []
    batcher = Batcher([engine], max_batch_size=max_batch_size, wait_s=0.2,
                      on_batch=sizes.append)
    results: list = [None] * len(requests)
    events: list[list] = [[] for _ in requests]
    done = [threading.Event() for _ in requests]
    try:
        for n, inputs in enumerate(requests):
            def finish(result, n=n):
                results[n] = result
                done[n].set()

            ticket = Ticket(len(inputs), finish, on_event=(
                (lambda i, e, n=n: events[n].append((i, e))) if stream else None))
            batcher.submit(engine.prepare(inputs, dict(options or {}), stream), ticket)
        assert all(event.wait(120) for event in done)
    finally:
        batcher.close(timeout=60)
    for result in results:
        assert not isinstance(result, BaseException), result
    return results, events, sizes
