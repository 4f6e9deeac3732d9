"""export.parity's checks of a translator's and a language model's export (the kinds that
decode step by step): encode/decode_step tensors against keras, greedy and beam tokens,
search.onnx against the NumPy search, the SavedModel's `translate` signature against keras
under the manifest's search, the variants' quality, the attention weights of
attention.onnx; a language model's greedy and sampled tokens of random prompts. Each check is a
function (ParityRun, out) -> CheckResult that prints its lines with `out`.
"""

from __future__ import annotations

import time

import numpy as np

from keras_transformer.decoding import SearchSettings
from keras_transformer.decoding.settings import SEQ2SEQ_KEYS

from ... import choice
from ...common import ExportError, Manifest, variant_bytes
from ...formats import KERAS
from ...parity_check import CheckResult, ParityRun, exported_formats
from ...runtime.base import Generator, Translator

TOLERANCE = 1e-4
SHAPES = ((1, 7, 12), (5, 19, 30))  # (batch, source length, cache length)
# A language model's token checks: random prompts of 1 to LM_PROMPT pieces after BOS, each
# continued by up to LM_NEW_TOKENS tokens; sampled at LM_SAMPLING with one seed.
LM_PROMPT, LM_NEW_TOKENS = 8, 20
LM_SAMPLING = SearchSettings(temperature=1.0, top_k=0, top_p=0.9, seed=1)
# Sentences per call of the `translate` signature: what the Translator searches as one batch
# by default, so both pad and bound the lengths of the same batches.
SIGNATURE_BATCH = 64


def random_inputs(manifest: Manifest, batch: int, source_length: int, cache_length: int,
                  seed: int = 0) -> dict:
    """Padded source ids (B,S), tokens (B,), a random cache (B,L,2,T,D) and an index."""
    rng = np.random.default_rng(seed)
    vocab = manifest["vocab"]
    ids = rng.integers(4, vocab["source_size"], size=(batch, source_length)).astype(np.int32)
    lengths = rng.integers(1, source_length + 1, size=batch)
    lengths[0] = source_length
    for row, length in enumerate(lengths):
        ids[row, length - 1] = manifest.special_ids["eos"]
        ids[row, length:] = manifest.special_ids["pad"]
    model = manifest.model
    cache = rng.normal(size=(batch, model["num_decoder_layers"], 2, cache_length,
                             model["d_model"])).astype(np.float32)
    tokens = rng.integers(4, vocab["target_size"], size=batch).astype(np.int32)
    return {"source_ids": ids, "tokens": tokens, "cache": cache,
            "index": int(rng.integers(1, cache_length))}


def lm_step_outputs(backend, inputs: dict) -> dict[str, np.ndarray]:
    """Every output of a language model's decode_step (no encoder) on `inputs`."""
    logits, step_key_values = backend.decode_step(
        inputs["tokens"], [], None, backend.cache_from(inputs["cache"]), inputs["index"])
    return {"decode_step.logits": backend.to_numpy(logits),
            "decode_step.step_key_values": backend.to_numpy(step_key_values)}


def tensor_outputs(backend, inputs: dict) -> dict[str, np.ndarray]:
    """Every output of encode (the cross keys/values stacked into (2L,B,H,S,dh)), and of
    decode_step fed the reference encoding (in `inputs`); a language model's step alone when
    `inputs` has no source_ids."""
    if "source_ids" not in inputs:
        return lm_step_outputs(backend, inputs)
    memory, memory_mask = backend.encode(inputs["source_ids"])
    memory = [backend.to_numpy(t) for t in memory]
    # A copy-attention model's memory ends with the source ids (cache.layout.COPY_SOURCE).
    copy_source = memory.pop() if backend.copy_attention else None
    memory = np.stack(memory)
    ref_memory = list(inputs.get("memory", memory))
    if copy_source is not None:
        ref_memory.append(inputs.get("copy_source_ids", copy_source))
    ref_mask = inputs.get("memory_mask", backend.to_numpy(memory_mask))
    if hasattr(backend, "tf"):  # TF runtimes take tensors
        ref_memory = [backend.tf.constant(t) for t in ref_memory]
        ref_mask = backend.tf.constant(ref_mask)
    logits, step_key_values = backend.decode_step(
        inputs["tokens"], ref_memory, ref_mask, backend.cache_from(inputs["cache"]),
        inputs["index"])
    copied = {} if copy_source is None else {"encode.copy_source_ids": copy_source}
    return {"encode.memory": memory, **copied,
            "encode.memory_mask": backend.to_numpy(memory_mask),
            "decode_step.logits": backend.to_numpy(logits),
            "decode_step.step_key_values": backend.to_numpy(step_key_values)}


