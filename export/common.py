"""What every runtime shares: the manifest of an export directory and the names of its tensors.

NumPy and the standard library only, so the TensorFlow-free runtimes can import it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from keras_transformer.file_safety import UnsafePath, resolve_inside

MANIFEST = "manifest.json"
# Version 3 lists every file of the SavedModel directory on its own (version 2 summed the
# directory into one entry).
MANIFEST_VERSION = 3
# The weight variants each format can be exported in (export.exporters): ONNX is quantized
# dynamically to int8 only; the TF formats stay float32.
FORMAT_VARIANTS = {"onnx": ("float32", "int8"), "tflite": ("float32", "fp16", "int8"),
                   "savedmodel": ("float32",)}
# What an export holds (manifest "kind"): a seq2seq Transformer's encode and decode_step, or a
# decoder-only TransformerLM's decode_step. A manifest without the key is a seq2seq export.
KINDS = ("seq2seq", "lm")
# Formats whose model is a directory (its files are listed one by one under "files").
DIRECTORY_FORMATS = ("savedmodel",)
# Bounds on the numbers a manifest gives the runtimes (array sizes and loop lengths).
_LIMIT = 1 << 20


class ExportError(RuntimeError):
    """An export directory is missing a file, has a corrupt one, or lacks a format. The input
    is wrong, not the work: command-line tools exit with code 2."""

    exit_code = 2


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_entry(root: Path, path: Path) -> dict:
    """A file -> {"bytes", "sha256"} as recorded in the manifest (a directory is refused: each
    of its files has its own entry)."""
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory; a manifest entry is one file")
    return {"bytes": path.stat().st_size, "sha256": sha256(path)}


def directory_entries(root: Path, directory: str) -> dict[str, dict]:
    """{"<directory>/<relative path>": file_entry} of every file below root/directory, for
    the exporter to record (symlinks are refused: an export holds plain files)."""
    base = root / directory
    entries = {}
    for path in sorted(base.rglob("*")):
        if path.is_symlink():
            raise UnsafePath(f"{path} is a symlink; an export holds plain files only")
        if path.is_file():
            entries[path.relative_to(root).as_posix()] = file_entry(root, path)
    return entries


def _check(data, key: str, kind, where: str, minimum: int | None = None,
           maximum: int | None = _LIMIT):
    """data[key] of type `kind`, or ExportError naming the key (dotted, from `where`)."""
    name = f"{where}.{key}" if where else key
    if not isinstance(data, dict) or key not in data:
        raise ExportError(f"key {name!r} is missing")
    value = data[key]
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and minimum is not None and (value < minimum or (maximum is not None
                                                               and value > maximum)):
            bound = f"[{minimum}, {maximum}]" if maximum is not None else f"at least {minimum}"
            raise ExportError(f"key {name!r} is {value}, not {bound}")
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ExportError(f"key {name!r} must be {getattr(kind, '__name__', kind)}, not "
                          f"{type(value).__name__}")
    return value


def validate(data) -> None:
    """ExportError naming the first key of a manifest that is missing or of the wrong type."""
    if not isinstance(data, dict):
        raise ExportError(f"the manifest must be a JSON object, not {type(data).__name__}")
    files = _check(data, "files", dict, "")
    for name, entry in files.items():
        _check(entry, "sha256", str, f"files.{name}")
        _check(entry, "bytes", int, f"files.{name}", minimum=0, maximum=None)
    formats = _check(data, "formats", dict, "")
    for fmt, spec in formats.items():
        variants = _check(spec, "variants", dict, f"formats.{fmt}")
        for variant, roles in variants.items():
            where = f"formats.{fmt}.variants.{variant}"
            if not isinstance(roles, dict) or not roles:
                raise ExportError(f"key {where!r} must be a non-empty object of file names")
            for role in roles:
                _check(roles, role, str, where)
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
    if model["d_model"] % model["num_heads"]:
        raise ExportError(f"key 'model.d_model' ({model['d_model']}) is not a multiple of "
                          f"'model.num_heads' ({model['num_heads']})")
    if "run" in data:
        _check(data, "run", str, "")
    if "kind" in data and _check(data, "kind", str, "") not in KINDS:
        raise ExportError(f"key 'kind' is {data['kind']!r}, not one of {', '.join(KINDS)}")


def variant_bytes(data: dict, files: dict[str, str]) -> int:
    """Bytes on disk of one variant's files (a directory format: all the files below it)."""
    total = 0
    for name in files.values():
        if name in data["files"]:
            total += data["files"][name]["bytes"]
        else:
            total += sum(entry["bytes"] for key, entry in data["files"].items()
                         if key.startswith(f"{name}/"))
    return total


