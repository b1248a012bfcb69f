"""The rigger command line. The only place that exits."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import click

from engine import __version__, docs, inventory_list, registry, static_check
from engine.errors import EXIT_BAD_OPTIONS, EXIT_INTERRUPTED, EXIT_UNEXPECTED, OptionsError, RiggerError
from engine.extravars import parse_all
from engine.inventory import load_inventory, select_hosts
from engine.loader import load_playbook
from engine.output.console import ConsoleSink
from engine.output.events import Notice, Sink
from engine.output.jsonl import JsonlSink
from engine.plans import commands as plan_commands
from engine.playbook import all_tasks
from engine.runner import Runner, RunOptions


def _split_tags(values: Sequence[str]) -> frozenset[str]:
    return frozenset(t.strip() for value in values for t in value.split(",") if t.strip())


def _sink(output: str, diff: bool, verbosity: int) -> Sink:
    if output == "jsonl":
        return JsonlSink(sys.stdout)
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    return ConsoleSink(sys.stdout, colour=colour, show_diff=diff, verbosity=verbosity)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rigger")
def cli() -> None:
    """rigger: declarative playbooks for GPU inference hosts."""


@cli.command()
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("-i", "--inventory", "inventories", multiple=True, help="Inventory file (YAML or INI); repeatable.")
@click.option("-l", "--limit", help="Further limit the hosts with a pattern.")
@click.option(
    "-e", "--extra-vars", "extra", multiple=True, help="KEY=VALUE, @file.yml or a JSON object; wins over everything."
)
@click.option("-C", "--check", is_flag=True, help="Show what would change; change nothing.")
@click.option("-D", "--diff", is_flag=True, help="Show diffs of what changes (or would).")
@click.option("-t", "--tags", multiple=True, help="Only run tasks with these tags.")
@click.option("--skip-tags", multiple=True, help="Skip tasks with these tags.")
@click.option("-f", "--forks", default=10, show_default=True, type=click.IntRange(1, 500), help="Hosts in parallel.")
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@click.option(
    "--lock-wait",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Wait up to SECONDS for another rigger run on a host to finish (default: the "
    "rigger_run_lock_wait_s variable, else 0: fail at once).",
)
@click.option("-v", "--verbose", count=True, help="More detail (-v shows task data and tracebacks of bugs).")
def run(
    playbook: str,
    inventories: tuple[str, ...],
    limit: str | None,
    extra: tuple[str, ...],
    check: bool,
    diff: bool,
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    forks: int,
    output: str,
    lock_wait: float | None,
    verbose: int,
) -> None:
    """Run PLAYBOOK against the inventory's hosts (without -i only `localhost` exists)."""
    book = load_playbook(playbook)
    inventory = load_inventory(inventories, playbook_dir=_playbook_dir(playbook))
    extra_vars = parse_all(extra)
    static_check.check(book, inventory, extra_vars)
    unused = static_check.unused_extra_vars(book, inventory, extra_vars)
    options = RunOptions(
        check_mode=check,
        diff=diff,
        limit=limit,
        tags=_split_tags(tags),
        skip_tags=_split_tags(skip_tags),
        forks=forks,
        extra_vars=extra_vars,
        verbosity=verbose,
        lock_wait_s=lock_wait,
    )
    if limit and inventory.hosts and not select_hosts(inventory, "all", limit):
        raise RiggerError(f"--limit {limit!r}: the inventory, host pattern and --limit leave no hosts to target")
    sink = _sink(output, diff, verbose)
    for warning in unused:
        sink.emit(Notice("warning", warning))
    runner = Runner(inventory, options, sink.emit)
    code = runner.run(book)
    sink.close()
    sys.exit(code)


