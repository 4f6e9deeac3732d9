"""What the decoding kinds (a translator, a language model) share: an export of `decode_step`
(and `encode`) in every format, the run's SentencePiece models and search settings, the ONNX
step and the search graph, and runtimes that are keras_transformer.generation Backends. What
the encoder adds (`translate`, search.onnx, attention.onnx) is the translator's to switch on."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from keras_transformer.decoding.settings import SEQ2SEQ_KEYS, SearchSettings

from ...common import SEARCH_BLOCK, ExportError, Manifest, _check
from ..base import ExportKind, ExportOptions, write_manifest

log = logging.getLogger("export")


def tokenizer_files(run_dir: Path) -> tuple[str, str]:
    """The run's (source, target) SentencePiece files, checked to load."""
    from keras_transformer.text.tokenizer import SentencePieceTokenizer

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


def run_settings(run_dir: Path) -> dict:
    """The run's task and the search settings of its config.yaml `eval:` section (the
    manifest's `task` and `search`); only what the config holds (an older run may hold
    fewer keys)."""
    from ...module import run_config

    config = run_config(run_dir)
    evaluation = config.get("eval") if isinstance(config.get("eval"), dict) else {}
    search = {k: evaluation[k] for k in SEQ2SEQ_KEYS if k in evaluation}
    settings = {SEARCH_BLOCK: search} if search else {}
    if isinstance(config.get("task"), str):
        settings["task"] = config["task"]
    return settings


def export_onnx(model, out: Path, int8: bool, lean: bool = True,
                search: bool = True) -> dict[str, dict[str, str]]:
    """encoder.onnx (tf2onnx; none for a language model) + decoder_step.onnx
    (export.onnx_graph), opset 17, checked, through export.onnx_optimize when `lean`, and
    dynamic-int8 copies; with `search`, a seq2seq model's search.onnx too (export.onnx_search:
    encoder, steps and search in one graph; and search.int8.onnx with `int8`)."""
    from ...module import decoding_module
    from ...onnx_convert import convert_function
    from ...onnx_graph import build_decoder_step
    from ...onnx_optimize import int8_file, ort_extended, write_int8, write_variants

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

        from ...onnx_search import SEARCH_FILE, build_search

        log.info("building %s (encoder, steps and search in one graph)", SEARCH_FILE)
        graph = build_search(model, rewritten["encoder"])
        onnx.save(ort_extended(graph) if lean else graph, str(out / SEARCH_FILE))
        variants["float32"]["search"] = SEARCH_FILE
        if int8:
            write_int8(graph, out / int8_file(SEARCH_FILE), lean)
            variants["int8"]["search"] = int8_file(SEARCH_FILE)
    return variants


