"""``rivermark ui``: a page with the checkpoint history of a directory."""

from __future__ import annotations

import click

from rivermark.cli.group import cli, open_store
from rivermark.cli.options import dir_argument, logged

__all__ = ["ui_command"]


def _do_ui(directory: str, port: int, addr: str) -> int:
    import asyncio
    import signal

    from rivermark.observe.history import HistoryServer

    server = HistoryServer(open_store(directory), port, addr)

    async def serve() -> None:
        await server.start()
        print(f"serving the checkpoint history of {directory} at {server.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await server.stop()

    asyncio.run(serve())
    return 0


@cli.command("ui")
@dir_argument
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="TCP port of the page (0: a free one, printed).",
)
@click.option(
    "--addr",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback by default; see docs/security.md).",
)
@logged
def ui_command(directory: str, port: int, addr: str) -> int:
    """Serve a page with the checkpoint history of DIR (a job that ran or runs there).

    One row per retained checkpoint: time, kind, state size per node, each
    source's position.  Reads the store only; stops on Ctrl-C or SIGTERM.
    """
    return _do_ui(directory, port, addr)
