"""Run directory -> export directory: SavedModel, ONNX and TFLite files plus manifest.json.

A translation run (a seq2seq Transformer) exports `encode` and `decode_step`; a language-model
run (a TransformerLM, chosen by the model's class whatever the run's task) exports
`decode_step` alone, and the manifest's "kind" says which.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import tensorflow as tf

from keras_transformer.command_line import command
from keras_transformer.file_safety import atomic_write_text, staged_directory
from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.models.extractor import TransformerExtractor
from keras_transformer.text.tokenizer import SentencePieceTokenizer

from .choice import RECORD
from .common import (
    ATTENTION_INTERFACE,
    DECODING_DEFAULTS,
    DIRECTORY_FORMATS,
    MANIFEST,
    MANIFEST_VERSION,
    Manifest,
    directory_entries,
    file_entry,
)
from .module import (
    attention_function,
    decoding_module,
    float32_transformer,
    load_trained,
    model_kind,
    run_config,
)
from .onnx_convert import convert_function, export_attention
from .onnx_nodes import ONNX_OPSET

log = logging.getLogger("export")

FORMATS = ("savedmodel", "onnx", "tflite")
QUANTIZE = ("none", "fp16", "int8", "all")

_VERSIONED = ("tensorflow", "tensorflow-text", "keras", "tf2onnx", "onnx", "onnxruntime",
              "ai-edge-litert", "sentencepiece", "keras-transformer")


# The interface of a language model's export, in words (manifest.json "interface").
LM_INTERFACE = {
    "decode_step": "tokens int32 (B,), index int32 (), and per layer l cache_keys_l, "
                   "cache_values_l float32 (B,H,T,D/H) -> logits float32 (B,V) of the next "
                   "token, step_key_values float32 (B,L,2,D); the caller writes "
                   "step_key_values[:, l, 0] split into heads into cache_keys_l[:, :, index], "
                   "and [:, l, 1] into cache_values_l. A prompt is fed one token per step, "
                   "from BOS at index 0",
    "onnx_decoder_step": "as decode_step, plus a log_normalizer float32 (B,) output "
                         "(logsumexp of each row of logits)",
}


def _versions() -> dict[str, str]:
    out = {}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _tokenizer_files(run_dir: Path) -> tuple[str, str]:
    if (run_dir / "spm.model").is_file():
        names = ("spm.model", "spm.model")
    elif (run_dir / "spm_source.model").is_file() and (run_dir / "spm_target.model").is_file():
        names = ("spm_source.model", "spm_target.model")
    else:
        raise FileNotFoundError(
            f"{run_dir} has neither spm.model nor spm_source.model + spm_target.model")
    for name in set(names):
        try:
            SentencePieceTokenizer(run_dir / name)
        except Exception as err:  # sentencepiece raises RuntimeError/OSError on a bad file
            raise ValueError(f"{run_dir / name} is not a valid SentencePiece model: "
                             f"{' '.join(str(err).split())[:200]}") from err
    return names


class OutputExists(FileExistsError):
    """--out holds something that is not an export made by this tool."""


def _foreign_entries(out: Path) -> list[str]:
    """The entries of a directory `out` that no export made: all of them unless it holds a
    manifest.json with its keys; else those besides the manifest, the files (or the top
    directories of the files) it lists and parity.json (export.parity's record in an
    export, export/choice.py)."""
    entries = sorted(entry.name for entry in out.iterdir()) if out.is_dir() else []
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        listed = {name.split("/", 1)[0] for name in data["files"]}
        ours = isinstance(data["manifest_version"], int) and isinstance(data["formats"], dict)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return entries
    if not ours:
        return entries
    return [name for name in entries if name not in (MANIFEST, RECORD, *listed)]


def check_output(run_dir: Path, out: Path, overwrite: bool) -> list[str]:
    """Refuse an --out that is a file, is or contains the run directory, lies inside the run
    and holds anything but an earlier export (the run's checkpoints or logs: not even with
    `overwrite`), or (without `overwrite`) holds anything but an earlier export of this
    tool. -> the entries of `out` that no export made, which the export keeps."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file, not a directory")
    run, target = run_dir.resolve(), out.resolve()
    if run == target or run.is_relative_to(target):
        raise ValueError(f"--out {out} {'is' if run == target else 'contains'} the training run "
                         f"{run_dir}; export to another directory (e.g. {run_dir / 'export'})")
    foreign = _foreign_entries(out)
    if foreign and target.is_relative_to(run):
        raise OutputExists(f"--out {out} is a directory of the training run {run_dir} (it "
                           f"holds files an export did not make); --overwrite does not replace "
                           f"a run's own files: export to a new directory such as "
                           f"{run_dir / 'export'}")
    if foreign and not overwrite:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more"
                                          if len(foreign) > 5 else "")
        raise OutputExists(f"--out {out} holds files an export by {command('export')} did "
                           f"not make ({shown}); pass --overwrite to export there anyway "
                           f"(they are kept), or choose another --out")
    return foreign


