"""What every runtime shares: the manifest of an export directory and the names of its tensors.

NumPy and the standard library only, so the TensorFlow-free runtimes can import it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from keras_transformer.command_line import command
from keras_transformer.decoding import SearchSettings
from keras_transformer.file_safety import UnsafePath, resolve_inside
from keras_transformer.text.bottom_up import check_source, check_top_k

from .formats import FORMATS, variants_of

MANIFEST = "manifest.json"
# Version 3 lists every file of the SavedModel directory on its own (version 2 summed the
# directory into one entry). Version 4 may add "task", "search" (the run's search settings;
# older exports name it "decoding") and "attention"; it is version 3 plus optional keys, so
# version 3 manifests are read as they are.
MANIFEST_VERSION = 4
READABLE_VERSIONS = (3, 4)
# The attention-weights graph of `python -m export --with-attention` (export.serve shows it),
# for a translator and for a classifier.
ATTENTION_FILE = "attention.onnx"
ATTENTION_INTERFACE = (
    "source_ids int32 (1,S) ending in EOS, target_ids int32 (1,T) = BOS and the generated "
    "tokens, memory_mask bool (1,S) = the source positions the decoder attends to -> per "
    "layer stacked: encoder_self float32 (L,H,S,S), decoder_self (L,H,T,T) "
    "(zero above the diagonal), cross (L,H,T,S); row i of the decoder's weights is the step "
    "that produced output token i")
# A classifier's attention.onnx: its classify graph with one more output.
CLASSIFIER_ATTENTION_INTERFACE = (
    "ids int32 (B,S): pieces + EOS, right-padded with PAD, as classify takes them -> "
    "probabilities float32 (B,C), logits float32 (B,C), and encoder_self float32 (B,L,H,S,S), "
    "every encoder layer's self-attention weights stacked (rows are queries and sum to 1; "
    "the columns of PAD keys are 0)")
# The kinds of export by manifest name: export.kinds.KINDS (each kind's title, default task,
# tool and manifest keys), handed over by register_kinds when export.kinds is imported, which
# export/__init__.py does first. The kinds import this module, so it cannot import them. A
# manifest without "kind" is a translator's.
_KINDS: dict = {}
# The block of the run's search settings (keras_transformer.decoding.SearchSettings), and the
# name older exports gave it.
SEARCH_BLOCK, OLD_SEARCH_BLOCK = "search", "decoding"
# Bounds on the numbers a manifest gives the runtimes (array sizes and loop lengths).
_LIMIT = 1 << 20


class ExportError(RuntimeError):
    """An export directory is missing a file, has a corrupt one, or lacks a format. The input
    is wrong, not the work: command-line tools exit with code 2."""

    exit_code = 2


def register_kinds(kinds: dict) -> None:
    """Take export.kinds' registry (name -> kind), which validate and Manifest ask."""
    _KINDS.update(kinds)


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


def listed_files(out: Path, manifest_formats: dict, names=()) -> dict:
    """The manifest's "files": every format's files and the other `names`, with their
    sizes and digests, sorted."""
    files = {name: file_entry(out, out / name) for name in names}
    for fmt_name, fmt in manifest_formats.items():
        for variant in fmt["variants"].values():
            for name in variant.values():
                if FORMATS[fmt_name].directory:
                    files.update(directory_entries(out, name))
                else:
                    files[name] = file_entry(out, out / name)
    return dict(sorted(files.items()))


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
    kind = data.get("kind", "translator")
    if kind not in _KINDS:
        raise ExportError(f"key 'kind' is {kind!r}, not one of {', '.join(_KINDS)}")
    _KINDS[kind].validate_section(data)
    if "run" in data:
        _check(data, "run", str, "")
    if "task" in data:
        _check(data, "task", str, "")
    for block in (SEARCH_BLOCK, OLD_SEARCH_BLOCK):
        if block in data:
            _search_settings(_check(data, block, dict, ""), block)
    if "attention" in data:
        attention = _check(data, "attention", dict, "")
        name = _check(attention, "file", str, "attention")
        if name not in files:
            raise ExportError(f"key 'attention.file' names {name!r}, which 'files' does not list")
    if "selector" in data:
        _selector(data, files)


