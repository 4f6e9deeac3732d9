"""The manual stays a manual: docs/results.md is what `python -m bench.results_page` writes
from the committed result files, and README.md and docs/performance.md stay short."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from bench import results_page
from bench.common import ROOT


def test_results_page_is_generated_from_the_committed_files():
    page = (ROOT / results_page.PAGE).read_text(encoding="utf-8")
    assert page == results_page.build(ROOT), (
        "docs/results.md is stale: run python -m bench.results_page")


def test_check_fails_on_a_stale_page_and_passes_on_a_current_one(monkeypatch, tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    shutil.copytree(ROOT / results_page.RESULTS, tmp_path / results_page.RESULTS)
    monkeypatch.setattr(results_page, "ROOT", tmp_path)
    assert results_page.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert results_page.main([]) == 0
    assert results_page.main(["--check"]) == 0
    # A new result in a committed file changes the page: the check catches it.
    path = tmp_path / results_page.RESULTS / "recipe.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["runs"][0]["final"]["test_bleu"] = 12.34
    path.write_text(json.dumps(data), encoding="utf-8")
    assert "| 12.34 |" in results_page.build(tmp_path)
    assert results_page.main(["--check"]) == 1


def test_a_hand_kept_figure_needs_its_run_cpu_and_date(tmp_path):
    shutil.copytree(ROOT / results_page.RESULTS, tmp_path / results_page.RESULTS)
    path = tmp_path / results_page.HAND_KEPT
    data = json.loads(path.read_text(encoding="utf-8"))
    assert all(run["cpu"] and run["date"] for run in data["runs"])
    del data["runs"][0]["cpu"]
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="lacks cpu"):
        results_page.build(tmp_path)


@pytest.mark.parametrize("path, limit", [("README.md", 150), ("docs/performance.md", 300),
                                         ("docs/training.md", 600)])
def test_the_manual_stays_short(path, limit):
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    assert len(lines) < limit, f"{path} has {len(lines)} lines; keep it under {limit}"


FENCE = re.compile(r"^ *```.*?^ *```", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path):
    """GitHub's heading anchors: lower-cased, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    slugs = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = 0
        while (slug if n == 0 else f"{slug}-{n}") in slugs:
            n += 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def test_every_relative_link_of_the_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
