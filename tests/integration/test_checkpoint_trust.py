"""A writer of the checkpoint store cannot run code in the job or the inspecting command.

Each case writes a store with the real ``rivermark run`` (a subprocess),
then plants a pickle whose loading would create a marker file, with the
manifest's sizes, digests and checksum recomputed as an attacker can, and
checks with the real command that ``verify`` flags it and that neither
``checkpoints show --state`` nor a resume runs it: without a key (nothing
pickled is loaded unless the store is trusted) and with one (the signature
no longer matches, or is gone).
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rivermark.checkpoint.stores.manifest import sha256_of

RIVERMARK = str(Path(sys.executable).parent / "rivermark")
KEY = "k" * 32
OLD_KEY = "o" * 32

APP = """\
from rivermark import Stream
source = Stream.from_iterable(list(range({n})), name="numbers")
source.accumulate(lambda acc, x: acc + x, start=0, name="total").sink_to_textfile({out!r})
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RIVERMARK_CHECKPOINT_KEY")}
    return subprocess.run(
        [RIVERMARK, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**full, **(env or {})},
    )


def one_clear_line(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) <= 4, res.stderr
    for n in needles:
        assert n in res.stderr, (n, res.stderr)


class Planted:
    """Unpickling this runs ``touch marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def write_store(tmp_path: Path, env: dict[str, str] | None = None) -> tuple[Path, Path]:
    app, ckpt = tmp_path / "app.py", tmp_path / "ckpt"
    app.write_text(textwrap.dedent(APP.format(n=100, out=str(tmp_path / "out.txt"))))
    res = run("run", f"{app}:source", "--checkpoint", str(ckpt), "-q", env=env)
    assert res.returncode == 0, res.stderr
    return app, ckpt


def newest(ckpt: Path) -> Path:
    return sorted((ckpt / "checkpoints").iterdir())[-1]


def plant(ckpt: Path, blob: bytes, *, keep_signature: bool) -> None:
    """Replace the newest state of ``total`` by ``blob``; recompute what needs no key."""
    d = newest(ckpt)
    manifest = json.loads((d / "manifest.json").read_text())
    entry = manifest["state"]["total"]
    (d / entry["file"]).write_bytes(blob)
    entry.update(size=len(blob), sha256=sha256_of(blob))
    manifest.pop("checksum")
    signature = manifest.pop("signature", None)
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    manifest["checksum"] = sha256_of(canonical.encode())
    if keep_signature and signature is not None:
        manifest["signature"] = signature
    (d / "manifest.json").write_text(json.dumps(manifest))


def test_a_planted_pickle_runs_nowhere_without_a_key(tmp_path: Path) -> None:
    app, ckpt = write_store(tmp_path)
    marker = tmp_path / "marker"
    plant(ckpt, pickle.dumps(Planted(marker)), keep_signature=False)
    res = run("checkpoints", "verify", str(ckpt))
    assert res.returncode == 1
    assert "UNTRUSTED" in res.stdout and "holds pickled objects" in res.stdout, res.stdout
    one_clear_line(run("checkpoints", "show", str(ckpt), "--state", "total"), "--trust-store")
    one_clear_line(run("run", f"{app}:source", "--checkpoint", str(ckpt)), "--trust-store")
    assert not marker.exists()


@pytest.mark.parametrize(
    "blob",
    [b"RMS\x01\x81\xa5state\xd4\x37\x00", b"RMS\x01\x81\xa5state", b"\x80\x04K"],
    ids=["unknown-tag", "truncated", "truncated-pickle"],
)
def test_state_that_matches_its_manifest_but_does_not_decode_is_refused_in_one_line(
    tmp_path: Path, blob: bytes
) -> None:
    app, ckpt = write_store(tmp_path)
    plant(ckpt, blob, keep_signature=False)
    epoch = int(newest(ckpt).name)
    res = run("checkpoints", "verify", str(ckpt))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    ours = blob.startswith(b"RMS")  # (a pickle is flagged as one before it is read)
    if ours:
        assert f"{epoch:>12}  DAMAGED" in res.stdout and "does not decode" in res.stdout
        assert f"a job refuses to start at {epoch}" in res.stdout, res.stdout
    for trust in ([], ["--trust-store"]):
        resumed = run("run", f"{app}:source", "--checkpoint", str(ckpt), *trust)
        if ours or trust:
            one_clear_line(resumed, "'total'", "does not decode", "--from-scratch")
        shown = run("checkpoints", "show", str(ckpt), "--state", "total", *trust)
        one_clear_line(shown, "'total'")


@pytest.mark.parametrize("keep_signature", [True, False], ids=["signature-kept", "removed"])
def test_a_planted_pickle_runs_nowhere_with_a_key(tmp_path: Path, keep_signature: bool) -> None:
    env = {"RIVERMARK_CHECKPOINT_KEY": KEY}
    app, ckpt = write_store(tmp_path, env)
    assert run("checkpoints", "verify", str(ckpt), env=env).returncode == 0
    marker = tmp_path / "marker"
    plant(ckpt, pickle.dumps(Planted(marker)), keep_signature=keep_signature)
    res = run("checkpoints", "verify", str(ckpt), env=env)
    assert res.returncode == 1
    assert ("BAD SIGNATURE" if keep_signature else "UNSIGNED") in res.stdout, res.stdout
    # even under --trust-store a wrong signature is refused; unsigned is then loaded
    show = run("checkpoints", "show", str(ckpt), "--state", "total", env=env)
    one_clear_line(show, "signature" if keep_signature else "not signed")
    resumed = run("run", f"{app}:source", "--checkpoint", str(ckpt), "-q", env=env)
    # the job falls back to the older signed checkpoint (the start one) and finishes
    assert resumed.returncode == 0, resumed.stderr
    assert "skipping damaged checkpoint" in resumed.stderr
    assert not marker.exists()
    assert (tmp_path / "out.txt").read_text().splitlines()[-1] == str(sum(range(100)))


def test_keys_rotate_and_a_foreign_key_is_refused(tmp_path: Path) -> None:
    old = {"RIVERMARK_CHECKPOINT_KEY": OLD_KEY}
    app, ckpt = write_store(tmp_path, old)
    keyfile = tmp_path / "keys"
    keyfile.write_text(f"{KEY}\n{OLD_KEY}\n")
    keyfile.chmod(0o600)
    rotated = {"RIVERMARK_CHECKPOINT_KEY_FILE": str(keyfile)}
    assert run("checkpoints", "verify", str(ckpt), env=rotated).returncode == 0
    foreign = run("checkpoints", "verify", str(ckpt), env={"RIVERMARK_CHECKPOINT_KEY": KEY})
    assert foreign.returncode == 1 and "FOREIGN-SIGNED" in foreign.stdout, foreign.stdout
    # a resume with the rotated keys signs its checkpoints with the new key only
    (tmp_path / "out.txt").unlink()
    app.write_text(textwrap.dedent(APP.format(n=200, out=str(tmp_path / "out.txt"))))
    res = run(
        "run", f"{app}:source", "--checkpoint", str(ckpt), "--from-scratch", "-q", env=rotated
    )
    assert res.returncode == 0, res.stderr
    assert (
        run("checkpoints", "verify", str(ckpt), env={"RIVERMARK_CHECKPOINT_KEY": KEY}).returncode
        == 0
    )
    assert run("checkpoints", "verify", str(ckpt), env=old).returncode == 1


def test_an_edited_position_fails_the_signature(tmp_path: Path) -> None:
    env = {"RIVERMARK_CHECKPOINT_KEY": KEY}
    app, ckpt = write_store(tmp_path, env)
    path = newest(ckpt) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["positions"]["numbers"] = 0
    signature = manifest.pop("signature")
    manifest.pop("checksum")
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    manifest.update(checksum=sha256_of(canonical.encode()), signature=signature)
    path.write_text(json.dumps(manifest))
    res = run("checkpoints", "verify", str(ckpt), env=env)
    assert res.returncode == 1 and "BAD SIGNATURE" in res.stdout, res.stdout
    # without the key the checksum passes: the edit is only caught by the signature
    assert run("checkpoints", "verify", str(ckpt)).returncode == 0


def test_an_older_pickled_checkpoint_restores_only_when_trusted(tmp_path: Path) -> None:
    app, ckpt = write_store(tmp_path)
    plant(ckpt, pickle.dumps({"state": 7}), keep_signature=False)
    one_clear_line(run("run", f"{app}:source", "--checkpoint", str(ckpt)), "--trust-store")
    shown = run("checkpoints", "show", str(ckpt), "--state", "total", "--trust-store")
    assert shown.returncode == 0 and shown.stdout.strip() == "{'state': 7}", shown.stderr
    res = run("run", f"{app}:source", "--checkpoint", str(ckpt), "-q", "--trust-store")
    assert res.returncode == 0, res.stderr
    assert "restored checkpoint" in res.stderr or res.stderr == ""


def test_state_of_the_wrong_shape_names_node_epoch_and_remedy(tmp_path: Path) -> None:
    from rivermark.checkpoint.state import codec

    app, ckpt = write_store(tmp_path)
    plant(ckpt, codec.dumps(["not", "a", "dict"]), keep_signature=False)
    epoch = int(newest(ckpt).name)
    res = run("run", f"{app}:source", "--checkpoint", str(ckpt))
    one_clear_line(res, f"checkpoint {epoch}", "node total", "does not fit", "--from-scratch")


def test_store_files_are_private_and_a_symlinked_state_file_is_refused(tmp_path: Path) -> None:
    app, ckpt = write_store(tmp_path)
    d = newest(ckpt)
    for p in [ckpt, ckpt / "checkpoints", d, d / "state"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    for p in [d / "manifest.json", *(d / "state").iterdir()]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    # every file of the store, LOCK included; a LOCK left world-readable is made private
    files = [p for p in ckpt.rglob("*") if p.is_file()]
    assert ckpt / "LOCK" in files and ckpt / "job.json" in files
    assert {p: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p: "0o600" for p in files}
    (ckpt / "LOCK").chmod(0o644)
    res = run("run", f"{app}:source", "--checkpoint", str(ckpt), "-q")
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE((ckpt / "LOCK").stat().st_mode) == 0o600
    outside = tmp_path / "outside"
    state = next((d / "state").iterdir())
    outside.write_bytes(state.read_bytes())
    state.unlink()
    state.symlink_to(outside)
    res = run("checkpoints", "verify", str(ckpt))
    assert res.returncode == 1 and "symbolic link" in res.stdout, res.stdout


def test_a_job_that_lost_its_key_neither_resumes_nor_writes_a_signed_store(
    tmp_path: Path,
) -> None:
    env = {"RIVERMARK_CHECKPOINT_KEY": KEY}
    app, ckpt = write_store(tmp_path, env)
    before = sorted(p.name for p in (ckpt / "checkpoints").iterdir())
    manifests = {p: p.read_bytes() for p in (ckpt / "checkpoints").glob("*/manifest.json")}
    newest_epoch = int(newest(ckpt).name)
    for args in [(), ("--from-scratch",)]:
        res = run("run", f"{app}:source", "--checkpoint", str(ckpt), *args)
        one_clear_line(
            res,
            f"checkpoint {str(newest(ckpt))!r} is signed (key ",
            "is signed (key ",
            "but this job has no checkpoint key: set RIVERMARK_CHECKPOINT_KEY",
            "--trust-store",
        )
        assert sorted(p.name for p in (ckpt / "checkpoints").iterdir()) == before
        assert {p: p.read_bytes() for p in manifests} == manifests
    # from a savepoint of that store into a new location: refused the same way
    elsewhere = tmp_path / "elsewhere"
    spec = f"{ckpt}@{newest_epoch}"
    res = run("run", f"{app}:source", "--checkpoint", str(elsewhere), "--from-savepoint", spec)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    # (the newest checkpoint is not a savepoint: refused for being signed first)
    assert "is signed (key " in res.stderr, res.stderr
    # the explicit choice to go on unsigned
    res = run("run", f"{app}:source", "--checkpoint", str(ckpt), "-q", "--trust-store")
    assert res.returncode == 0, res.stderr
    assert json.loads(newest(ckpt).joinpath("manifest.json").read_text()).get("signature") is None


def test_verify_passes_after_a_migration_to_a_key(
    tmp_path: Path,
) -> None:
    from rivermark.checkpoint import LocalDirectoryStore

    app, ckpt = write_store(tmp_path)  # unsigned, as before a key was set
    unsigned = LocalDirectoryStore(ckpt).list_epochs()
    env = {"RIVERMARK_CHECKPOINT_KEY": KEY}
    res = run("run", f"{app}:source", "--checkpoint", str(ckpt), "-q", "--trust-store", env=env)
    assert res.returncode == 0, res.stderr
    epochs = LocalDirectoryStore(ckpt).list_epochs()
    kept_unsigned = [e for e in epochs if e in unsigned]
    assert kept_unsigned and epochs[-1] not in unsigned  # the migration's state
    res = run("checkpoints", "verify", str(ckpt), env=env)
    assert res.returncode == 0, res.stdout
    for e in kept_unsigned:
        assert f"{e:>12}  UNSIGNED (older than every signed checkpoint" in res.stdout
    assert "it goes when pruned" in res.stdout
    # an unsigned checkpoint newer than a signed one (planted, or a job without the key)
    res = run("run", f"{app}:source", "--checkpoint", str(ckpt), "-q", "--trust-store")
    assert res.returncode == 0, res.stderr
    res = run("checkpoints", "verify", str(ckpt), env=env)
    assert res.returncode == 1 and "UNSIGNED: " in res.stdout, res.stdout


def mark_savepoint(d: Path, key: str) -> None:
    """Make checkpoint ``d`` a savepoint signed with ``key`` (as a holder of the key can)."""
    from rivermark.checkpoint.stores.signing import Keyring

    path = d / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.pop("checksum")
    manifest.pop("signature", None)
    manifest["savepoint"] = True
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    manifest["checksum"] = sha256_of(canonical.encode())
    manifest["signature"] = Keyring([key.encode()]).sign(canonical)
    path.write_text(json.dumps(manifest))


def test_a_rotation_finishes_with_a_savepoint_of_the_old_key(tmp_path: Path) -> None:
    old = {"RIVERMARK_CHECKPOINT_KEY": OLD_KEY}
    app, ckpt = write_store(tmp_path, old)
    saved = int(newest(ckpt).name)
    mark_savepoint(newest(ckpt), OLD_KEY)
    keyfile = tmp_path / "keys"
    keyfile.write_text(f"{KEY}\n{OLD_KEY}\n")
    keyfile.chmod(0o600)
    rotated = {"RIVERMARK_CHECKPOINT_KEY_FILE": str(keyfile)}
    new = {"RIVERMARK_CHECKPOINT_KEY": KEY}
    res = run("run", f"{app}:source", "--checkpoint", str(ckpt), "-q", "--from-savepoint",
              f"{ckpt}@{saved}", env=rotated)  # fmt: skip
    assert res.returncode == 0, res.stderr
    # with only the new key the old savepoint is superseded, and says what to do
    res = run("checkpoints", "verify", str(ckpt), env=new)
    assert res.returncode == 0, res.stdout
    assert f"{saved:>12}  FOREIGN-SIGNED (older than every signed checkpoint" in res.stdout
    assert "a savepoint is never pruned: delete it, or re-sign it" in res.stdout
    # re-signing with both keys: the savepoint then restores with the new key alone
    dry = run("checkpoints", "resign", str(ckpt), "--dry-run", env=rotated)
    assert dry.returncode == 0 and f"{saved:>12}  would re-sign (was key " in dry.stdout
    res = run("checkpoints", "resign", str(ckpt), env=rotated)
    assert res.returncode == 0 and f"{saved:>12}  re-signed (was key " in res.stdout, res.stdout
    assert "already signed with the new key" in res.stdout
    res = run("checkpoints", "verify", str(ckpt), env=new)
    assert res.returncode == 0 and "FOREIGN" not in res.stdout, res.stdout
    assert run("checkpoints", "verify", str(ckpt), env=old).returncode == 1
    copy = tmp_path / "copy"
    res = run("run", f"{app}:source", "--checkpoint", str(copy), "-q", "--from-savepoint",
              f"{ckpt}@{saved}", env=new)  # fmt: skip
    assert res.returncode == 0, res.stderr