class DecodingKind(ExportKind):
    """A kind whose export decodes step by step (a translator, a language model): its
    runtimes are keras_transformer.generation Backends over `decode_step` (and `encode`)."""

    def validate_section(self, data):
        """Both tokenizers, both vocabularies, pad/unk/bos/eos, both maximum lengths and the
        decoder's shape (a language model's manifest has them as a translator's does)."""
        tokenizer = _check(data, "tokenizer", dict, "")
        for key in ("source", "target"):
            _check(tokenizer, key, str, "tokenizer")
        vocab = _check(data, "vocab", dict, "")
        for key in ("source_size", "target_size"):
            _check(vocab, key, int, "vocab", minimum=1)
        special_ids = _check(data, "special_ids", dict, "")
        for key in ("pad", "unk", "bos", "eos"):
            value = _check(special_ids, key, int, "special_ids", minimum=0)
            if value >= vocab["target_size"]:
                raise ExportError(f"key 'special_ids.{key}' is {value}, not below "
                                  f"vocab.target_size {vocab['target_size']}")
        for key in ("max_source_length", "max_target_length"):
            _check(data, key, int, "", minimum=1)
        model = _check(data, "model", dict, "")
        for key in ("num_decoder_layers", "d_model", "num_heads"):
            _check(model, key, int, "model", minimum=1)
        if not isinstance(model.get("copy_attention", False), bool):
            raise ExportError("key 'model.copy_attention' must be true or false")
        if model["d_model"] % model["num_heads"]:
            raise ExportError(f"key 'model.d_model' ({model['d_model']}) is not a multiple of "
                              f"'model.num_heads' ({model['num_heads']})")

    def backend(self, manifest, runtime, variant, run_dir, search_graph, threads):
        if runtime == "onnx":
            from ...runtime.onnx import OnnxBackend

            return OnnxBackend(manifest, variant, threads.count, search_graph,
                               threads.spinning)
        if runtime == "tflite":
            from ...runtime.tflite import TFLiteBackend

            return TFLiteBackend(manifest, variant, threads.count or None)
        import tensorflow_text  # noqa: F401  (the ops of a translator's SavedModel `translate`)

        from ...runtime.tf import SavedModelBackend, run_model

        if runtime == "savedmodel":
            return SavedModelBackend(manifest)
        return self.keras_backend(manifest, run_model(manifest, run_dir, self))

    def keras_backend(self, manifest: Manifest, model):
        """The Backend over the run's float32 Keras model."""
        raise NotImplementedError

    def load_float32(self, run_dir: Path, trained):
        from ...module import float32_transformer

        return float32_transformer(run_dir, trained)

    # What the encoder brings to a translator's export, none of which a decoder alone has.
    def translate_signature(self, options: ExportOptions) -> bool:
        """Whether the SavedModel gets the strings-to-strings `translate`."""
        return False

    def search_graph(self, options: ExportOptions) -> bool:
        """Whether the ONNX export gets search.onnx, the whole search in one graph."""
        return False

    def attention(self, model, out: Path, options: ExportOptions) -> dict | None:
        """attention.onnx's manifest entry, with --with-attention."""
        return None

    def export_parts(self, out: Path, run_dir: Path, options: ExportOptions,
                     versions: dict) -> tuple[dict, list[str]]:
        """The exports of a pipeline's other stages, made inside `out`: (the manifest's
        entries for them, the files they hold, relative to `out`); none by default."""
        return {}, []

    def export_into(self, out, run_dir, trained, options, versions):
        from keras_transformer.text.tokenizer import SentencePieceTokenizer

        from ...formats import export_formats
        from ...module import decoding_module

        model = self.load_float32(run_dir, trained)
        source_tok, target_tok = tokenizer_files(run_dir)
        c = model.config
        for name in {source_tok, target_tok}:
            shutil.copyfile(run_dir / name, out / name)
        settings = run_settings(run_dir)
        add_translate = None
        if self.translate_signature(options):
            # The search the manifest's `search` block records, baked into the graph.
            search = SearchSettings.from_mapping(settings.get(SEARCH_BLOCK, {}), "eval")

            def add_translate(signatures):
                from ...translate_graph import add_translate

                return {**signatures, "translate": add_translate(module, out / source_tok,
                                                                 out / target_tok, search)}
        module = decoding_module(model)
        manifest_formats = export_formats(
            out, module, self.signatures, options.formats, options.quantize,
            options.onnx_optimize,
            lambda out, int8, lean: export_onnx(model, out, int8, lean,
                                                search=self.search_graph(options)),
            add_translate)
        parts, part_files = self.export_parts(out, run_dir, options, versions)
        return write_manifest(out, self.name, run_dir, manifest_formats,
                              {source_tok, target_tok, *part_files}, {
            **settings,
            **parts,
            "tokenizer": {"source": source_tok, "target": target_tok},
            "vocab": {"source_size": c.source_vocab_size, "target_size": c.target_vocab_size},
            "special_ids": {"pad": c.pad_id,
                            "unk": SentencePieceTokenizer(out / target_tok).unk_id,
                            "bos": c.bos_id, "eos": c.eos_id},
            "max_source_length": c.max_source_length,
            "max_target_length": c.max_target_length,
            "model": {"num_decoder_layers": c.num_decoder_layers, "d_model": c.d_model,
                      "num_encoder_layers": c.num_encoder_layers, "num_heads": c.num_heads,
                      "copy_attention": bool(getattr(c, "copy_attention", False)),
                      "parameters": int(model.count_params())},
            "interface": self.interface,
        }, self.attention(model, out, options), versions)

    def model_differences(self, manifest, run_dir: Path, trained) -> list[str]:
        """The keys of the manifest's model that the run's model_config.json gives otherwise."""
        try:
            config = json.loads((run_dir / "model_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ExportError(f"{run_dir / 'model_config.json'} could not be read: {err}"
                              ) from err
        return sorted(key for key, value in manifest.model.items()
                      if key in config and config[key] != value)