class Manifest:
    """The parsed ``manifest.json`` of an export directory, with checked file access: every
    path it names is resolved inside the directory (file_safety.resolve_inside) and checked
    against its recorded sha256 before use."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        path = self.root / MANIFEST
        if not self.root.is_dir():
            raise ExportError(f"export directory not found: {self.root}")
        if not path.is_file():
            raise ExportError(
                f"{path} is missing: {self.root} is not an export directory "
                f"(make one with `python -m export --run runs/<name> --out {self.root}`)")
        try:
            self.data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ExportError(f"{path} is corrupt (not valid JSON): {err}") from err
        version = self.data.get("manifest_version") if isinstance(self.data, dict) else None
        if version != MANIFEST_VERSION:
            raise ExportError(
                f"{path} has manifest_version {version!r}; this code reads version "
                f"{MANIFEST_VERSION}. Re-export the run with this version of the code.")
        try:
            validate(self.data)
        except ExportError as err:
            raise ExportError(f"{path} is invalid: {err}") from None
        self._checked: set[str] = set()

    def __getitem__(self, key):
        return self.data[key]

    @property
    def model(self) -> dict:
        return self.data["model"]

    @property
    def kind(self) -> str:
        """"seq2seq" (encode + decode_step) or "lm" (decode_step alone); see KINDS."""
        return self.data.get("kind", "seq2seq")

    @property
    def special_ids(self) -> dict:
        return self.data["special_ids"]

    def _resolve(self, relative: str, what: str) -> Path:
        try:
            return resolve_inside(self.root, relative, what=what,
                                  source=str(self.root / MANIFEST))
        except UnsafePath as err:
            raise ExportError(f"refusing a path of the manifest: {err}") from None

    def file(self, relative: str, verify: bool = True) -> Path:
        """Path of a file listed in the manifest; ExportError naming it if it is missing,
        corrupt, or would leave the export directory."""
        path = self._resolve(relative, "file")
        entry = self.data["files"].get(relative)
        if entry is None:
            raise ExportError(f"{relative} is not listed in {self.root / MANIFEST}")
        if not path.exists():
            raise ExportError(f"{path} is missing from the export directory; re-export the run")
        if verify and relative not in self._checked:
            if not path.is_file() or sha256(path) != entry["sha256"]:
                raise ExportError(
                    f"{path} is corrupt: its checksum does not match {MANIFEST}; re-export the run")
            self._checked.add(relative)
        return path

    def directory(self, relative: str, verify: bool = True) -> Path:
        """Path of a directory format (the SavedModel): each file the manifest lists below it
        is checked as `file` checks one; a file there that the manifest does not list is
        refused, since a loader would read it unchecked."""
        path = self._resolve(relative, "directory")
        if not path.is_dir():
            raise ExportError(f"{path} is missing from the export directory; re-export the run")
        listed = {name for name in self.data["files"] if name.startswith(f"{relative}/")}
        if not listed:
            raise ExportError(f"{relative} has no files listed in {self.root / MANIFEST}")
        for name in sorted(listed):
            self.file(name, verify)
        for found in path.rglob("*"):
            name = found.relative_to(self.root).as_posix()
            if (found.is_file() or found.is_symlink()) and name not in listed:
                raise ExportError(f"{found} is not listed in {MANIFEST}: the export was "
                                  f"changed after it was made; re-export the run")
        return path

    def format_files(self, fmt: str, variant: str = "float32") -> dict[str, str]:
        """{role: relative path} of one exported format and variant, e.g. ("onnx", "int8")."""
        formats = self.data["formats"]
        if fmt not in formats:
            raise ExportError(
                f"{self.root} has no {fmt} export (it has {sorted(formats)}); run "
                f"`python -m export --run <run dir> --format {fmt} --out {self.root}`")
        variants = formats[fmt]["variants"]
        if variant not in variants:
            possible = FORMAT_VARIANTS.get(fmt, ("float32",))
            fix = (f"export with --quantize {variant}" if variant in possible else
                   f"{fmt} has only the variants {', '.join(possible)}")
            raise ExportError(
                f"{self.root} has no {variant} variant of {fmt} (it has {sorted(variants)}); "
                f"{fix}")
        return variants[variant]

    def verify(self) -> None:
        """Check every path the manifest names (files, formats, tokenizers) and every file's
        checksum: ExportError for the first that is missing, corrupt or outside."""
        for name in self.data["files"]:
            self.file(name)
        for fmt, spec in self.data["formats"].items():
            for roles in spec["variants"].values():
                for name in roles.values():
                    if fmt in DIRECTORY_FORMATS:
                        self.directory(name)
                    else:
                        self.file(name)
        self.tokenizer_files()

    def tokenizer_files(self) -> tuple[Path, Path]:
        tok = self.data["tokenizer"]
        return self.file(tok["source"]), self.file(tok["target"])
