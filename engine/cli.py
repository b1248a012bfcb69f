"""The rigger command line. The only place that exits."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import click

from engine import __version__, config, docs, registry, templating
from engine.errors import EXIT_BAD_OPTIONS, EXIT_INTERRUPTED, EXIT_UNEXPECTED, OptionsError, RiggerError
from engine.inventory import listing, load_inventory, require_limit_matches, select_hosts, targeted_connections
from engine.mask import MASK, MaskedStream
from engine.model import Inventory, Play, Playbook, all_tasks, host_patterns
from engine.output.console import ConsoleSink
from engine.output.events import Notice, Sink
from engine.output.jsonl import JsonlSink
from engine.plans import commands as plan_commands
from engine.plans.review import plural
from engine.plans.secrets import Scrubber
from engine.playbook import hostcheck, static_check, unsupported
from engine.playbook import listing as listing_mod
from engine.playbook.loader import load_playbook
from engine.run import interrupt, quarantine
from engine.run.runner import Runner, RunOptions
from engine.templating.extravars import parse_all
from engine.watch import command as watch_commands

DEFAULT_FORKS = 10
CONNECTIONS = ("ssh", "smart", "paramiko", "local")


@dataclass(frozen=True)
class AnsibleFlags:
    """ansible-playbook's flags for the connection, become and what to show instead of running."""

    remote_user: str | None = None
    become: bool | None = None
    become_user: str | None = None
    ask_become_pass: bool = False
    private_key: str | None = None
    connection: str | None = None
    timeout: float | None = None
    list_hosts: bool = False
    list_tasks: bool = False
    syntax_check: bool = False
    start_at_task: str | None = None

    def as_variables(self, cfg: config.Config) -> dict[str, Any]:
        """The variables these flags set (below play keywords and inventory variables)."""
        password = None
        if self.ask_become_pass or (cfg.get("become_ask_pass") and self.become is not False):
            password = click.prompt("BECOME password", hide_input=True, default="", show_default=False, err=True)
        return {
            "ansible_user": self.remote_user,
            "ansible_become": True if self.become else None,
            "ansible_become_user": self.become_user,
            "ansible_become_password": password or None,
            "ansible_ssh_private_key_file": self.private_key,
            "ansible_connection": "local" if self.connection == "local" else None,
            "ssh_connect_timeout_s": self.timeout,
        }


def _split_tags(values: Sequence[str]) -> frozenset[str]:
    return frozenset(t.strip() for value in values for t in value.split(",") if t.strip())


def _sink(output: str, diff: bool, verbosity: int) -> Sink:
    if output == "jsonl":
        return JsonlSink(sys.stdout)
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    return ConsoleSink(sys.stdout, colour=colour, show_diff=diff, verbosity=verbosity)


