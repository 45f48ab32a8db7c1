"""Screenshots for docs/operating.md: the live pipeline page and the terminal display.

    .venv/bin/python scripts/screenshots.py [--out docs/images]

Runs examples/observed_app.py with ``rivermark run --ui`` in a tmux pane
(a real terminal), opens the page in headless chromium (Debian's
``chromium`` and ``chromium-driver``, installed by ``scripts/system-packages``)
while the job runs, and writes ``live-page.png`` and ``terminal.txt``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(cond, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit("screenshots: timed out waiting for the job")
        time.sleep(0.1)


def page_up(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).read()
        return True
    except OSError:
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "images"))
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rivermark-shots-"))
    events = work / "events.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "observed_app.py"), "write", str(events)],
        check=True,
    )
    port = free_port()
    session = f"rivermark-shots-{uuid.uuid4().hex[:8]}"
    rivermark = Path(sys.executable).parent / "rivermark"
    command = (
        f"env OBSERVED_INPUT={events} OBSERVED_OUTPUT={work / 'out.jsonl'} "
        f"{rivermark} run {ROOT / 'examples' / 'observed_app.py'}:events "
        f"-c {work / 'ckpt'} --every 1s --ui {port}; sleep 600"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "16", command],
        check=True,
    )
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,760",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until(lambda: page_up(url))
        driver.get(url)
        time.sleep(5)  # a few updates and checkpoints: a screenshot, not a test
        driver.save_screenshot(str(out / "live-page.png"))
        screen = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout
        (out / "terminal.txt").write_text(screen.rstrip() + "\n")
    finally:
        driver.quit()
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    print(f"wrote {out / 'live-page.png'} and {out / 'terminal.txt'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