@cli.command("plan")
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("-i", "--inventory", "inventories", multiple=True, help="Inventory file (YAML or INI); repeatable.")
@click.option("-l", "--limit", help="Further limit the hosts with a pattern.")
@click.option("-e", "--extra-vars", "extra", multiple=True, help="Extra vars (not saved: give apply the same -e).")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="The plan file to write.")
@click.option("-t", "--tags", multiple=True, help="Only plan tasks with these tags.")
@click.option("--skip-tags", multiple=True, help="Skip tasks with these tags.")
@click.option("-f", "--forks", default=10, show_default=True, type=click.IntRange(1, 500), help="Hosts in parallel.")
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help=f"Exit {plan_commands.EXIT_CHANGES_PENDING} when changes are pending, 0 when none "
    "(2 and 3 still mean failed and unreachable).",
)
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@click.option("-v", "--verbose", count=True, help="More detail.")
def plan_cmd(
    playbook: str,
    inventories: tuple[str, ...],
    limit: str | None,
    extra: tuple[str, ...],
    out: str,
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    forks: int,
    detailed_exitcode: bool,
    output: str,
    verbose: int,
) -> None:
    """Run PLAYBOOK in check mode and save what it would change, for review and apply."""
    request = plan_commands.Request(
        playbook=playbook,
        inventories=inventories,
        extra_vars=parse_all(extra),
        limit=limit,
        tags=_split_tags(tags),
        skip_tags=_split_tags(skip_tags),
        forks=forks,
        verbosity=verbose,
    )
    if limit and not select_hosts(load_inventory(inventories), limit):
        raise OptionsError(f"--limit {limit!r} matches no host in the inventory")
    saved = plan_commands.make_plan(request, out, _sink(output, True, verbose))
    sys.exit(plan_commands.plan_exit_code(saved, detailed_exitcode))


@cli.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html"]), default="text", show_default=True)
def show(plan_file: str, fmt: str) -> None:
    """Render a saved plan for review: identical changes across hosts grouped."""
    click.echo(plan_commands.show(plan_file, fmt), nl=False)


@cli.command("apply")
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("-e", "--extra-vars", "extra", multiple=True, help="The same extra vars the plan was made with.")
@click.option("--max-age", default="24h", show_default=True, help="Refuse plans older than this (90m, 24h, 2d).")
@click.option(
    "--on-drift",
    type=click.Choice(["host", "all"]),
    default="host",
    show_default=True,
    help="A host that drifted since the review stops: only that host, or every host.",
)
@click.option("-f", "--forks", default=10, show_default=True, type=click.IntRange(1, 500), help="Hosts in parallel.")
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@click.option("-v", "--verbose", count=True, help="More detail.")
def apply_cmd(
    plan_file: str, extra: tuple[str, ...], max_age: str, on_drift: str, forks: int, output: str, verbose: int
) -> None:
    """Apply a saved plan: each task is planned again and applied only if it is the reviewed change."""
    code = plan_commands.apply_plan(
        plan_file,
        parse_all(extra),
        _sink(output, True, verbose),
        max_age_s=plan_commands.parse_age(max_age),
        stop_all=on_drift == "all",
        forks=forks,
        verbosity=verbose,
    )
    sys.exit(code)


@cli.command()
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("-i", "--inventory", "inventories", multiple=True)
@click.option("-e", "--extra-vars", "extra", multiple=True, help="Extra vars the run will get.")
def validate(playbook: str, inventories: tuple[str, ...], extra: tuple[str, ...]) -> None:
    """Parse and check PLAYBOOK (and inventories) without connecting to any host."""
    book = load_playbook(playbook)
    inventory = load_inventory(inventories, playbook_dir=_playbook_dir(playbook))
    extra_vars = parse_all(extra)
    static_check.check(book, inventory, extra_vars)
    for warning in static_check.unused_extra_vars(book, inventory, extra_vars):
        click.echo(f"[WARNING] {warning}", err=True)
    tasks = sum(1 for _ in all_tasks(book))
    click.echo(f"{playbook}: valid ({len(book.plays)} plays, {tasks} tasks, {len(inventory.hosts)} hosts in inventory)")


