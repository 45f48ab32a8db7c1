"""The verdict of the streamz test-suite leg (``scripts/streamz-suite``)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

SUITE = Path(__file__).resolve().parents[1] / "streamz_suite"


def _verdict() -> ModuleType:
    spec = importlib.util.spec_from_file_location("streamz_suite_verdict", SUITE / "verdict.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


verdict = _verdict()

REF = ["t.py::a", "t.py::b[1]", "t.py::b[2]", "t.py::c", "u.py::d"]


def run(outcome_map: dict[str, str], deviations: dict[str, str], full: bool = True) -> tuple:
    o = verdict.Outcomes()
    for test_id, outcome in outcome_map.items():
        o.add(test_id, "setup", "passed")
        o.add(test_id, "call", outcome)
    return verdict.summarize(REF, {"u.py": "internals"}, deviations, o, full=full)


def test_all_pass_unlisted_is_ok() -> None:
    ok, lines = run(dict.fromkeys(REF[:4], "passed"), {})
    assert ok
    assert "4 passed (100.0%)" in lines[1]


def test_unlisted_failure_fails_the_leg() -> None:
    ok, lines = run({**dict.fromkeys(REF[:4], "passed"), "t.py::c": "failed"}, {})
    assert not ok
    assert "FAILED, NOT LISTED: t.py::c" in lines


def test_listed_test_that_passes_fails_the_leg() -> None:
    ok, lines = run(dict.fromkeys(REF[:4], "passed"), {"t.py::a": "not yet implemented: x"})
    assert not ok
    assert any(line.startswith("PASSES BUT IS LISTED: t.py::a") for line in lines)


def test_prefix_entry_must_cover_only_failing_tests() -> None:
    results = {"t.py::a": "passed", "t.py::b[1]": "failed", "t.py::b[2]": "passed"}
    results["t.py::c"] = "passed"
    ok, _ = run(results, {"t.py::b": "reason"})
    assert not ok
    results["t.py::b[2]"] = "failed"
    ok, lines = run(results, {"t.py::b": "reason"})
    assert ok, lines
    assert "2 listed as deviations" in lines[1]


def test_a_test_that_never_ran_counts_in_a_full_run_only() -> None:
    results = {"t.py::a": "passed", "t.py::c": "passed"}
    ok, lines = run(results, {})
    assert not ok
    assert "NOT RUN, NOT LISTED: t.py::b[1]" in lines
    ok, lines = run(results, {}, full=False)
    assert ok, lines


def test_entry_naming_no_test_fails_the_leg() -> None:
    ok, lines = run(dict.fromkeys(REF[:4], "passed"), {"t.py::gone": "reason"})
    assert not ok
    assert "deviations.txt: 't.py::gone' names no test streamz collects" in lines


def test_xfail_of_the_test_itself_counts_as_pass() -> None:
    o = verdict.Outcomes()
    o.add("t.py::a", "call", "skipped", xfail=True)
    assert o.get("t.py::a") == "passed"
    o.add("t.py::c", "call", "skipped")
    assert o.get("t.py::c") == "skipped"
    o.add("t.py::d", "call", "passed")
    o.add("t.py::d", "teardown", "failed")
    assert o.get("t.py::d") == "failed"


def test_list_needs_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "deviations.txt"
    path.write_text("# comment\nt.py::a | not yet implemented: x\n")
    assert verdict.load_list(path) == {"t.py::a": "not yet implemented: x"}
    path.write_text("t.py::a\n")
    with pytest.raises(ValueError, match=re.escape("expected '<test id> | <reason>'")):
        verdict.load_list(path)


def test_checked_in_lists_parse() -> None:
    for name in ("excluded.txt", "deviations.txt", "timing.txt"):
        entries = verdict.load_list(SUITE / name)
        assert all(reason for reason in entries.values())


def test_rerun_lists_tests_that_ran_and_only_when_nothing_else_is_wrong() -> None:
    rerun: list[str] = []
    results = {"t.py::a": "failed", "t.py::b[1]": "passed", "t.py::b[2]": "passed"}
    results["t.py::c"] = "passed"
    o = verdict.Outcomes()
    for test_id, outcome in results.items():
        o.add(test_id, "call", outcome)
    ok, _ = verdict.summarize(REF, {"u.py": "x"}, {"t.py::c": "reason"}, o, rerun=rerun)
    assert not ok and rerun == ["t.py::a", "t.py::c"]
    # a stale entry is not cured by running again: nothing to rerun
    rerun.clear()
    deviations = {"t.py::c": "reason", "t.py::gone": "reason"}
    verdict.summarize(REF, {"u.py": "x"}, deviations, o, rerun=rerun)
    assert rerun == []


def test_timing_dependent_tests_count_as_they_ran_and_never_fail_the_leg() -> None:
    timing = {"t.py::c": "depends on timing"}
    for outcome, passed in (("passed", 4), ("failed", 3)):
        results = dict.fromkeys(REF[:4], "passed")
        results["t.py::c"] = outcome
        o = verdict.Outcomes()
        for test_id, out in results.items():
            o.add(test_id, "call", out)
        ok, lines = verdict.summarize(REF, {"u.py": "x"}, {}, o, timing=timing)
        assert ok, lines
        assert f"{passed} passed" in lines[1] and "1 timing-dependent" in lines[1]
