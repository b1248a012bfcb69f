"""The ``rigger watch``, ``watch-status`` and ``watch-resume`` commands (added to the CLI's
group by engine/cli.py; they return exit codes, the CLI exits)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from engine.errors import EXIT_OK
from engine.plans import commands as plan_commands
from engine.templating.extravars import parse_all
from engine.watch import loop, status, store
from engine.watch.policy import Budget

STATE_DIR_HELP = "Where the watcher keeps its state (default: $RIGGER_STATE_DIR/watch or ~/.local/state/rigger/watch)."
# options watch, watch-status and watch-resume share
WINDOW = click.option(
    "--window",
    "window_s",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="The repair budget's window, in seconds.",
)
STATE_DIR = click.option("--state-dir", type=click.Path(file_okay=False), help=STATE_DIR_HELP)


@click.command("watch")
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("-i", "--inventory", "inventories", multiple=True, help="Inventory file (YAML or INI); repeatable.")
@click.option("-l", "--limit", help="Further limit the hosts with a pattern.")
@click.option("-e", "--extra-vars", "extra", multiple=True, help="Extra vars for every round.")
@click.option("-f", "--forks", default=10, show_default=True, type=click.IntRange(1, 500), help="Hosts in parallel.")
@click.option(
    "--interval", default=60.0, show_default=True, type=click.FloatRange(min=0), help="Seconds between rounds."
)
@click.option("--cycles", type=click.IntRange(min=1), help="Stop after this many rounds (default: until stopped).")
@click.option(
    "--max-repairs",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Repairs per host per window; then the host is paused.",
)
@WINDOW
@click.option(
    "--backoff",
    "backoff_s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds before a host's 2nd repair in a window, doubled for each further one.",
)
@click.option(
    "--breaker-share",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Pause every host when more than this share needs repair at once ...",
)
@click.option(
    "--breaker-min-hosts",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="... in a fleet of at least this many hosts.",
)
@click.option(
    "--events", type=click.Path(dir_okay=False), help="The JSONL event stream (default: events.jsonl in the state dir)."
)
@click.option(
    "--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics."
)
@STATE_DIR
def watch(
    playbook: str,
    inventories: tuple[str, ...],
    limit: str | None,
    extra: tuple[str, ...],
    forks: int,
    interval: float,
    cycles: int | None,
    max_repairs: int,
    window_s: float,
    backoff_s: float,
    breaker_share: float,
    breaker_min_hosts: int,
    events: str | None,
    metrics_port: int | None,
    state_dir: str | None,
) -> int:
    """Keep PLAYBOOK's hosts in their declared state: plan every --interval, repair by itself only
    what the playbook declares self-healable (rigger_watch_heal), within each host's budget;
    report everything else as drift in a plan file for a person."""
    request = plan_commands.Request(
        playbook=playbook, inventories=inventories, extra_vars=parse_all(extra), limit=limit, forks=forks
    )
    options = loop.WatchOptions(
        interval_s=interval,
        cycles=cycles,
        budget=Budget(max_repairs, window_s, backoff_s, breaker_share, breaker_min_hosts),
        state_dir=store.state_dir(state_dir),
        events=Path(events) if events else None,
        metrics_port=metrics_port,
    )
    return loop.Watcher(request, options, click.echo).run()


@click.command("watch-status")
@WINDOW
@STATE_DIR
def watch_status(window_s: float, state_dir: str | None) -> int:
    """Per host: last check, state, repairs in the window, paused or not."""
    click.echo(status.table(store.load(store.state_dir(state_dir)), time.time(), window_s))
    return EXIT_OK


@click.command("watch-resume")
@click.argument("hosts", nargs=-1)
@click.option("--fleet", is_flag=True, help="Clear the fleet circuit breaker.")
@STATE_DIR
def watch_resume(hosts: tuple[str, ...], fleet: bool, state_dir: str | None) -> int:
    """Clear the pause of HOSTS (and their used repair budget), or the fleet breaker."""
    if not hosts and not fleet:
        raise click.UsageError("name the paused hosts, or --fleet")
    cleared = loop.resume(store.state_dir(state_dir), hosts, fleet)
    click.echo("resumed: " + ", ".join(cleared) if cleared else "nothing was paused")
    return EXIT_OK
