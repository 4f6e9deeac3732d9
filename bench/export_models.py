"""Random-weight models of each bench config, exported to SavedModel, ONNX and TFLite once.

    python -m bench.export_models [--configs small base] [--cache-dir /tmp/kt-bench] [--force]
        [--quantize all]

The cache is --cache-dir, else $KT_BENCH_CACHE, else /tmp/kt-bench: every bench script's
--cache-dir defaults to the same (CACHE_DIR).

For each config: <cache>/<config>/run (model.keras, model_config.json, spm.model, the files
export_run reads) and <cache>/<config>/export (manifest.json and every format). An export whose
bench_meta.json matches the config, seed and code (model and exporter sources) is reused.
--quantize all makes <cache>/<config>/export-all instead: ONNX and TFLite with their fp16/int8
variants, from the same run (bench.precision's), with its own bench_meta-all.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.common import CONFIGS, ROOT, SEED, cache_directory  # noqa: E402
from keras_transformer.command_line import add_debug_flag, entry_point  # noqa: E402

# Where the exports are kept unless --cache-dir says: $KT_BENCH_CACHE, else /tmp/kt-bench.
# Read when a bench script starts; `python -m bench --cache-dir DIR` sets it for its steps.
CACHE_ENV = "KT_BENCH_CACHE"
CACHE_DIR = Path(os.environ.get(CACHE_ENV) or "/tmp/kt-bench")
CACHE_HELP = f"where the exports are kept (default {CACHE_DIR}: ${CACHE_ENV}, else /tmp/kt-bench)"
FORMATS = ("savedmodel", "onnx", "tflite")
META = "bench_meta.json"


def export_dir(cache_dir: Path, name: str, quantize: str = "none") -> Path:
    return Path(cache_dir) / name / ("export" if quantize == "none" else f"export-{quantize}")


def _meta_name(quantize: str) -> str:
    return META if quantize == "none" else f"bench_meta-{quantize}.json"


def _formats(quantize: str) -> tuple[str, ...]:
    """Every format; the variants (quantize != none) of the formats that have them."""
    return FORMATS if quantize == "none" else ("onnx", "tflite")


def code_fingerprint() -> str:
    """sha256 of the code that shapes an exported graph: a change there makes exports stale."""
    files = sorted((ROOT / "keras_transformer").rglob("*.py")) + [
        ROOT / "export" / name
        for name in ("common.py", "exporters.py", "module.py", "onnx_convert.py",
                     "onnx_graph.py", "onnx_optimize.py", "onnx_search.py",
                     "translate_graph.py")]
    digest = hashlib.sha256()
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _meta(name: str, seed: int, quantize: str = "none") -> dict:
    meta = {"config_name": name, "config": CONFIGS[name].to_dict(), "seed": seed,
            "formats": list(_formats(quantize)), "code_sha256": code_fingerprint()}
    return meta if quantize == "none" else {**meta, "quantize": quantize}


def is_current(cache_dir: Path, name: str, seed: int = SEED, quantize: str = "none") -> bool:
    """True when the export holds every format of this config and seed, made by this code."""
    root = Path(cache_dir) / name
    try:
        meta = json.loads((root / _meta_name(quantize)).read_text())
        manifest = json.loads((export_dir(cache_dir, name, quantize) / "manifest.json")
                              .read_text())
    except (OSError, ValueError):
        return False
    return (meta == _meta(name, seed, quantize)
            and set(_formats(quantize)) <= set(manifest.get("formats", {})))


def write_tokenizer(run_dir: Path) -> Path:
    """A tiny spm.model: the export format needs one, but the benchmarks feed token ids, so its
    vocabulary (a few hundred pieces, not the model's) never meets the model."""
    from keras_transformer.text.demo_corpus import generate_pairs
    from keras_transformer.text.tokenizer import train_sentencepiece

    texts = [text for pair in generate_pairs(300, seed=0) for text in pair]
    return train_sentencepiece(texts, run_dir / "spm", vocab_size=200)


def write_run(run_dir: Path, name: str, seed: int) -> None:
    from bench.common import build_model

    run_dir.mkdir(parents=True, exist_ok=True)
    model = build_model(CONFIGS[name], seed)
    model.save(run_dir / "model.keras")
    (run_dir / "model_config.json").write_text(json.dumps(CONFIGS[name].to_dict(), indent=2))
    write_tokenizer(run_dir)


def ensure(name: str, cache_dir: Path = CACHE_DIR, seed: int = SEED, force: bool = False,
           quantize: str = "none") -> Path:
    """The export directory of config `name`, made first if missing or stale."""
    root = Path(cache_dir) / name
    out = export_dir(cache_dir, name, quantize)
    if not force and is_current(cache_dir, name, seed, quantize):
        print(f"{name}: reusing {out}")
        return out
    from export.exporters import export_run

    start = time.perf_counter()
    meta = root / _meta_name(quantize)
    meta.unlink(missing_ok=True)  # stale until the export below completes
    write_run(root / "run", name, seed)
    # The translate signature would embed the tokenizer in the graph; the bench never calls it.
    export_run(root / "run", out, formats=_formats(quantize), quantize=quantize,
               translate_signature=False)
    meta.write_text(json.dumps(_meta(name, seed, quantize), indent=2))
    print(f"{name}: exported to {out} in {time.perf_counter() - start:.0f} s")
    return out


def ensure_in_child(name: str, cache_dir: Path = CACHE_DIR, seed: int = SEED,
                    quantize: str = "none") -> Path:
    """ensure() in a separate process, so the caller's peak RSS does not include the export."""
    import subprocess

    if not is_current(cache_dir, name, seed, quantize):
        subprocess.run([sys.executable, "-m", "bench.export_models", "--configs", name,
                        "--cache-dir", str(cache_dir), "--seed", str(seed),
                        "--quantize", quantize], check=True)
    return export_dir(cache_dir, name, quantize)


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default small base (demo with --quick)")
    parser.add_argument("--cache-dir", type=cache_directory, default=CACHE_DIR, help=CACHE_HELP)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--force", action="store_true", help="re-export even if current")
    parser.add_argument("--quick", action="store_true", help="the demo config only")
    parser.add_argument("--quantize", choices=("none", "all"), default="none",
                        help="all: ONNX and TFLite with every fp16/int8 variant, in export-all")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    for name in args.configs or (["demo"] if args.quick else ["small", "base"]):
        ensure(name, args.cache_dir, args.seed, args.force, args.quantize)


if __name__ == "__main__":
    sys.exit(main())