# --lock-wait, as run and apply take it
ALLOW_CHECK_MODE_FALSE = click.option(
    unsupported.CHECK_MODE_FALSE_FLAG,
    "allow_check_mode_false",
    is_flag=True,
    help="Accept `check_mode: false` tasks: they run in real runs and are skipped, by name, under "
    "--check (which never runs a task for real).",
)
LOCK_WAIT = click.option(
    "--lock-wait",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Wait up to SECONDS for another rigger run on a host to finish (default: the "
    "rigger_run_lock_wait_s variable, else 0: fail at once).",
)


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
@click.option(
    "-f", "--forks", type=click.IntRange(1, 500), help="Hosts in parallel (default: ansible.cfg's forks, else 10)."
)
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@LOCK_WAIT
@click.option(
    "--include-quarantined",
    is_flag=True,
    help="Serve on quarantined hosts too (the same as -e rigger_include_quarantined=true).",
)
@click.option("-v", "--verbose", count=True, help="More detail (-v shows task data and tracebacks of bugs).")
@click.option("-u", "--user", "remote_user", help="Connect as this user (below play remote_user and ansible_user).")
@click.option("-b", "--become", is_flag=True, default=None, help="Run operations as root (sudo).")
@click.option("--become-user", help="Become this user instead of root (below become_user and ansible_become_user).")
@click.option("-K", "--ask-become-pass", is_flag=True, help="Ask for the sudo password.")
@click.option("--private-key", "--key-file", "private_key", help="The SSH private key file to use.")
@click.option(
    "-c",
    "--connection",
    type=click.Choice(CONNECTIONS),
    help="Connection type (rigger has ssh and local; smart and paramiko mean ssh).",
)
@click.option("-T", "--timeout", type=click.FloatRange(min=0), help="Connection timeout in seconds.")
@click.option("--list-hosts", is_flag=True, help="Print the hosts each play would run on; run nothing.")
@click.option("--list-tasks", is_flag=True, help="Print the tasks of each play; run nothing.")
@click.option("--syntax-check", is_flag=True, help="Check the playbook's syntax; run nothing.")
@click.option("--start-at-task", help="Start at the first task whose name matches (a shell pattern).")
@ALLOW_CHECK_MODE_FALSE
def run(
    playbook: str,
    inventories: tuple[str, ...],
    limit: str | None,
    extra: tuple[str, ...],
    check: bool,
    diff: bool,
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    forks: int | None,
    output: str,
    lock_wait: float | None,
    include_quarantined: bool,
    verbose: int,
    allow_check_mode_false: bool,
    **ansible_flags: Any,
) -> None:
    """Run PLAYBOOK against the inventory's hosts (without -i only `localhost` exists)."""
    flags = AnsibleFlags(**ansible_flags)
    cfg = config.current()
    unsupported.allow_check_mode_false(allow_check_mode_false)
    book = load_playbook(playbook)
    if flags.syntax_check:
        click.echo(listing_mod.describe(book, playbook, None, False), nl=False)
        return
    inventory = load_inventory(_inventories(inventories), playbook_dir=_playbook_dir(playbook))
    extra_vars = parse_all(extra)
    if include_quarantined:
        extra_vars[quarantine.INCLUDE_VAR] = True
    if flags.list_hosts or flags.list_tasks:
        click.echo(_listed(book, playbook, inventory, extra_vars, limit, flags), nl=False)
        return
    static_check.check(book, inventory, extra_vars)
    unused = static_check.unused_extra_vars(book, inventory, extra_vars)
    plan_commands.scrubber_for(book, inventory, extra_vars)  # secrets known before any output
    options = RunOptions(
        check_mode=check,
        diff=diff,
        limit=limit,
        tags=_split_tags(tags),
        skip_tags=_split_tags(skip_tags),
        forks=forks or int(cfg.get("forks", DEFAULT_FORKS)),
        extra_vars=extra_vars,
        verbosity=verbose,
        lock_wait_s=lock_wait,
        connection_defaults=config.connection_defaults(cfg, flags.as_variables(cfg)),
        start_at_task=flags.start_at_task,
    )
    require_limit_matches(inventory, limit)
    unused += targeted_connections(inventory, host_patterns(book), limit)
    sink = _sink(output, diff, verbose)
    for warning in [*cfg.warnings(), *unused, *hostcheck.warnings(book, inventory, limit)]:
        sink.emit(Notice("warning", warning))
    runner = Runner(inventory, options, sink.emit)
    code = runner.run(book)
    if runner.start_at_pending:
        sink.emit(Notice("error", f"no task matches --start-at-task {flags.start_at_task!r}"))
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
        inventories=_inventories(inventories),
        extra_vars=parse_all(extra),
        limit=limit,
        tags=_split_tags(tags),
        skip_tags=_split_tags(skip_tags),
        forks=forks,
        verbosity=verbose,
    )
    saved = plan_commands.make_plan(request, out, _sink(output, True, verbose))
    sys.exit(plan_commands.plan_exit_code(saved, detailed_exitcode))


@cli.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html"]), default="text", show_default=True)
def show(plan_file: str, fmt: str) -> None:
    """Render a saved plan (or a rollout record) for review: the host-by-task matrix, then
    each change once. Exits 2 (or the plan's own failure code) when hosts failed while planning."""
    from engine.baselines import rollout_view

    record = rollout_view.load(plan_file)
    if record is not None:
        render = {"text": rollout_view.text, "markdown": rollout_view.markdown, "html": rollout_view.html}[fmt]
        click.echo(render(record), nl=False)
        return
    rendered, code = plan_commands.show(plan_file, fmt)
    click.echo(rendered, nl=False)
    sys.exit(code)


