"""What every runtime shares: the manifest of an export directory and the names of its tensors.

NumPy and the standard library only, so the TensorFlow-free runtimes can import it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "manifest.json"
MANIFEST_VERSION = 2
# The weight variants each format can be exported in (export.exporters): ONNX is quantized
# dynamically to int8 only; the TF formats stay float32.
FORMAT_VARIANTS = {"onnx": ("float32", "int8"), "tflite": ("float32", "fp16", "int8"),
                   "savedmodel": ("float32",)}


class ExportError(RuntimeError):
    """An export directory is missing a file, has a corrupt one, or lacks a format."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_entry(root: Path, path: Path) -> dict:
    """A file (or a directory, summed) -> {"bytes", "sha256"} as recorded in the manifest."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        digest = hashlib.sha256()
        for p in files:
            digest.update(str(p.relative_to(path)).encode())
            digest.update(sha256(p).encode())
        return {"bytes": sum(p.stat().st_size for p in files), "sha256": digest.hexdigest()}
    return {"bytes": path.stat().st_size, "sha256": sha256(path)}


class Manifest:
    """The parsed ``manifest.json`` of an export directory, with checked file access."""

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
        version = self.data.get("manifest_version")
        if version != MANIFEST_VERSION:
            raise ExportError(
                f"{path} has manifest_version {version!r}; this code reads version "
                f"{MANIFEST_VERSION}. Re-export the run with this version of the code.")
        self._checked: set[str] = set()

    def __getitem__(self, key):
        return self.data[key]

    @property
    def model(self) -> dict:
        return self.data["model"]

    @property
    def special_ids(self) -> dict:
        return self.data["special_ids"]

    def file(self, relative: str, verify: bool = True) -> Path:
        """Path of a file listed in the manifest; ExportError naming it if missing or corrupt."""
        path = self.root / relative
        entry = self.data["files"].get(relative)
        if entry is None:
            raise ExportError(f"{relative} is not listed in {self.root / MANIFEST}")
        if not path.exists():
            raise ExportError(f"{path} is missing from the export directory; re-export the run")
        if verify and relative not in self._checked:
            if file_entry(self.root, path)["sha256"] != entry["sha256"]:
                raise ExportError(
                    f"{path} is corrupt: its checksum does not match {MANIFEST}; re-export the run")
            self._checked.add(relative)
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

    def tokenizer_files(self) -> tuple[Path, Path]:
        tok = self.data["tokenizer"]
        return self.file(tok["source"]), self.file(tok["target"])