def tensor_parity(manifest: Manifest, backends: dict, shapes=SHAPES,
                  encoder: bool = True) -> list[dict]:
    """Rows {output, shape, runtime: max|Δ| vs the first backend}; the mask counts mismatches.
    `encoder` False: a language model's step alone."""
    rows = []
    names = list(backends)
    for batch, source_length, cache_length in shapes:
        # Within the model's lengths: a small model may accept fewer positions than SHAPES.
        inputs = random_inputs(manifest, batch, min(source_length, manifest["max_source_length"]),
                               min(cache_length, manifest["max_target_length"]))
        if not encoder:
            del inputs["source_ids"]
        reference = tensor_outputs(backends[names[0]], inputs)
        if encoder:
            inputs["memory"] = reference["encode.memory"]
            inputs["memory_mask"] = reference["encode.memory_mask"]
            if "encode.copy_source_ids" in reference:
                inputs["copy_source_ids"] = reference["encode.copy_source_ids"]
        outputs = {name: tensor_outputs(backends[name], inputs) for name in names[1:]}
        for key, ref in reference.items():
            row = {"output": key, "shape": "x".join(map(str, ref.shape))}
            for name in names[1:]:
                got = outputs[name][key]
                if got.shape != ref.shape:
                    row[name] = float("inf")
                elif ref.dtype == bool:
                    row[name] = float(np.sum(got != ref))
                else:
                    row[name] = float(np.max(np.abs(got.astype(np.float64) - ref)))
            rows.append(row)
    return rows


def attention_parity(manifest: Manifest, keras_backend, onnx_backend,
                     shapes=SHAPES, seed: int = 0) -> list[dict]:
    """Rows {output, shape, onnx: max|Δ|} of attention.onnx against the Keras model's own
    weights (export.module.attention_function, the function it was converted from), for one
    random sentence pair per shape (source length S, target length T; the batch is 1)."""
    from ...module import attention_function

    function = attention_function(keras_backend.model)
    rng = np.random.default_rng(seed)
    rows = []
    for _, source_length, target_length in shapes:
        inputs = random_inputs(manifest, 1, min(source_length, manifest["max_source_length"]),
                               2, seed=int(rng.integers(1 << 30)))
        target = rng.integers(4, manifest["vocab"]["target_size"],
                              size=(1, min(target_length, manifest["max_target_length"])))
        target[0, 0] = manifest.special_ids["bos"]
        source_ids, target_ids = inputs["source_ids"], target.astype(np.int32)
        # A selection as a bottom-up summarizer's: some positions left out, the last kept.
        selection = rng.random(source_ids.shape) < 0.7
        selection[:, -1] = True
        reference = {name: t.numpy() for name, t in function(source_ids, target_ids,
                                                             selection).items()}
        got = onnx_backend.attention(source_ids, target_ids, selection)
        for name in sorted(reference):
            ref = reference[name]
            delta = (float("inf") if got[name].shape != ref.shape else
                     float(np.max(np.abs(got[name].astype(np.float64) - ref))))
            rows.append({"output": f"attention.{name}", "shape": "x".join(map(str, ref.shape)),
                         "onnx": delta})
    return rows


def format_table(rows: list[dict], runtimes: list[str]) -> str:
    head = f"{'output':<24} {'shape':<16}" + "".join(f"{r:>12}" for r in runtimes)
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(f"{row['output']:<24} {row['shape']:<16}"
                     + "".join(f"{row[r]:>12.2e}" for r in runtimes))
    return "\n".join(lines)