def _signatures(module) -> dict:
    """{name: concrete function} of the module's encode (a seq2seq model's) and decode_step."""
    names = ("encode", "decode_step") if hasattr(module, "encode") else ("decode_step",)
    return {name: getattr(module, name).get_concrete_function() for name in names}


def export_savedmodel(model, out: Path, source_tokenizer_path: Path | None = None,
                      target_tokenizer_path: Path | None = None) -> list[str]:
    """encode + decode_step (+ translate when the tokenizers are given) -> out/savedmodel; a
    language model's decode_step alone."""
    module = decoding_module(model)
    signatures = _signatures(module)
    if source_tokenizer_path is not None:
        from .translate_graph import add_translate

        signatures["translate"] = add_translate(module, source_tokenizer_path,
                                                target_tokenizer_path)
    path = out / "savedmodel"
    tf.saved_model.save(module, str(path), signatures=signatures)
    return sorted(signatures)


def export_onnx(model, out: Path, int8: bool, lean: bool = True,
                search: bool = True) -> dict[str, dict[str, str]]:
    """encoder.onnx (tf2onnx; none for a language model) + decoder_step.onnx
    (export.onnx_graph), opset 17, checked, through export.onnx_optimize when `lean`, and
    dynamic-int8 copies; with `search`, a seq2seq model's search.onnx too (export.onnx_search:
    encoder, steps and search in one graph; and search.int8.onnx with `int8`)."""

    from .onnx_graph import build_decoder_step
    from .onnx_optimize import int8_file, ort_extended, write_int8, write_variants

    module = decoding_module(model)
    graphs = {}
    if hasattr(module, "encode"):
        graphs["encoder"] = ("encoder.onnx", convert_function(module.encode))
    # The step runs once per token, where tf2onnx's node count costs more than the FLOPs.
    graphs["decoder_step"] = ("decoder_step.onnx", build_decoder_step(model))
    rewritten = {}
    variants = write_variants(graphs, out, int8, lean, rewritten)
    if search and "encoder" in graphs:
        import onnx

        from .onnx_search import SEARCH_FILE, build_search

        log.info("building %s (encoder, steps and search in one graph)", SEARCH_FILE)
        graph = build_search(model, rewritten["encoder"])
        onnx.save(ort_extended(graph) if lean else graph, str(out / SEARCH_FILE))
        variants["float32"]["search"] = SEARCH_FILE
        if int8:
            write_int8(graph, out / int8_file(SEARCH_FILE), lean)
            variants["int8"]["search"] = int8_file(SEARCH_FILE)
    return variants


