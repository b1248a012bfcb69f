"""Create, change or remove a local user account with useradd, usermod and userdel.

Ansible's `user` for Linux: only what differs is changed (`usermod` with just those
options); `groups` sets the supplementary groups exactly, or with `append` only adds; an
empty list removes them all. `password` is a crypt hash (`$6$...`), never printed: plan
compares a digest the host computes, the diff says only that it changes, and the hash
reaches the host on chpasswd's stdin, not on a command line. A group named here that an
earlier task creates may be missing while planning; apply looks again and fails, changing
nothing, if it is still missing. `state: absent` runs `userdel` (the home is kept).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.module_api import Change, Diff, Result, TaskContext, TaskFailed, Unchanged
from modules.system.accounts import ACCOUNT_NAME, account_facts, lines, run_tool

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": ACCOUNT_NAME,
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "present: the account exists as described; absent: it does not (its home is kept).",
        },
        "uid": {"type": "integer", "minimum": 0, "description": "The user's uid."},
        "group": {"type": "string", "description": "Primary group (name or gid); it must exist."},
        "groups": {
            "type": ["array", "string"],
            "items": {"type": "string"},
            "description": "Supplementary groups (a list, or names separated by commas); an empty "
            "list removes them all. Each must exist.",
        },
        "append": {
            "type": "boolean",
            "default": False,
            "description": "With groups: add to the groups the user is in instead of replacing them.",
        },
        "comment": {"type": "string", "description": "The GECOS field (full name)."},
        "home": {"type": "string", "pattern": "^/", "description": "Home directory path (absolute)."},
        "shell": {"type": "string", "pattern": "^/", "description": "Login shell (an absolute path)."},
        "create_home": {
            "type": "boolean",
            "default": True,
            "description": "Create the home directory (from /etc/skel) when it is missing.",
        },
        "system": {
            "type": "boolean",
            "default": False,
            "description": "Create a system account (uid from the system range, no aging); only on creation.",
        },
        "password": {
            "type": "string",
            "description": "The password as a crypt hash (mkpasswd -m sha-512); never shown.",
        },
        "update_password": {
            "type": "string",
            "enum": ["always", "on_create"],
            "default": "always",
            "description": "always: set password when it differs; on_create: only for a new user.",
        },
    },
}


@dataclass(frozen=True)
class Plan:
    """Commands that bring the account to the asked state, and what they change."""

    commands: tuple[tuple[str, ...], ...]
    before: Mapping[str, Any]
    after: Mapping[str, Any]
    missing_groups: tuple[str, ...]
    set_password: bool


def _groups(args: Mapping[str, Any]) -> list[str] | None:
    value = args.get("groups")
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    return [g.strip() for g in items if g.strip()]


def _password_digest(args: Mapping[str, Any]) -> str:
    return hashlib.sha256(str(args["password"]).lstrip("!").encode()).hexdigest()


def _check_password(args: Mapping[str, Any]) -> list[str]:
    """Ansible's warning for a password that is no hash; a refusal for what breaks chpasswd."""
    password = args.get("password")
    if password is None:
        return []
    if any(c in password for c in ":\n"):
        raise TaskFailed("password: a crypt hash cannot contain ':' or a newline (not shown)")
    if password in ("*", "!", "*************"):
        return []
    if "$" not in password or any(c in password for c in "*!"):
        return ["The input password appears not to have been hashed. The 'password' argument must be encrypted."]
    return []


def _named_groups(args: Mapping[str, Any]) -> list[str]:
    return ([args["group"]] if args.get("group") else [args["name"]]) + (_groups(args) or [])


def _create(args: Mapping[str, Any], facts: Mapping[str, Any]) -> Plan:
    name, known = args["name"], facts["groups"]
    argv = ["useradd"]
    argv += ["-u", str(args["uid"])] if args.get("uid") is not None else []
    if args.get("group"):
        argv += ["-g", args["group"]]
    elif known.get(name):  # a group named like the user exists: no user group (as Ansible)
        argv.append("-N")
    wanted = _groups(args)
    argv += ["-G", ",".join(wanted)] if wanted else []
    for flag, key in (("-c", "comment"), ("-d", "home"), ("-s", "shell")):
        argv += [flag, args[key]] if args.get(key) is not None else []
    argv += ["-m"] if args["create_home"] else ["-M"]
    argv += ["-r"] if args["system"] else []
    commands: list[tuple[str, ...]] = []
    parent = str(args.get("home") or "").rpartition("/")[0]
    if args["create_home"] and parent and not facts["dirs"].get(parent):
        commands.append(("mkdir", "-p", "--", parent))  # useradd -m does not create parents
    commands.append((*argv, name))
    after = {k: args.get(k) for k in ("uid", "group", "comment", "home", "shell")}
    after["groups"] = ",".join(wanted) if wanted else None
    after["password"] = "(set, not shown)" if args.get("password") is not None else None
    missing = tuple(g for g in [args.get("group"), *(wanted or [])] if g and known.get(g) is None)
    return Plan(tuple(commands), {"state": "absent"}, after, missing, args.get("password") is not None)


def _group_option(args: Mapping[str, Any], user: Mapping[str, Any], known: Mapping[str, Any]) -> list[str]:
    """usermod's -G (and -a) when the supplementary groups differ, as Ansible decides it."""
    wanted = _groups(args)
    if wanted is None:
        return []
    current = set(user["member_of"])
    names = {known[g]["name"] if known.get(g) else g for g in wanted}
    if not names:
        return ["-G", ""] if current and not args["append"] else []
    if args["append"]:
        return ["-a", "-G", ",".join(wanted)] if names - current else []
    return ["-G", ",".join(wanted)] if names ^ current else []