def _selector(data: dict, files: dict) -> None:
    """A pipeline's `selector` block: the sub-export of its selector, which `files` lists,
    epsilon in [0, 1], and where given top_k (>= 0) and source."""
    selector = _check(data, "selector", dict, "")
    directory = _check(selector, "export", str, "selector")
    if f"{directory}/{MANIFEST}" not in files or "/" in directory or directory in ("", ".", ".."):
        raise ExportError(f"key 'selector.export' names {directory!r}, which is not a "
                          f"sub-export that 'files' lists")
    epsilon = selector.get("epsilon")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (
            0 <= epsilon <= 1):
        raise ExportError(f"key 'selector.epsilon' must be a number from 0 to 1, got "
                          f"{epsilon!r}")
    for key, check in (("top_k", check_top_k), ("source", check_source)):
        if key in selector:
            try:
                check(selector[key])
            except ValueError as err:
                raise ExportError(f"key 'selector.{key}': {err}") from None


def _search_settings(block: dict, name: str) -> SearchSettings:
    try:
        return SearchSettings.from_mapping(block, f"key {name!r}")
    except ValueError as err:
        raise ExportError(str(err)) from None


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
                f"(make one with `{command('export')} --run runs/<name> --out {self.root}`)")
        try:
            self.data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ExportError(f"{path} is corrupt (not valid JSON): {err}") from err
        version = self.data.get("manifest_version") if isinstance(self.data, dict) else None
        if version not in READABLE_VERSIONS:
            raise ExportError(
                f"{path} has manifest_version {version!r}; this code reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}. Re-export the run with this "
                f"version of the code.")
        try:
            validate(self.data)
        except ExportError as err:
            raise ExportError(f"{path} is invalid: {err}") from None
        self._checked: set[str] = set()

    def __getitem__(self, key):
        return self.data[key]

    @property
    def kind(self) -> str:
        """A name of export.kinds.KINDS ("translator" when the manifest names none)."""
        return self.data.get("kind", "translator")

    def require_kind(self, kind: str, tool: str) -> None:
        """ExportError (exit 2) when the export holds another kind of model than `tool` runs."""
        if self.kind != kind:
            held = _KINDS[self.kind]
            raise ExportError(f"{self.root} holds a {held.title}, not a "
                              f"{_KINDS[kind].title}: {tool} cannot run it; use "
                              f"{command(held.tool)}")

    @property
    def model(self) -> dict:
        return self.data["model"]

    @property
    def task(self) -> str:
        """The run's task (translation, summarization, ...); when unrecorded, its kind's
        default_task."""
        return self.data.get("task", _KINDS[self.kind].default_task)

    @property
    def search(self) -> SearchSettings:
        """The run's search settings (beam_size, alpha, no_repeat_ngram_size, min_length), the
        defaults where the manifest records none."""
        block = SEARCH_BLOCK if SEARCH_BLOCK in self.data else OLD_SEARCH_BLOCK
        return _search_settings(self.data.get(block, {}), block)

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
                f"`{command('export')} --run <run dir> --format {fmt} --out {self.root}`")
        variants = formats[fmt]["variants"]
        if variant not in variants:
            possible = variants_of(fmt)
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
                    if fmt in FORMATS and FORMATS[fmt].directory:
                        self.directory(name)
                    else:
                        self.file(name)
        for name in self.data["tokenizer"].values():
            self.file(name)


    def attention_file(self) -> Path:
        """attention.onnx, checked like every file; ExportError with the fix when the export
        was made without it."""
        if "attention" not in self.data:
            raise ExportError(
                f"{self.root} has no attention weights; export the run again with "
                f"--with-attention ({command('export')} --run <run dir> --out {self.root} "
                f"--with-attention)")
        return self.file(self.data["attention"]["file"])

    def tokenizer_files(self) -> tuple[Path, Path]:
        tok = self.data["tokenizer"]
        return self.file(tok["source"]), self.file(tok["target"])