def export_tflite(model, out: Path, variants: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """One .tflite per variant, each with `encode` (not for a language model) and
    `decode_step` signatures, builtins only."""
    module = decoding_module(model)
    signatures = _signatures(module)
    result = {}
    with tempfile.TemporaryDirectory(prefix=".tflite-savedmodel.", dir=out) as tmp:
        tf.saved_model.save(module, tmp, signatures=signatures)
        for variant in variants:
            converter = tf.lite.TFLiteConverter.from_saved_model(
                tmp, signature_keys=sorted(signatures))
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
            if variant in ("fp16", "int8"):
                converter.optimizations = [tf.lite.Optimize.DEFAULT]
            if variant == "fp16":
                converter.target_spec.supported_types = [tf.float16]
            name = "model.tflite" if variant == "float32" else f"model.{variant}.tflite"
            (out / name).write_bytes(converter.convert())
            result[variant] = {"model": name}
    return result


def export_run(run_dir: str | Path, out_dir: str | Path, formats=FORMATS,
               quantize: str = "none", translate_signature: bool = True,
               overwrite: bool = False, with_attention: bool = False,
               onnx_optimize: bool = True, search_graph: bool = True) -> dict:
    """Export a training run; returns the manifest that is also written to out/manifest.json.

    The run is checked (model, tokenizers) and --out with it before anything is written; the
    export is built in a hidden sibling of `out_dir` and swapped in whole at the end, so a
    failed or killed export leaves the previous one as it was. `with_attention` adds
    attention.onnx (the weights the attention explorer, export.serve, shows) to a
    translator's or a classifier's export. `onnx_optimize` False writes the ONNX graphs
    without export.onnx_optimize's pass (standard operators only). `search_graph` False leaves
    out a translator's search.onnx (export.onnx_search)."""
    run_dir, out = Path(run_dir), Path(out_dir)
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown formats {unknown}; choose from {FORMATS}")
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
    if with_attention and "onnx" not in formats:
        raise ValueError("--with-attention needs the onnx format, whose runtime reads "
                         "attention.onnx: export with --format onnx or --format all")
    # fp16 variants are TFLite's, int8 TFLite's and ONNX's: asked for none of those formats,
    # --quantize would make nothing and say nothing.
    quantizable = {"tflite": {"fp16", "int8"}, "onnx": {"int8"}}
    asked = {"none": set(), "all": {"fp16", "int8"}}.get(quantize, {quantize})
    if asked and not asked & set().union(*(quantizable.get(f, set()) for f in formats)):
        raise ValueError(f"--quantize {quantize} makes no variant with --format "
                         f"{'/'.join(formats)}: fp16 variants are TFLite's, int8 variants "
                         f"TFLite's and ONNX's; add the format (or --format all)")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"training run not found: {run_dir}")
    keep = check_output(run_dir, out, overwrite)
    trained = load_trained(run_dir)
    if isinstance(trained, TransformerClassifier):
        from .classifier import export_classifier_into

        with staged_directory(out, keep) as stage:
            manifest = export_classifier_into(stage, run_dir, trained, formats, quantize,
                                              _versions(), with_attention, onnx_optimize)
            Manifest(stage)
        return manifest
    if isinstance(trained, TransformerExtractor):
        from .extractor import export_extractor_into

        if with_attention:
            raise ValueError("--with-attention is for translation, summarization and "
                             "classification runs; an extractive summarizer's export shows its "
                             "sentence scores instead: export it without --with-attention")
        with staged_directory(out) as stage:
            manifest = export_extractor_into(stage, run_dir, trained, formats, quantize,
                                             _versions(), onnx_optimize)
            Manifest(stage)
        return manifest
    model = float32_transformer(run_dir, trained)
    if with_attention and model_kind(model) == "lm":
        raise ValueError("--with-attention exports the weights the attention explorer shows, "
                         "for a translation, summarization or classification run; a language "
                         "model's export has none: export it without --with-attention")
    source_tok, target_tok = _tokenizer_files(run_dir)
    with staged_directory(out, keep) as stage:
        manifest = _export_into(stage, run_dir, model, formats, quantize, translate_signature,
                                source_tok, target_tok, with_attention, onnx_optimize,
                                search_graph)
        Manifest(stage)  # the manifest as a reader will see it, before it replaces anything
    return manifest


def run_settings(run_dir: Path) -> dict:
    """The run's task and the search settings of its config.yaml `eval:` section (the
    manifest's `task` and `decoding`); only what the config holds (an older run may hold
    fewer keys)."""
    config = run_config(run_dir)
    evaluation = config.get("eval") if isinstance(config.get("eval"), dict) else {}
    decoding = {k: evaluation[k] for k in DECODING_DEFAULTS if k in evaluation}
    settings = {"decoding": decoding} if decoding else {}
    if isinstance(config.get("task"), str):
        settings["task"] = config["task"]
    return settings


