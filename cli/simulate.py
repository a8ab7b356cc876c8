"""``zbroker simulate``: run a TOPOLOGY.toml through the routing engine, print its figures."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .app import cli
from .format import format_simulation


@cli.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option(
    "--svg",
    "svg_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also draw the network, with the messages each link carried, to this SVG file.",
)
@click.option(
    "--compare",
    is_flag=True,
    help="Run the topology under direct and topic-host routing (hosts from --host) and "
    "print the figures of each side by side.",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="PATTERN=NODE[,NODE...]",
    help="These nodes host the branch PATTERN (repeatable; implies --compare).",
)
@click.option(
    "--flood",
    "flood",
    multiple=True,
    metavar="PATTERN",
    help="Also run with this branch flooded on every node (repeatable; implies --compare).",
)
def simulate(
    topology: Path,
    as_json: bool,
    svg_file: Path | None,
    compare: bool,
    hosts: tuple[str, ...],
    flood: tuple[str, ...],
) -> None:
    """Simulate a network from a TOPOLOGY.toml file and print its figures.

    Convergence time, advertisement frames, messages per link per publish, hops per
    delivery, duplicates delivered (must be 0) and messages lost: plan a network before
    deploying it. Runs the same routing engine as a node, in one process.
    """
    from zbroker.sim import Network
    from zbroker.simulate import load_topology, run_simulation

    if compare or hosts or flood:
        if svg_file is not None:  # (it used to be ignored, the command exiting 0)
            raise click.UsageError(
                "--svg draws one run; it does not go with --compare, --host or --flood"
            )
        from zbroker.simulate_modes import compare_modes, format_modes, parse_hosts

        result = compare_modes(load_topology(topology), parse_hosts(hosts), flood)
        click.echo(json.dumps(result, indent=2) if as_json else format_modes(result))
        return

    seen: list[Network] = []
    report = run_simulation(load_topology(topology), seen.append if svg_file else None)
    if svg_file is not None:
        from zbroker.simulate_svg import network_svg

        try:
            svg_file.write_text(network_svg(seen[0], report.as_dict()), "utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write {svg_file}: {exc.strerror}") from exc
    click.echo(
        json.dumps(report.as_dict(), indent=2) if as_json else format_simulation(report.as_dict())
    )
