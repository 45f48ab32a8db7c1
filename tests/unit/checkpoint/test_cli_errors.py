"""``rivermark checkpoints ...`` through the real command: read-only, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rivermark.checkpoint import Job, LocalDirectoryStore

from .conftest import build

RIVERMARK = str(Path(sys.executable).parent / "rivermark")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIVERMARK, *args], capture_output=True, text=True, timeout=60)


def _tree(path: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (str(p.relative_to(path)), p.read_bytes() if p.is_file() else b"") for p in path.rglob("*")
    )


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    source, *_ = build(500)
    Job(source, checkpoint=tmp_path / "ckpt", every=None, every_batches=100).run()
    return tmp_path / "ckpt"


@pytest.mark.parametrize("action", ["list", "show", "verify", "diff"])
@pytest.mark.parametrize("kind", ["empty-dir", "other-dir", "file", "missing"])
def test_not_a_checkpoint_directory(tmp_path: Path, action: str, kind: str) -> None:
    target = tmp_path / "target"
    if kind == "file":
        target.write_text("data\n")
    elif kind != "missing":
        target.mkdir()
        if kind == "other-dir":
            (target / "notes.txt").write_text("mine\n")
    before = _tree(tmp_path)
    res = _cli("checkpoints", action, str(target))
    assert res.returncode == 2, res
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    expected = {
        "missing": "no such checkpoint directory",
        "file": "is a file, not a checkpoint directory",
    }.get(kind, "is not a rivermark checkpoint directory")
    assert expected in res.stderr and repr(str(target)) in res.stderr
    assert res.stdout == ""
    assert _tree(tmp_path) == before  # nothing created


@pytest.mark.parametrize("action", ["list", "show", "verify", "diff"])
def test_directory_without_checkpoints(tmp_path: Path, action: str) -> None:
    (tmp_path / "ckpt" / "checkpoints").mkdir(parents=True)
    res = _cli("checkpoints", action, str(tmp_path / "ckpt"))
    assert "Traceback" not in res.stderr
    if action == "list":
        assert (res.returncode, res.stdout) == (0, "no checkpoints\n")
    else:
        assert res.returncode == 1 and "no checkpoints in" in res.stderr


@pytest.mark.parametrize(
    "args", [["show", "99"], ["diff", "1", "99"], ["diff", "99"], ["verify", "99"]]
)
def test_missing_epoch_is_one_line(ckpt: Path, args: list[str]) -> None:
    res = _cli("checkpoints", args[0], str(ckpt), *args[1:])
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1
    assert "has no checkpoint 99" in res.stderr and "checkpoints: " in res.stderr


@pytest.mark.parametrize("damage", ["not-json", "no-file-key", "edited", "format"])
def test_damaged_manifest_is_one_line_and_verify_fails(ckpt: Path, damage: str) -> None:
    store = LocalDirectoryStore(ckpt)
    epochs = store.list_epochs()
    path = store.epoch_dir(epochs[-1]) / "manifest.json"
    d = json.loads(path.read_text())
    if damage == "not-json":
        path.write_text(path.read_text()[:40])
    else:
        if damage == "no-file-key":
            del d["state"]["sum"]["file"]
        elif damage == "edited":
            d["positions"]["numbers"] = 400
        else:
            d["format"] = 99
        path.write_text(json.dumps(d))
    before = _tree(ckpt)
    for args in (["show"], ["diff", str(epochs[0])], ["show", str(epochs[-1])]):
        res = _cli("checkpoints", args[0], str(ckpt), *args[1:])
        assert res.returncode == 1, res
        assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1
        assert f"{epochs[-1]:012d}" in res.stderr and "damaged" in res.stderr
    res = _cli("checkpoints", "verify", str(ckpt))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"{epochs[-1]:>12}  DAMAGED" in res.stdout
    assert f"a job resumes from {epochs[-2]}" in res.stdout
    res = _cli("checkpoints", "list", str(ckpt))
    assert res.returncode == 0 and f"{epochs[-1]:>12}  DAMAGED" in res.stdout
    assert _tree(ckpt) == before


def test_healthy_directory(ckpt: Path) -> None:
    res = _cli("checkpoints", "verify", str(ckpt))
    assert res.returncode == 0 and res.stderr == ""
    n = len(LocalDirectoryStore(ckpt).list_epochs())
    assert f"{n} of {n} verify" in res.stdout