def demo_test_split(count: int) -> tuple[list[str], list[str]]:
    """The first `count` pairs of the demo corpus' test split (it is drawn first, so stable)."""
    from keras_transformer.text.demo_corpus import demo_splits

    pairs = demo_splits(train_size=0, dev_size=0, test_size=count)["test"]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def first_difference(a: list[list[int]], b: list[list[int]]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens a and b share before their first difference."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def bleu(hypotheses: list[str], references: list[str]) -> float:
    import sacrebleu

    return float(sacrebleu.metrics.BLEU().corpus_score(hypotheses, [references]).score)


def quality(task: str):
    """(name, score function) of the outputs of a `task` export: BLEU, or ROUGE-L F1 for
    summaries (keras_transformer.text.rouge)."""
    if task == "summarization":
        from keras_transformer.text.rouge import rouge

        return "ROUGE-L", lambda hyps, refs: rouge(hyps, refs)["rougeL"]
    return "BLEU", bleu


def present_runtimes(manifest: Manifest) -> tuple[tuple[str, ...], list[str]]:
    """(keras, from the training run, and every runtime whose format the export holds; the
    formats it does not hold)."""
    present, missing = exported_formats(manifest)
    if not present:
        raise ExportError(f"{manifest.root} holds no exported format to check against keras")
    return (KERAS, *present), missing


def file_size(manifest: Manifest, fmt: str, variant: str) -> int:
    files = manifest.format_files(fmt, variant)
    return variant_bytes(manifest.data, files)


def search_graph_parity(manifest: Manifest, graph: Translator, greedy_sources: list[str],
                        beam_sources: list[str], search: SearchSettings, load, out=print,
                        variant: str = "float32") -> bool:
    """The variant's search graph (search.onnx or search.int8.onnx: the whole search in one
    onnxruntime call, what `graph` runs) against the NumPy search stepping the same variant's
    decoder_step graph, the reference, greedy and beam 4 with the run's constraints. float32:
    token ids identical. int8: the count of identical sentences, for information (the
    variant's quality is held by check 4). Dynamic int8 quantizes each activation tensor with
    one scale over the whole batch, so the float32 rounding in which the two graphs differ
    can move a token, and that row then moves every other row's scale; the NumPy search's
    own int8 tokens change as much with the batch size. The times are for information.
    `load(runtime, variant, search_graph)` loads a runtime (export.runtime.load_backend)."""
    stepwise = Translator(manifest, load("onnx", variant, search_graph=False))
    files = manifest.format_files("onnx", variant)
    strict = variant == "float32"
    out(f"\n3b. {files['search']} against the NumPy search over {files['decoder_step']} "
        f"(token ids{'' if strict else '; for information, see check 4'})")
    ok = True
    for what, beam, sources in (("greedy", 1, greedy_sources), ("beam 4", 4, beam_sources)):
        ids, seconds = {}, {}
        for name, translator in (("numpy", stepwise), ("graph", graph)):
            start = time.perf_counter()
            ids[name] = translator.translate_ids(sources, search.replace(beam_size=beam))
            seconds[name] = time.perf_counter() - start
        if strict:
            diff = first_difference(ids["numpy"], ids["graph"])
            ok &= diff is None
            verdict = "identical" if diff is None else f"DIFFER at sentence {diff}"
        else:
            same = sum(a == b for a, b in zip(ids["numpy"], ids["graph"], strict=True))
            verdict = f"{same} identical"
        out(f"   {what:<7} {len(sources):>4} sentences  {verdict}  "
            f"(NumPy search {seconds['numpy']:.1f} s, {files['search']} "
            f"{seconds['graph']:.1f} s)")
    return ok


def random_prompts(manifest: Manifest, count: int, seed: int = 0) -> list[list[int]]:
    """`count` prompts: BOS and 1 to LM_PROMPT random pieces that are not special ids (no text:
    the check needs no corpus of the model's language)."""
    rng = np.random.default_rng(seed)
    special = set(manifest.special_ids.values())
    pieces = np.array([i for i in range(manifest["vocab"]["target_size"]) if i not in special])
    longest = max(1, min(LM_PROMPT, manifest["max_target_length"] - 2))
    return [[manifest.special_ids["bos"], *rng.choice(pieces, size=n).tolist()]
            for n in rng.integers(1, longest + 1, size=count)]


def lm_token_parity(manifest: Manifest, backends: dict, prompts: int, load,
                    out=print) -> bool:
    """Checks 2 and 3 of a language model's export: the greedy and the seeded sampled
    continuations of `prompts` random prompts, identical across runtimes; then, for
    information, how many greedy tokens each quantized variant shares with float32.
    `load(runtime, variant)` loads a quantized variant's runtime."""
    batch = random_prompts(manifest, prompts)
    new_tokens = max(1, min(LM_NEW_TOKENS, manifest["max_target_length"] - LM_PROMPT - 1))
    ok = True
    for number, (what, sampling) in enumerate(
            (("greedy", SearchSettings(temperature=0.0)),
             ("sampled (" + ", ".join(f"{k} {v}" for k, v in LM_SAMPLING.to_dict(
                 ("temperature", "top_k", "top_p", "seed")).items()) + ")", LM_SAMPLING)),
            start=2):
        out(f"{number}. {what} token ids of {prompts} random prompts, {new_tokens} new tokens")
        ids = {}
        for name, backend in backends.items():
            start = time.perf_counter()
            ids[name] = Generator(manifest, backend).generate_ids(batch, new_tokens, sampling)
            out(f"   {name:<11} {time.perf_counter() - start:6.1f} s")
        for name in list(backends)[1:]:
            diff = first_difference(ids["keras"], ids[name])
            ok &= diff is None
            out(f"   keras vs {name:<11} "
                f"{'identical' if diff is None else f'DIFFER at prompt {diff}'}")
        if number == 2:
            greedy = ids
        out("")
    quantized = [(fmt, v) for fmt in ("tflite", "onnx")
                 for v in manifest["formats"].get(fmt, {}).get("variants", {}) if v != "float32"]
    if quantized:
        out("4. greedy tokens of each quantized variant before its first difference from "
            "float32's (information, not checked)")
    for fmt, variant in quantized:
        reference = greedy[fmt]
        got = Generator(manifest, load(fmt, variant)).generate_ids(
            batch, new_tokens, SearchSettings(temperature=0.0))
        # Tokens before each continuation's first difference: after it the contexts differ.
        same = sum(shared_prefix(x, y) for x, y in zip(reference, got, strict=True))
        total = sum(len(x) for x in reference)
        out(f"   {fmt:<7} {variant:<8} {file_size(manifest, fmt, variant) / 1e6:7.2f} MB  "
            f"{same}/{total} tokens ({100 * same / max(total, 1):.1f}%)")
    return ok


def prepare(run: ParityRun, out) -> None:
    """The runtimes of every format the export holds, loaded (or the ones given), and the
    run's search constraints (summaries: no repeated n-gram, a minimum length), so the
    searches checked are those its users get."""
    manifest = run.manifest
    run.state["search"] = SearchSettings(**manifest.search.constraints)
    runtimes, missing = present_runtimes(manifest)
    if run.backends is None:
        run.backends = {name: run.load(name) for name in runtimes}
    run.backends = {name: run.backends[name] for name in runtimes}
    run.state["others"] = list(runtimes[1:])
    # A reduced-precision variant's runtime, loaded once for every check that needs it.
    run.state["variants"] = {(name, "float32"): b for name, b in run.backends.items()}
    if missing:
        out(f"not exported, not checked: {', '.join(missing)}\n")


def prepare_translator(run: ParityRun, out) -> None:
    """The sentences: --src's, else the demo corpus' test split (a translation export's
    only); then `prepare`."""
    manifest = run.manifest
    if run.sources is None:
        if manifest.task != "translation":
            raise ExportError(f"{manifest.root} holds a {manifest.task} model; give --src with "
                              f"its inputs, one per line (and --ref), e.g. the run's test.src "
                              f"and test.ref")
        run.sources, run.references = demo_test_split(max(run.sentences, run.bleu_sentences))
        run.state["given"] = "demo test sentences"
    else:
        run.state["given"] = "sentences of --src"
    prepare(run, out)
    run.state["translators"] = {name: Translator(manifest, b) for name, b in run.backends.items()}


def variant_backend(run: ParityRun, fmt: str, variant: str):
    """One format's variant's runtime, loaded on first use and kept for the later checks."""
    loaded = run.state["variants"]
    if (fmt, variant) not in loaded:
        loaded[(fmt, variant)] = run.load(fmt, variant)
    return loaded[(fmt, variant)]


def check_tensors(encoder: bool):
    """Check 1 of a decoding export: every output of encode and decode_step against keras
    (`encoder` False: a language model's step alone)."""

    def tensors(run: ParityRun, out) -> CheckResult:
        others = run.state["others"]
        out(f"1. encode/decode_step max|Δ| against keras (tolerance {TOLERANCE:g}; "
            f"memory_mask: mismatching elements)")
        rows = tensor_parity(run.manifest, run.backends, encoder=encoder)
        out(format_table(rows, others))
        worst = max(row[r] for row in rows for r in others)
        passed = worst <= TOLERANCE
        out(f"   {'PASS' if passed else 'FAIL'}: worst {worst:.2e}\n")
        return CheckResult("tensors", passed)

    return tensors


def check_lm_tokens(run: ParityRun, out) -> CheckResult:
    """Checks 2 to 4 of a language model's export (lm_token_parity)."""
    return CheckResult("tokens", lm_token_parity(run.manifest, run.backends, run.sentences,
                                                 lambda fmt, variant: run.load(fmt, variant),
                                                 out))


def check_greedy(run: ParityRun, out) -> CheckResult:
    """Check 2: every runtime's greedy token ids identical to keras'."""
    search, sources = run.state["search"], run.sources
    sentences = min(run.sentences, len(sources))
    constraints = ", ".join(f"{k} {v}" for k, v in search.constraints.items() if v)
    out(f"2. greedy token ids on {sentences} {run.state['given']}"
        + (f" ({constraints})" if constraints else ""))
    ids, ok = {}, True
    for name, translator in run.state["translators"].items():
        start = time.perf_counter()
        ids[name] = translator.translate_ids(sources[:sentences], search.replace(beam_size=1))
        out(f"   {name:<11} {time.perf_counter() - start:6.1f} s")
    for name in run.state["others"]:
        diff = first_difference(ids["keras"], ids[name])
        ok &= diff is None
        out(f"   keras vs {name:<11} "
            f"{'identical' if diff is None else f'DIFFER at sentence {diff}'}")
    return CheckResult("greedy", ok)


def check_beam(run: ParityRun, out) -> CheckResult:
    """Check 3: beam-4 token ids of keras and one exported runtime identical. One suffices:
    the search is the same NumPy code in all (search.onnx, the onnx runtime's when the
    export has it, is held to it in 3b)."""
    others, translators = run.state["others"], run.state["translators"]
    beam_runtime = "onnx" if "onnx" in others else others[0]
    beam_sentences = min(run.beam_sentences, len(run.sources))
    out(f"\n3. beam-4 token ids on {beam_sentences} sentences, keras vs {beam_runtime}")
    beams = {name: translators[name].translate_ids(run.sources[:beam_sentences],
                                                   run.state["search"].replace(beam_size=4))
             for name in ("keras", beam_runtime)}
    diff = first_difference(beams["keras"], beams[beam_runtime])
    out(f"   {'identical' if diff is None else f'DIFFER at sentence {diff}'}")
    return CheckResult("beam", diff is None)


def check_search_graphs(run: ParityRun, out) -> CheckResult:
    """Check 3b: each ONNX variant's search graph against the NumPy search
    (search_graph_parity)."""
    ok = True
    if "onnx" in run.state["others"]:
        sentences = min(run.sentences, len(run.sources))
        beam_sentences = min(run.beam_sentences, len(run.sources))
        for variant, files in run.manifest["formats"]["onnx"]["variants"].items():
            if "search" in files:
                graph = Translator(run.manifest, variant_backend(run, "onnx", variant))
                ok &= search_graph_parity(run.manifest, graph, run.sources[:sentences],
                                          run.sources[:beam_sentences], run.state["search"],
                                          lambda fmt, v, search_graph: run.load(
                                              fmt, v, search_graph=search_graph),
                                          out, variant)
    return CheckResult("search_graph", ok)


def signature_translations(backend, sentences: list[str]) -> list[str]:
    """The SavedModel's `translate` signature (what TensorFlow Serving serves) on
    `sentences`, SIGNATURE_BATCH per call."""
    import tensorflow as tf

    translate = backend.loaded.signatures["translate"]
    texts = []
    for start in range(0, len(sentences), SIGNATURE_BATCH):
        chunk = tf.constant(sentences[start: start + SIGNATURE_BATCH])
        texts += [t.decode("utf-8") for t in translate(sentences=chunk)["translations"].numpy()]
    return texts


def check_translate_signature(run: ParityRun, out) -> CheckResult:
    """Check 3c, of an export whose SavedModel has `translate`: its translations (the search
    of the manifest's `search`, baked in at export) identical to keras' under the same
    settings, batch by batch."""
    signatures = run.manifest["formats"].get("savedmodel", {}).get("signatures", [])
    if "savedmodel" not in run.state["others"] or "translate" not in signatures:
        return CheckResult("translate_signature", True)
    search = run.manifest.search
    sentences = run.sources[: min(run.beam_sentences, len(run.sources))]
    described = ", ".join(f"{k} {v}" for k, v in search.to_dict(SEQ2SEQ_KEYS).items())
    out(f"\n3c. SavedModel translate signature ({described}) against keras on "
        f"{len(sentences)} sentences")
    keras = run.state["translators"][KERAS]
    expected = []
    for start in range(0, len(sentences), SIGNATURE_BATCH):
        expected += keras.translate(sentences[start: start + SIGNATURE_BATCH], search,
                                    batch_size=SIGNATURE_BATCH)
    diff = first_difference(expected, signature_translations(run.backends["savedmodel"],
                                                              sentences))
    out(f"   {'identical' if diff is None else f'DIFFER at sentence {diff}'}")
    return CheckResult("translate_signature", diff is None)


def check_variants(run: ParityRun, out) -> CheckResult:
    """Check 4: each variant's greedy quality (BLEU, or ROUGE-L for summaries) within 1.0 of
    its format's float32, and the seconds of that pass (what parity.json records)."""
    manifest, search = run.manifest, run.state["search"]
    variants = [("tflite", v) for v in manifest["formats"].get("tflite", {}).get("variants", {})]
    variants += [("onnx", v) for v in manifest["formats"].get("onnx", {}).get("variants", {})]
    if run.references is None:
        out("\n4. no references (--ref): the variants' quality is not scored")
        variants = []
    else:
        bleu_sentences = min(run.bleu_sentences, len(run.sources))
        metric, score = quality(manifest.task)
        run.state["metric"], run.state["scored"] = metric, bleu_sentences
        out(f"\n4. greedy {metric} of each variant on {bleu_sentences} {run.state['given']} "
            f"(quantized: within 1.0 of float32; a variant more than {choice.TOLERANCE} below "
            f"is never --variant fastest) and the seconds of that pass")
    scores, entries, ok = {}, [], True
    for fmt, variant in variants:
        translator = Translator(manifest, variant_backend(run, fmt, variant))
        translator.translate(run.sources[:8], search.replace(beam_size=1))  # warm-up, not timed
        start = time.perf_counter()
        hyps = translator.translate(run.sources[:bleu_sentences], search.replace(beam_size=1))
        seconds = time.perf_counter() - start
        scores[(fmt, variant)] = score(hyps, run.references[:bleu_sentences])
        delta = scores[(fmt, variant)] - scores.get((fmt, "float32"), scores[(fmt, variant)])
        passed = abs(delta) <= 1.0
        ok &= passed
        size = file_size(manifest, fmt, variant)
        entries.append({"runtime": fmt, "variant": variant, "score": scores[(fmt, variant)],
                        "seconds": seconds, "bytes": size})
        far = delta < -choice.TOLERANCE
        out(f"   {fmt:<7} {variant:<8} {size / 1e6:7.2f} MB  "
            f"{metric} {scores[(fmt, variant)]:6.2f}  Δ {delta:+.2f}  {seconds:6.2f} s  "
            f"{'FAIL' if not passed else 'ok, but not a fastest candidate' if far else 'ok'}")
    run.state["entries"] = entries
    return CheckResult("variants", ok)


def check_attention(run: ParityRun, out) -> CheckResult:
    """Check 5, of an export made with --with-attention: attention.onnx against the Keras
    model's own weights."""
    if "attention" not in run.manifest.data:
        return CheckResult("attention", True)
    onnx_backend = run.backends.get("onnx") or run.load("onnx")
    out(f"\n5. attention weights of attention.onnx against keras, max|Δ| (tolerance "
        f"{TOLERANCE:g})")
    rows = attention_parity(run.manifest, run.backends["keras"], onnx_backend)
    out(format_table(rows, ["onnx"]))
    worst = max(row["onnx"] for row in rows)
    passed = worst <= TOLERANCE
    out(f"   {'PASS' if passed else 'FAIL'}: worst {worst:.2e}")
    return CheckResult("attention", passed)


def record_choice(run: ParityRun, out) -> CheckResult:
    """With `record`, when check 4 scored the variants: parity.json (export/choice.py) in the
    export directory, with the outcome of every check before it. Not a check: it passes."""
    entries = run.state.get("entries")
    if run.record and entries:
        ok = run.ok
        chosen = choice.choose_fastest({"variants": entries}) if ok else None
        path = choice.write_record(run.manifest.root, passed=ok, metric=run.state["metric"],
                                   sentences=run.state["scored"], variants=entries)
        out(f"\nwrote {path}" + (f": --variant fastest is {chosen['runtime']} "
                                 f"{chosen['variant']}" if chosen else ""))
    return CheckResult("record", True)
