"""The ``raychaos`` command line."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click


def _version() -> str:
    try:
        return version("raychaos")
    except PackageNotFoundError:
        return "0+unknown"


@click.group(invoke_without_command=True)
@click.version_option(_version(), prog_name="raychaos")
@click.pass_context
def main(ctx: click.Context) -> None:
    """raychaos: fault-tolerance and lifecycle testing for Ray."""
    if ctx.invoked_subcommand is None:
        click.echo(f"raychaos {_version()}")
        click.echo(ctx.get_help())


@main.command()
@click.option("--adds", default=12, show_default=True, type=click.IntRange(1, 10_000),
              help="acknowledged adds before the kill")
def run(adds: int) -> None:
    """Run the main job: for now, a checkpointed actor SIGKILLed and restored."""
    from scenarios._demo import run_demo

    rows = run_demo(adds=adds)
    wal = next(r for r in rows if r.durability == "wal")
    if wal.after != wal.before:
        raise click.ClickException(f"WAL mode lost state: {wal.before} before, {wal.after} after")
