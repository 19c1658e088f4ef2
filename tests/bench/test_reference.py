"""bench/reference.json is the README Performance table's figures that `make bench-check` compares
against: the README must say each of them, and the check must read and rank them the right way."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bench import bench_check
from bench._results import measured, stamp_file, write_result

ROOT = Path(__file__).resolve().parents[2]


def _performance_section() -> str:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"^## Performance\n(.*?)(?=^## )", readme, re.S | re.M)
    assert match, "the README has a Performance section"
    return match.group(1)


def test_the_readme_says_every_reference_figure() -> None:
    section = _performance_section()
    figures = bench_check.load_reference()
    assert {f["bench"] for f in figures} == set(bench_check.QUICK)
    for f in figures:
        assert f["readme"] in section, f"README's Performance section does not say {f['readme']!r} ({f['bench']})"
        assert f["better"] in {"lower", "higher"} and f["value"] > 0


def test_worse_by_reads_each_figure_the_right_way() -> None:
    lower = {"value": 56, "better": "lower"}
    higher = {"value": 252_000, "better": "higher"}
    assert bench_check.worse_by(lower, 112) == 2.0 and bench_check.worse_by(lower, 28) == 0.5
    assert bench_check.worse_by(higher, 126_000) == 2.0 and bench_check.worse_by(higher, 504_000) == 0.5


def test_a_result_says_where_and_when_it_was_measured(tmp_path: Path, monkeypatch: Any) -> None:
    out = write_result("x", {"median_ms": 3.5, "nested": {"p95_ms": 4.0}}, path=tmp_path / "x.json")
    doc = json.loads(out.read_text())
    assert bench_check.lookup(doc, "nested.p95_ms") == 4.0 and bench_check.lookup(doc, "nested.nope") is None
    stamp = doc["measured"]
    assert re.fullmatch(r"[0-9a-f]{40}", stamp["commit"]) and stamp["cores"] >= 1 and len(stamp["load_1_5_15"]) == 3
    assert stamp["date"][:4].isdigit() and {"uncommitted_files", "host", "python"} <= set(stamp) <= set(measured()) | {"commit_at_end"}
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"ratio": 1.0}))
    assert stamp_file(bare) and not stamp_file(bare)
    assert json.loads(bare.read_text())["ratio"] == 1.0