def _export_into(out: Path, run_dir: Path, model, formats, quantize: str,
                 translate_signature: bool, source_tok: str, target_tok: str,
                 with_attention: bool = False, onnx_optimize: bool = True,
                 search_graph: bool = True) -> dict:
    c = model.config
    kind = model_kind(model)
    # The strings-to-strings translate signature is the seq2seq model's only.
    translate_signature = translate_signature and kind == "translator"
    for name in {source_tok, target_tok}:
        shutil.copyfile(run_dir / name, out / name)

    manifest_formats: dict = {}
    if "savedmodel" in formats:
        log.info("exporting SavedModel")
        sig = export_savedmodel(
            model, out,
            source_tokenizer_path=(out / source_tok) if translate_signature else None,
            target_tokenizer_path=(out / target_tok) if translate_signature else None)
        manifest_formats["savedmodel"] = {"signatures": sig,
                                          "variants": {"float32": {"model": "savedmodel"}}}
    if "onnx" in formats:
        log.info("exporting ONNX (opset %d)", ONNX_OPSET)
        manifest_formats["onnx"] = {"opset": ONNX_OPSET, "optimized": onnx_optimize,
                                    "variants": export_onnx(model, out,
                                                            int8=quantize in ("int8", "all"),
                                                            lean=onnx_optimize,
                                                            search=search_graph)}
    if "tflite" in formats:
        log.info("exporting TFLite")
        variants = {"none": ("float32",), "fp16": ("float32", "fp16"),
                    "int8": ("float32", "int8"), "all": ("float32", "fp16", "int8")}[quantize]
        manifest_formats["tflite"] = {
            "signatures": ["decode_step", "encode"] if kind == "translator" else ["decode_step"],
            "variants": export_tflite(model, out, variants)}

    attention = None
    if with_attention:
        log.info("exporting the attention weights (ONNX)")
        attention = export_attention(attention_function(model), out, ATTENTION_INTERFACE,
                                     onnx_optimize)

    files = {name: file_entry(out, out / name) for name in sorted({source_tok, target_tok})}
    if attention is not None:
        files[attention["file"]] = file_entry(out, out / attention["file"])
    for fmt_name, fmt in manifest_formats.items():
        for variant in fmt["variants"].values():
            for name in variant.values():
                if fmt_name in DIRECTORY_FORMATS:
                    files.update(directory_entries(out, name))
                else:
                    files[name] = file_entry(out, out / name)
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "kind": kind,
        "run": str(run_dir.resolve()),
        **run_settings(run_dir),
        "formats": manifest_formats,
        "files": dict(sorted(files.items())),
        "tokenizer": {"source": source_tok, "target": target_tok},
        "vocab": {"source_size": c.source_vocab_size, "target_size": c.target_vocab_size},
        "special_ids": {"pad": c.pad_id, "unk": SentencePieceTokenizer(out / target_tok).unk_id,
                        "bos": c.bos_id, "eos": c.eos_id},
        "max_source_length": c.max_source_length,
        "max_target_length": c.max_target_length,
        "model": {"num_decoder_layers": c.num_decoder_layers, "d_model": c.d_model,
                  "num_encoder_layers": c.num_encoder_layers, "num_heads": c.num_heads,
                  "copy_attention": bool(getattr(c, "copy_attention", False)),
                  "parameters": int(model.count_params())},
        "interface": LM_INTERFACE if kind == "lm" else {
            "encode": "source_ids int32 (B,S) -> per decoder layer l cross_keys_l, "
                      "cross_values_l float32 (B,H,S,D/H), and memory_mask bool (B,S)",
            "decode_step": "tokens int32 (B,), memory_mask bool (B,S), index int32 (), "
                           "cross_keys_l, cross_values_l as encode gives them, and per layer l "
                           "cache_keys_l, cache_values_l float32 (B,H,T,D/H) -> logits float32 "
                           "(B,V), step_key_values float32 (B,L,2,D); the caller writes "
                           "step_key_values[:, l, 0] split into heads into "
                           "cache_keys_l[:, :, index], and [:, l, 1] into cache_values_l; "
                           "with model.copy_attention, encode also returns and decode_step "
                           "also takes copy_source_ids int32 (B,S), and logits are the copy "
                           "mixture's log-probabilities",
            "onnx_decoder_step": "as decode_step, plus a log_normalizer float32 (B,) output "
                                 "(logsumexp of each row of logits)",
            "onnx_search": "source_ids int32 (B,S), max_length int32 (), beam_size int32 () "
                           "(1: greedy), alpha float64 (), no_repeat_ngram_size int32 (), "
                           "min_length int32 () -> tokens int32 (B,T) (PAD after EOS), scores "
                           "float32 (B,): the whole search of keras_transformer.decoding in "
                           "one call",
        },
        "versions": _versions(),
    }
    if attention is not None:
        manifest["attention"] = attention
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest
