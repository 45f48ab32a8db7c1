"""The verdict of the streamz test-suite leg, kept apart from pytest so it can be unit tested.

The set of tests is what streamz itself collects from its test files, minus
the entries of ``excluded.txt`` (tests of streamz internals).  Each of them
must pass on rivermark, except those in ``deviations.txt``, which must not
pass: a listed test that passes makes the leg fail too, so the list only
shrinks.  A list entry names one test id, or a prefix ending at ``::`` or
``[`` (a whole file or every parameter of one test); such an entry must cover
only tests that do not pass.

List format: one entry a line, ``<test id or prefix> | <reason>``; ``#``
starts a comment line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


def load_list(path: Path) -> dict[str, str]:
    """``{entry: reason}`` from a list file; every entry needs a reason."""
    entries: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        entry, sep, reason = line.partition(" | ")
        if not sep or not reason.strip():
            raise ValueError(f"{path}:{number}: expected '<test id> | <reason>', got {raw!r}")
        if entry.strip() in entries:
            raise ValueError(f"{path}:{number}: {entry.strip()!r} is listed twice")
        entries[entry.strip()] = reason.strip()
    return entries


def covers(entry: str, test_id: str) -> bool:
    """Whether list ``entry`` names ``test_id`` (itself, its file, or its parametrized test)."""
    return test_id == entry or test_id.startswith(entry + "::") or test_id.startswith(entry + "[")


def match(entries: Iterable[str], test_id: str) -> str | None:
    for entry in entries:
        if covers(entry, test_id):
            return entry
    return None


@dataclass
class Outcomes:
    """Per test id: ``passed``, ``failed`` or ``skipped`` over its setup, call and teardown.

    A test that streamz's files mark ``xfail`` counts as passed when it fails
    (``xfail=True``): that is the outcome the test itself expects.
    """

    by_id: dict[str, str] = field(default_factory=dict)

    def add(self, test_id: str, when: str, outcome: str, xfail: bool = False) -> None:
        previous = self.by_id.get(test_id)
        if xfail and outcome == "skipped":
            outcome = "passed"
        if previous == "failed" or outcome == "failed":
            self.by_id[test_id] = "failed"
        elif outcome == "skipped":
            self.by_id[test_id] = "skipped"
        elif when == "call" and previous is None and outcome == "passed":
            self.by_id[test_id] = "passed"

    def get(self, test_id: str) -> str:
        """The outcome; ``not run`` for a test that was never run (its module did not import)."""
        return self.by_id.get(test_id, "not run")


def summarize(
    reference: list[str],
    excluded: dict[str, str],
    deviations: dict[str, str],
    outcomes: Outcomes,
    full: bool = True,
    rerun: list[str] | None = None,
    timing: dict[str, str] | None = None,
) -> tuple[bool, list[str]]:
    """``(ok, report lines)`` for one run of the leg.

    With ``full=False`` (a selection of the tests was run) only the tests that
    ran are judged, and list entries are not checked against the reference.
    The ids of tests that ran and did not behave as listed are appended to
    ``rerun`` (a second run of those alone tells a timing-dependent test on a
    loaded machine from a real change); it is left empty when another
    problem (a test that did not run, a stale entry) fails the leg anyway.
    ``timing`` (``timing.txt``) lists tests whose outcome depends on timing
    on rivermark, for a stated reason: either outcome is accepted, and the
    rate counts what happened.
    """
    timing = timing or {}
    again: list[str] = []
    problems: list[str] = []
    tests = [t for t in reference if match(excluded, t) is None]
    n_excluded = len(reference) - len(tests)
    if not full:
        tests = [t for t in tests if outcomes.get(t) != "not run"]
    passed = 0
    listed = 0
    n_timing = 0
    for test_id in tests:
        outcome = outcomes.get(test_id)
        if match(timing, test_id) is not None and outcome in ("passed", "failed"):
            n_timing += 1
            passed += outcome == "passed"
            continue
        entry = match(deviations, test_id)
        if entry is not None:
            listed += 1
        if outcome == "passed":
            passed += 1
            if entry is not None:
                again.append(test_id)
                problems.append(
                    f"PASSES BUT IS LISTED: {test_id} (entry {entry!r}): "
                    "remove or narrow the entry in deviations.txt"
                )
        elif entry is None:
            if outcome != "not run":
                again.append(test_id)
            problems.append(f"{outcome.upper()}, NOT LISTED: {test_id}")
    for name, entries in (
        ("excluded.txt", excluded),
        ("deviations.txt", deviations),
        ("timing.txt", timing),
    ):
        for entry in entries if full else ():
            if not any(covers(entry, t) for t in reference):
                problems.append(f"{name}: {entry!r} names no test streamz collects")
    if rerun is not None and len(again) == len(problems):
        rerun.extend(again)
    rate = 100.0 * passed / len(tests) if tests else 0.0
    lines = [
        f"{len(reference)} tests collected by streamz, {n_excluded} excluded "
        f"(see excluded.txt), {len(tests)} {'run' if full else 'judged'} on rivermark",
        f"{passed} passed ({rate:.1f}%), {len(tests) - passed} do not pass, "
        f"{listed} listed as deviations, {n_timing} timing-dependent (timing.txt)",
        *problems,
        "verdict: " + ("OK" if not problems else f"FAILED ({len(problems)} problems)"),
    ]
    return not problems, lines
