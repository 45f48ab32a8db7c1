"""Damaged checkpoints of a real, killed job: detected, fallen back from, or refused.

Every kind of damage to the newest checkpoint is reported by
``rivermark checkpoints verify`` (exit 1), and a resume falls back to the
previous checkpoint with output byte-identical to an uncrashed run.  When
every checkpoint is damaged the job refuses to start (exit 2) until it is
started over explicitly with ``--from-scratch``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivermark.checkpoint import LocalDirectoryStore
from rivermark.testing import wait_for
from rivermark.testing.crash import run_uncrashed

pytestmark = pytest.mark.crash

APP = Path(__file__).parent / "apps" / "pipeline_app.py"
RIVERMARK = str(Path(sys.executable).parent / "rivermark")
N = 20_000


def _run_cmd(ckpt: Path, *extra: str) -> list[str]:
    return [
        RIVERMARK, "run", f"{APP}:source",
        "--checkpoint", str(ckpt), "--every", "0.1s", "--keep", "3",
        # checkpoints by record count too: the 6th falls mid-input however fast the job runs
        "--every-batches", "2000", *extra,
    ]  # fmt: skip


def _env(workdir: Path, out: Path, work: int = 0, fault: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RIVERMARK_FAULT", None)
    env["RIVERMARK_APP_INPUT"] = str(workdir / "in.jsonl")
    env["RIVERMARK_APP_OUTPUT"] = str(out)
    env["RIVERMARK_APP_WORK"] = str(work)
    if fault:
        env["RIVERMARK_FAULT"] = fault
    return env


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("damage")
    with open(d / "in.jsonl", "w") as f:
        for i in range(N):
            f.write(json.dumps({"v": i}) + "\n")
    return d


@pytest.fixture(scope="module")
def reference(workdir: Path) -> bytes:
    out = workdir / "reference.txt"
    run_uncrashed(_run_cmd(workdir / "ref-ckpt"), env=_env(workdir, out))
    return out.read_bytes()


@pytest.fixture(scope="module")
def killed(workdir: Path) -> tuple[Path, Path]:
    """A job killed (SIGKILL at a fault point) while writing its 6th checkpoint, mid-data."""
    ckpt, out = workdir / "case-ckpt", workdir / "case.txt"
    env = _env(workdir, out, work=200, fault="after-state-files:6")
    res = _cli(_run_cmd(ckpt), env=env)
    assert res.returncode == -signal.SIGKILL, res.stderr
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    assert len(epochs) == 3 and len(store.list_incomplete()) == 1
    newest = store.read_manifest(epochs[-1])
    assert 0 < newest.positions["lines"] < N
    # bytes after the newest checkpoint exist, so a resume must also truncate
    assert out.stat().st_size > next(iter(newest.sinks.values()))["length"]
    pristine_ckpt, pristine_out = workdir / "killed-ckpt", workdir / "killed.txt"
    shutil.copytree(ckpt, pristine_ckpt)
    shutil.copy(out, pristine_out)
    return pristine_ckpt, pristine_out


# ---------------------------------------------------------------------- kinds of damage
Damage = Callable[[Path, Path], None]  # (newest checkpoint dir, previous checkpoint dir)


def _state_file(d: Path) -> Path:
    files = sorted((d / "state").iterdir())
    assert files
    return files[0]


def _manifest_edit(edit: Callable[[dict[str, Any]], None]) -> Damage:
    def damage(d: Path, prev: Path) -> None:
        path = d / "manifest.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data, indent=2))

    return damage


def _first_state(m: dict[str, Any]) -> dict[str, Any]:
    return m["state"][sorted(m["state"])[0]]


def _first_sink(m: dict[str, Any]) -> dict[str, Any]:
    return m["sinks"][sorted(m["sinks"])[0]]


def _flip(path: Path, at: float) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x01
    path.write_bytes(bytes(data))


def _resealed_with_other_epoch(d: Path, prev: Path) -> None:
    # a well-formed manifest with a valid checksum that names another epoch
    from rivermark.checkpoint import Manifest

    m = Manifest.from_json((d / "manifest.json").read_text())
    m.epoch -= 1
    (d / "manifest.json").write_text(m.to_json())


DAMAGE: dict[str, Damage] = {
    "state truncated": lambda d, p: _state_file(d).write_bytes(_state_file(d).read_bytes()[:-3]),
    "state emptied": lambda d, p: _state_file(d).write_bytes(b""),
    "state bit-flipped": lambda d, p: _flip(_state_file(d), 0.5),
    "state deleted": lambda d, p: _state_file(d).unlink(),
    "state directory deleted": lambda d, p: shutil.rmtree(d / "state"),
    "state from the previous checkpoint": lambda d, p: shutil.copy(_state_file(p), _state_file(d)),
    "manifest epoch edited": _manifest_edit(lambda m: m.update(epoch=m["epoch"] - 1)),
    "manifest sink length edited": _manifest_edit(
        lambda m: _first_sink(m).update(length=_first_sink(m)["length"] + 10)
    ),
    "manifest position edited": _manifest_edit(
        lambda m: m["positions"].update(lines=m["positions"]["lines"] + 7)
    ),
    "manifest state size edited": _manifest_edit(
        lambda m: _first_state(m).update(size=_first_state(m)["size"] - 1)
    ),
    "manifest 'state' removed": _manifest_edit(lambda m: m.pop("state")),
    "manifest 'sinks' removed": _manifest_edit(lambda m: m.pop("sinks")),
    "manifest 'positions' removed": _manifest_edit(lambda m: m.pop("positions")),
    "manifest state 'file' removed": _manifest_edit(lambda m: _first_state(m).pop("file")),
    "manifest size retyped": _manifest_edit(
        lambda m: _first_state(m).update(size=str(_first_state(m)["size"]))
    ),
    "manifest positions retyped": _manifest_edit(lambda m: m.update(positions=[])),
    "manifest sinks retyped": _manifest_edit(lambda m: m.update(sinks="out.txt")),
    "manifest checksum removed": _manifest_edit(lambda m: m.pop("checksum")),
    "manifest checksum edited": _manifest_edit(lambda m: m.update(checksum="0" * 64)),
    "manifest unknown format": _manifest_edit(lambda m: m.update(format=99)),
    "manifest of the previous checkpoint": lambda d, p: shutil.copy(
        p / "manifest.json", d / "manifest.json"
    ),
    "manifest resealed with another epoch": _resealed_with_other_epoch,
    "manifest truncated": lambda d, p: (d / "manifest.json").write_bytes(
        (d / "manifest.json").read_bytes()[:100]
    ),
    "manifest emptied": lambda d, p: (d / "manifest.json").write_bytes(b""),
    "manifest not an object": lambda d, p: (d / "manifest.json").write_text("[]"),
    "manifest bit-flipped": lambda d, p: _flip(d / "manifest.json", 0.6),
}


def test_the_table_is_large_enough() -> None:
    assert len(DAMAGE) >= 15


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_newest_is_reported_and_resume_falls_back(
    workdir: Path, reference: bytes, killed: tuple[Path, Path], kind: str
) -> None:
    # every case starts from the killed job's checkpoints and output, at the
    # paths it wrote them (the sink's path is part of what a checkpoint names)
    pristine_ckpt, pristine_out = killed
    ckpt, out = workdir / "case-ckpt", workdir / "case.txt"
    shutil.rmtree(ckpt, ignore_errors=True)
    shutil.copytree(pristine_ckpt, ckpt)
    shutil.copy(pristine_out, out)
    store = LocalDirectoryStore(ckpt)
    *_, previous, newest = store.list_epochs()
    DAMAGE[kind](store.epoch_dir(newest), store.epoch_dir(previous))

    res = _cli([RIVERMARK, "checkpoints", "verify", str(ckpt)])
    assert res.returncode == 1, res
    assert f"{newest:>12}  DAMAGED: " in res.stdout and f"{previous:>12}  ok" in res.stdout
    assert "Traceback" not in res.stdout + res.stderr

    res = _cli(_run_cmd(ckpt), env=_env(workdir, out))
    assert "Traceback" not in res.stderr
    assert res.returncode == 0, res.stderr
    assert f"skipping damaged checkpoint {newest}" in res.stderr
    assert out.read_bytes() == reference


# ---------------------------------------------------------------------- every checkpoint damaged
def _kill_mid_data(workdir: Path, ckpt: Path, out: Path) -> None:
    proc = subprocess.Popen(
        _run_cmd(ckpt), env=_env(workdir, out, work=200), stderr=subprocess.DEVNULL
    )

    def third_checkpoint() -> bool:
        assert proc.poll() is None, "the job ended before it could be killed"
        return ckpt.exists() and len(LocalDirectoryStore(ckpt).list_epochs()) >= 3

    try:
        wait_for(third_checkpoint, 120, "a third checkpoint", interval=0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_every_checkpoint_damaged_refuses_until_started_from_scratch(
    workdir: Path, reference: bytes
) -> None:
    ckpt, out = workdir / "all-damaged-ckpt", workdir / "all-damaged.txt"
    _kill_mid_data(workdir, ckpt, out)
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    assert len(epochs) >= 2 and 0 < store.read_manifest(epochs[-1]).positions["lines"] < N
    kinds = ["manifest truncated", "state bit-flipped", "manifest position edited"]
    for i, e in enumerate(epochs):
        DAMAGE[kinds[i % len(kinds)]](store.epoch_dir(e), store.epoch_dir(epochs[0]))
    before = out.read_bytes()
    assert before  # the killed run wrote output

    res = _cli([RIVERMARK, "checkpoints", "verify", str(ckpt)])
    assert res.returncode == 1 and "a job refuses to start" in res.stdout

    res = _cli(_run_cmd(ckpt), env=_env(workdir, out))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "no checkpoint in" in res.stderr and "verifies; the job refuses to start" in res.stderr
    for e in epochs:
        assert f"{e:012d}" in res.stderr
    assert "not valid JSON" in res.stderr and "checksum" in res.stderr
    assert "--from-scratch" in res.stderr and "restore a good copy" in res.stderr
    assert out.read_bytes() == before
    assert store.list_epochs() == epochs

    res = _cli(_run_cmd(ckpt, "--from-scratch"), env=_env(workdir, out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == reference
    (aside,) = ckpt.glob("set-aside-*")
    assert sorted(p.name for p in aside.iterdir()) == [f"{e:012d}" for e in epochs]
    # the new checkpoints are sound: a plain run resumes from them and changes nothing
    res = _cli(_run_cmd(ckpt), env=_env(workdir, out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == reference


def test_output_without_checkpoint_is_refused_then_started_over(
    workdir: Path, reference: bytes
) -> None:
    ckpt, out = workdir / "fresh-ckpt", workdir / "fresh.txt"
    out.write_bytes(reference[:1000])
    res = _cli(_run_cmd(ckpt), env=_env(workdir, out))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1
    assert f"{str(out)!r} already holds 1000 bytes" in res.stderr
    assert "--from-scratch" in res.stderr
    assert out.read_bytes() == reference[:1000]
    res = _cli(_run_cmd(ckpt, "--from-scratch"), env=_env(workdir, out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == reference
