"""What an export.parity check takes and gives: the ParityRun every check of one export
shares, and the CheckResult each returns (export/kinds/ lists each kind's checks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .common import Manifest
from .formats import FORMATS


@dataclass
class CheckResult:
    """What one parity check found: its name and whether it passed (its lines are printed
    as it runs)."""

    name: str
    passed: bool


# A parity check: (ParityRun, out) -> CheckResult, printing its lines with `out` as it runs.
Check = Callable[["ParityRun", Callable], CheckResult]


def exported_formats(manifest: Manifest) -> tuple[list[str], list[str]]:
    """(the formats the export holds, those it does not), in the order of FORMATS: the
    runtimes a check holds to keras, and those it says it leaves out."""
    present = [fmt for fmt in FORMATS if fmt in manifest["formats"]]
    return present, [fmt for fmt in FORMATS if fmt not in present]


@dataclass
class ParityRun:
    """What export.parity's checks of one export share: the settings it was run with, the
    runtimes loaded, and what a check leaves for a later one (`state`)."""

    manifest: Manifest
    run_dir: str | Path | None = None
    sentences: int = 200
    beam_sentences: int = 50
    bleu_sentences: int = 1000
    sources: list[str] | None = None
    references: list[str] | None = None
    record: bool = False
    backends: dict | None = None
    # load(runtime, variant="float32", search_graph=True): export.runtime.load_backend
    load: Callable | None = None
    # open(manifest, runtime, variant, run_dir): export.kinds.open_runner, for the exports
    # inside this one (a pipeline's stages)
    open: Callable | None = None
    results: list[CheckResult] = field(default_factory=list)
    state: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(result.passed for result in self.results)