@cli.command("baselines")
@click.option("--host", help="Only this host's measurements.")
@click.option(
    "--threshold",
    type=click.FloatRange(min=0, max=1),
    default=0.25,
    show_default=True,
    help="Relative slowdown that counts as a regression or an outlier (beyond the noise band).",
)
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def baselines_cmd(host: str | None, threshold: float, output: str) -> None:
    """List the stored serving measurements; flag regressions and slower hosts (outliers)."""
    from engine.baselines import BaselineStore, report

    rows = report.flagged(report.rows(BaselineStore().measurements(host=host)), relative=threshold)
    if output == "json":
        click.echo(json.dumps(report.as_data(rows), indent=2))
    else:
        click.echo(report.text(rows), nl=False)


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
@click.option(
    "-l", "--limit", help="Apply to these of the plan's hosts only (needed for a plan in which hosts failed)."
)
@LOCK_WAIT
@click.option("-f", "--forks", default=10, show_default=True, type=click.IntRange(1, 500), help="Hosts in parallel.")
@click.option("--output", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@click.option("-v", "--verbose", count=True, help="More detail.")
def apply_cmd(
    plan_file: str, extra: tuple[str, ...], max_age: str, on_drift: str, limit: str | None,
    lock_wait: float | None, forks: int, output: str, verbose: int,
) -> None:  # fmt: skip
    """Apply a saved plan: each task is planned again and applied only if it is the reviewed change."""
    options = plan_commands.ApplyOptions(
        extra_vars=parse_all(extra),
        max_age_s=plan_commands.parse_age(max_age),
        stop_all=on_drift == "all",
        limit=limit,
        lock_wait_s=lock_wait,
        forks=forks,
        verbosity=verbose,
    )
    sys.exit(plan_commands.apply_plan(plan_file, _sink(output, True, verbose), options))


@cli.command()
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("-i", "--inventory", "inventories", multiple=True)
@click.option("-e", "--extra-vars", "extra", multiple=True, help="Extra vars the run will get.")
@ALLOW_CHECK_MODE_FALSE
def validate(playbook: str, inventories: tuple[str, ...], extra: tuple[str, ...], allow_check_mode_false: bool) -> None:
    """Parse and check PLAYBOOK (and inventories) without connecting to any host."""
    unsupported.allow_check_mode_false(allow_check_mode_false)
    book = load_playbook(playbook)
    inventory = load_inventory(_inventories(inventories), playbook_dir=_playbook_dir(playbook))
    extra_vars = parse_all(extra)
    static_check.check(book, inventory, extra_vars)
    unreached = targeted_connections(inventory, host_patterns(book))
    unused = static_check.unused_extra_vars(book, inventory, extra_vars)
    for warning in [*config.current().warnings(), *unused, *hostcheck.warnings(book, inventory), *unreached]:
        click.echo(f"[WARNING] {warning}", err=True)
    tasks = sum(1 for _ in all_tasks(book))
    counts = f"{plural(len(book.plays), 'play')}, {plural(tasks, 'task')}, {plural(len(inventory.hosts), 'host')}"
    click.echo(f"{playbook}: valid ({counts} in inventory)")


@cli.command()
@click.option("-i", "--inventory", "inventories", multiple=True)
@click.option("-l", "--limit", help="Host pattern (default: all, or localhost without an inventory).")
def facts(inventories: tuple[str, ...], limit: str | None) -> None:
    """Print gathered facts of the selected hosts as JSON (rigger's, and Ansible's under ansible_facts)."""
    from engine.connection.factory import open_connection
    from engine.facts import gather

    inventory = load_inventory(_inventories(inventories))
    limit = limit or ("all" if inventory.hosts else "localhost")
    hosts = select_hosts(inventory, limit)
    if not hosts:
        raise OptionsError(f"pattern {limit!r} matches no host")
    answer: dict[str, Any] = {}
    for name in hosts:
        conn = open_connection(name, inventory.host(name).vars)
        try:
            gathered = gather(conn)
            found = {**gathered.own, "ansible_facts": gathered.ansible}
            # secret-named values (FOO_TOKEN in ansible_env, an inventory password) never print
            templating.record_secrets(inventory.host(name).vars)
            answer[name] = Scrubber.from_vars([found, inventory.host(name).vars]).value(found)
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
    inventory = load_inventory(_inventories(inventories), playbook_dir=playbook_dir)
    Scrubber.from_vars(h.vars for h in inventory.hosts.values())  # printed masked
    held = _quarantine_entries()
    if host is not None:
        if host not in inventory.hosts:
            raise OptionsError(f"--host {host!r}: no such host in the inventory")
        shown = dict(inventory.hosts[host].vars)
        if host in held:
            shown[quarantine.HOST_VAR] = held[host]
        click.echo(json.dumps(shown, indent=4, sort_keys=True, default=str))
        return
    listed = listing.listing(inventory)
    for name, entry in held.items():
        if name in inventory.hosts:  # shown where the host's variables are, as a run sees it
            listed["_meta"]["hostvars"].setdefault(name, {})[quarantine.HOST_VAR] = entry
    click.echo(json.dumps(listed, indent=4, sort_keys=True, default=str))


def _quarantine_entries() -> dict[str, dict[str, Any]]:
    try:
        return quarantine.load()
    except (OSError, ValueError) as exc:
        raise OptionsError(f"cannot read the quarantine file {quarantine.path()}: {exc}; fix or remove it") from None


@cli.group("quarantine")
def quarantine_cmd() -> None:
    """Hosts quarantined on this controller (a refused GPU health verdict): serving skips them."""


@quarantine_cmd.command("list")
def quarantine_list() -> None:
    """Print the quarantined hosts as JSON: host -> reason, task, since."""
    click.echo(json.dumps(_quarantine_entries(), indent=2, sort_keys=True))


@quarantine_cmd.command("clear")
@click.argument("host")
def quarantine_clear(host: str) -> None:
    """End HOST's quarantine (after the GPU was reset, the host rebooted or repaired)."""
    _quarantine_entries()
    if not quarantine.clear(host):
        raise OptionsError(f"{host!r} is not quarantined (`rigger quarantine list` shows who is)")
    click.echo(f"{host}: quarantine cleared ({quarantine.path()})")


def _listed(
    book: Playbook, shown: str, inventory: Inventory, extra_vars: dict[str, Any], limit: str | None, flags: AnsibleFlags
) -> str:
    """--list-hosts / --list-tasks: each play's keywords rendered as the run would render them."""
    renderer = Runner(inventory, RunOptions(extra_vars=extra_vars, limit=limit), lambda _: None)
    plays = [renderer.rendered_play(play, book) for play in book.plays]
    rendered = replace(book, plays=tuple(plays))

    def select(play: Play) -> list[str]:
        return select_hosts(inventory, play.hosts, limit)

    return listing_mod.describe(rendered, shown, select if flags.list_hosts else None, flags.list_tasks)


def _inventories(given: tuple[str, ...]) -> tuple[str, ...]:
    """-i, else ansible.cfg's (or ANSIBLE_INVENTORY's) inventory, as ansible-playbook reads it."""
    return given or tuple(config.current().get("inventory", ()))


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
@click.option("--markdown", is_flag=True, help="Markdown: the page in docs/modules/.")
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
    """One command behind the one mask (engine/mask.py): whatever it or click prints to
    stdout or stderr, errors included, is masked there."""
    MASK.clear()
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = MaskedStream(out), MaskedStream(err)
    try:
        return _outcome(call)
    finally:
        sys.stdout, sys.stderr = out, err


def _outcome(call: Callable[[], Any]) -> int:
    try:
        with interrupt.handled():  # SIGTERM and SIGHUP take Ctrl-C's path: recap, exit 99
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
    except KeyboardInterrupt as exc:  # before a run began or after it ended (a run reports its own)
        _report(f"interrupted ({interrupt.signal_name(exc)})")
        return EXIT_INTERRUPTED
    except Exception as exc:
        _report(f"unexpected error (a bug in rigger): {type(exc).__name__}: {exc}")
        if os.environ.get("RIGGER_DEBUG"):
            traceback.print_exc()
        return EXIT_UNEXPECTED


cli.add_command(watch_commands.watch)
cli.add_command(watch_commands.watch_status)
cli.add_command(watch_commands.watch_resume)


if __name__ == "__main__":
    main()
