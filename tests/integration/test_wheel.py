"""The package as a user gets it: sdist and wheel built with ``python -m build``,
the wheel installed into a fresh virtualenv, the demo run from there.

A file left out of the package (a module, the live page's HTML), a broken
``rivermark`` entry point or a dependency missing from ``pyproject.toml``
fails here, where a test against the source tree would not notice.  The
project's files are copied first, so the build leaves nothing in the
checkout; pip's download cache makes a second run fast.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _project_files() -> list[str]:
    res = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [p for p in res.stdout.splitlines() if (ROOT / p).is_file()]


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH pointing at the source tree."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        cmd, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert res.returncode == 0, f"{cmd}: {res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """(the wheel, the python of a fresh virtualenv with it installed, the project's files)."""
    base = tmp_path_factory.mktemp("wheel")
    files = _project_files()
    src = base / "src-copy"
    for rel in files:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    dist = base / "dist"
    # sdist first, then the wheel built from the unpacked sdist: a file missing
    # from the sdist is missing from the wheel too
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)], cwd=base, timeout=600)
    wheels = sorted(dist.glob("rivermark-*.whl"))
    assert len(wheels) == 1 and len(list(dist.glob("rivermark-*.tar.gz"))) == 1, list(
        dist.iterdir()
    )
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", str(wheels[0])], cwd=base, timeout=600)
    return wheels[0], python, files


def test_wheel_holds_every_file_of_the_package(built: tuple[Path, Path, list[str]]) -> None:
    wheel, _, files = built
    wanted = {
        rel.removeprefix("src/")
        for rel in files
        if rel.startswith("src/rivermark/") and "__pycache__" not in rel
    }
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "rivermark = rivermark.cli:main" in z.read(entry_points).decode()
    assert wanted - names == set()


def test_installed_wheel_runs_the_demo_outside_the_checkout(
    built: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    _, python, _ = built
    where = _run(
        [str(python), "-c", "import rivermark, sys; print(rivermark.__file__)"], cwd=tmp_path
    )
    assert where.stdout.startswith(str(python.parent.parent)), where.stdout
    script = python.parent / "rivermark"
    assert "Usage: rivermark" in _run([str(script), "--help"], cwd=tmp_path).stdout
    assert (
        "Usage: rivermark" in _run([str(python), "-m", "rivermark", "--help"], cwd=tmp_path).stdout
    )
    # the demo's two files only: everything else comes from the installed wheel
    demo = tmp_path / "examples" / "demo.py"
    demo.parent.mkdir()
    shutil.copy2(ROOT / "examples" / "demo.py", demo)
    shutil.copy2(ROOT / "examples" / "demo_app.py", demo.parent / "demo_app.py")
    env = {
        **_clean_env(),
        "RIVERMARK_DEMO_DIR": str(tmp_path / "out"),
        "RIVERMARK_DEMO_EVENTS": "20000",
        "RIVERMARK_DEMO_KILLS": "2",
    }
    res = subprocess.run(
        [str(python), str(demo)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "outputs are byte-identical after 2 kills" in res.stdout, res.stdout