def _modify(args: Mapping[str, Any], user: Mapping[str, Any], facts: Mapping[str, Any]) -> Plan:
    known = facts["groups"]
    argv: list[str] = []
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    if args.get("uid") is not None and args["uid"] != user["uid"]:
        argv += ["-u", str(args["uid"])]
        before["uid"], after["uid"] = user["uid"], args["uid"]
    primary = known.get(args["group"]) if args.get("group") else None
    if args.get("group") and (primary is None or primary["gid"] != user["gid"]):
        argv += ["-g", str(primary["gid"]) if primary else args["group"]]
        before["group"], after["group"] = user["group"] or user["gid"], args["group"]
    groups = _group_option(args, user, known)
    if groups:
        argv += groups
        before["groups"] = ",".join(user["member_of"]) or "(none)"
        after["groups"] = (groups[-1] or "(none)") if not args["append"] else f"+{groups[-1]}"
    for flag, key in (("-c", "comment"), ("-d", "home"), ("-s", "shell")):
        if args.get(key) is not None and args[key] != user[key]:
            argv += [flag, args[key]]
            before[key], after[key] = user[key], args[key]
    commands = [("usermod", *argv, args["name"])] if argv else []
    set_password = _password_differs(args, user)
    if set_password:
        before["password"], after["password"] = "(not shown)", "(changed, not shown)"
    home = args.get("home") or user["home"]
    home_exists = facts["dirs"].get(home, user["home_exists"]) if args.get("home") else user["home_exists"]
    if args["create_home"] and not home_exists:
        commands += [("cp", "-a", "/etc/skel", home), ("chown", "-R", f"{args['name']}:", home)]
        before["home directory"], after["home directory"] = "absent", f"{home} (from /etc/skel)"
    missing = tuple(g for g in [args.get("group"), *(_groups(args) or [])] if g and known.get(g) is None)
    return Plan(tuple(commands), before, after, missing, set_password)


def _password_differs(args: Mapping[str, Any], user: Mapping[str, Any]) -> bool:
    if args.get("password") is None or args["update_password"] != "always":
        return False
    if user["password_digest"] is None:
        raise TaskFailed("cannot read /etc/shadow to compare the password: run the task with become")
    return bool(user["password_digest"] != _password_digest(args))


def _home_dirs(args: Mapping[str, Any]) -> list[str]:
    home = args.get("home")
    return [home, home.rpartition("/")[0] or "/"] if home else []


def _plan_present(ctx: TaskContext, args: Mapping[str, Any]) -> tuple[Plan, Mapping[str, Any] | None]:
    names = _named_groups(args)
    facts = account_facts(ctx, [args["name"]], names, password=args.get("password") is not None, dirs=_home_dirs(args))
    user = facts["users"][args["name"]]
    return (_create(args, facts) if user is None else _modify(args, user, facts)), user


def _fingerprint(name: str, user: Mapping[str, Any] | None) -> dict[str, str]:
    if user is None:
        return {f"user:{name}": "absent"}
    keys = ("uid", "gid", "comment", "home", "shell")
    state = " ".join(f"{k}={user[k]}" for k in keys) + f" groups={','.join(user['member_of'])}"
    return {f"user:{name}": state}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    name = args["name"]
    warnings = _check_password(args)
    if args["state"] == "absent":
        user = account_facts(ctx, [name])["users"][name]
        if user is None:
            return Unchanged(f"user {name} is absent", {"name": name, "state": "absent"})
        diff = Diff(f"user {name}", lines({"uid": user["uid"], "home": user["home"]}), "absent\n")
        return Change(f"remove user {name}", (diff,), {"warnings": warnings}, _fingerprint(name, user))
    planned, user = _plan_present(ctx, args)
    if not planned.commands and not planned.set_password:
        return Unchanged(f"user {name} is as asked", {"name": name, "state": "present"}, tuple(warnings))
    verb = "create" if user is None else "change"
    changed = ", ".join(k for k in planned.after if planned.after[k] is not None) if user is not None else ""
    note = f" (groups not on the host yet: {', '.join(planned.missing_groups)})" if planned.missing_groups else ""
    diff = Diff(f"user {name}", lines(planned.before), lines(planned.after))
    summary = f"{verb} user {name}" + (f": {changed}" if changed else "") + note
    return Change(summary, (diff,), {"warnings": warnings}, _fingerprint(name, user))


def _registered(ctx: TaskContext, args: Mapping[str, Any]) -> dict[str, Any]:
    """What Ansible's user returns, read back from the host (the password never)."""
    name = args["name"]
    user = account_facts(ctx, [name])["users"][name]
    data: dict[str, Any] = {"name": name, "state": args["state"]}
    if user is not None:
        data.update({k: user[k] for k in ("uid", "comment", "home", "shell")})
        data["group"] = user["gid"]
        data["groups"] = ",".join(user["member_of"])
    if args.get("password") is not None:
        data["password"] = "NOT_LOGGING_PASSWORD"
    return data


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    """Looks again (a group an earlier task made now resolves) and runs what is still needed."""
    name = args["name"]
    if args["state"] == "absent":
        run_tool(ctx, ["userdel", name])
    else:
        planned, _ = _plan_present(ctx, args)
        if planned.missing_groups:
            missing = ", ".join(planned.missing_groups)
            raise TaskFailed(f"Group {missing} does not exist; user {name} was not changed")
        for argv in planned.commands:
            run_tool(ctx, argv)
        if planned.set_password:
            password = str(args["password"])
            run_tool(ctx, ["chpasswd", "-e"], stdin=f"{name}:{password}\n".encode(), hide=password)
    warnings = tuple(change.payload["warnings"])
    return Result(True, change.summary, diffs=change.diffs, data=_registered(ctx, args), warnings=warnings)