@cli.command()
@click.option("-i", "--inventory", "inventories", multiple=True)
@click.option("-l", "--limit", help="Host pattern (default: all, or localhost without an inventory).")
def facts(inventories: tuple[str, ...], limit: str | None) -> None:
    """Print gathered facts of the selected hosts as JSON (rigger's, and Ansible's under ansible_facts)."""
    from engine.connection.factory import open_connection
    from engine.facts import gather

    inventory = load_inventory(inventories)
    limit = limit or ("all" if inventory.hosts else "localhost")
    hosts = select_hosts(inventory, limit)
    if not hosts:
        raise OptionsError(f"pattern {limit!r} matches no host")
    answer: dict[str, Any] = {}
    for name in hosts:
        conn = open_connection(name, inventory.host(name).vars)
        try:
            gathered = gather(conn)
            answer[name] = {**gathered.own, "ansible_facts": gathered.ansible}
        except RiggerError as exc:
            answer[name] = {"error": str(exc)}
        finally:
            conn.close()
    click.echo(json.dumps(answer, indent=2, default=str))


@cli.command("inventory")
@click.option("-i", "--inventory", "inventories", multiple=True, help="Inventory file or folder; repeatable.")
@click.option("--list", "as_list", is_flag=True, help="Every group and host with its variables (the default).")
@click.option("--host", help="One host's variables.")
@click.option("--playbook-dir", type=click.Path(file_okay=False), help="Also read group_vars/host_vars beside it.")
def inventory_cmd(inventories: tuple[str, ...], as_list: bool, host: str | None, playbook_dir: str | None) -> None:
    """Print the resolved inventory as JSON, in the shape of `ansible-inventory --list`."""
    inventory = load_inventory(inventories, playbook_dir=playbook_dir)
    if host is not None:
        if host not in inventory.hosts:
            raise OptionsError(f"--host {host!r}: no such host in the inventory")
        click.echo(json.dumps(inventory.hosts[host].vars, indent=4, sort_keys=True, default=str))
        return
    click.echo(json.dumps(inventory_list.listing(inventory), indent=4, sort_keys=True, default=str))


def _playbook_dir(playbook: str) -> str:
    return os.path.dirname(os.path.abspath(playbook))


@cli.command("modules")
def list_modules() -> None:
    """List the task modules with their one-line summary."""
    names = registry.module_names()
    width = max(len(n) for n in names)
    for name in names:
        click.echo(f"{name.ljust(width)}  {registry.get(name).summary}")


@cli.command()
@click.argument("module")
@click.option("--markdown", is_flag=True, help="Markdown (for the README).")
def doc(module: str, markdown: bool) -> None:
    """Show MODULE's arguments, generated from its JSON Schema."""
    if module not in registry.module_names():
        raise OptionsError(f"no module named '{module}'{registry.suggest(module, registry.module_names())}")
    spec = registry.get(module)
    click.echo(docs.render_markdown(spec) if markdown else docs.render_text(spec), nl=False)


def _report(message: str) -> None:
    click.echo(click.style("ERROR: ", fg="red", bold=True) + message, err=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: maps every outcome to an exit code, never a raw traceback."""
    sys.exit(exit_code(argv))


def exit_code(argv: Sequence[str] | None = None) -> int:
    """One command's exit code, without leaving the process: ``main`` minus ``sys.exit``
    (the fast test tier runs the CLI this way, in the test process)."""
    return _invoke(lambda: cli.main(args=argv, prog_name="rigger", standalone_mode=False))


def _invoke(call: Callable[[], Any]) -> int:
    try:
        result = call()
        return int(result) if isinstance(result, int) else 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except click.exceptions.Abort:
        _report("aborted")
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return EXIT_BAD_OPTIONS
    except RiggerError as exc:
        _report(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _report("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        _report(f"unexpected error (a bug in rigger): {type(exc).__name__}: {exc}")
        if os.environ.get("RIGGER_DEBUG"):
            traceback.print_exc()
        return EXIT_UNEXPECTED


if __name__ == "__main__":
    main()
