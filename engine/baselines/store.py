"""The SQLite file: measurements keyed by what decides serving speed, and rollout records."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine import mask
from engine.errors import RiggerError
from engine.probes.fileio import open_state_dir, open_state_file, write_state
from engine.runlock import STATE_DIR_ENV

DEFAULT_DIR = "~/.local/state/rigger"
FILE_NAME = "baselines.sqlite"
# Several forks record at once (one thread per host): wait for the writer's lock.
BUSY_TIMEOUT_S = 30.0
UNKNOWN = "unknown"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    host TEXT NOT NULL,
    model TEXT NOT NULL,
    revision TEXT NOT NULL,
    vllm TEXT NOT NULL,
    torch TEXT NOT NULL,
    flags_hash TEXT NOT NULL,
    gpu TEXT NOT NULL,
    tokens_per_s REAL NOT NULL,
    ttft_p50_s REAL,
    ttft_p95_s REAL,
    requests INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    source TEXT NOT NULL,
    rollout_id TEXT
);
CREATE INDEX IF NOT EXISTS measurements_key
    ON measurements (host, model, revision, vllm, torch, flags_hash, gpu);
CREATE TABLE IF NOT EXISTS rollouts (
    id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    outcome TEXT NOT NULL,
    record TEXT NOT NULL
);
"""


class BaselineStoreError(RiggerError):
    """The store cannot be opened or read (a path, permissions, a corrupt file)."""


@dataclass(frozen=True)
class BaselineKey:
    """What a measurement is comparable by. Unknown parts are ``unknown``, never empty."""

    host: str
    model: str
    revision: str = UNKNOWN
    vllm: str = UNKNOWN
    torch: str = UNKNOWN
    flags_hash: str = UNKNOWN
    gpu: str = UNKNOWN

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> BaselineKey:
        fields = cls.__dataclass_fields__
        return cls(**{name: str(values.get(name) or UNKNOWN) for name in fields})

    def as_data(self) -> dict[str, str]:
        return asdict(self)

    def fleet_part(self) -> tuple[str, ...]:
        """Everything but the host: the same server on another host compares to this one."""
        return (self.model, self.revision, self.vllm, self.torch, self.flags_hash, self.gpu)


@dataclass(frozen=True)
class Measurement:
    key: BaselineKey
    tokens_per_s: float
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    requests: int
    errors: int
    source: str = "check_serving"
    rollout_id: str | None = None
    at: float = 0.0


def store_path(environ: Mapping[str, str] = os.environ) -> Path:
    state_dir = environ.get(STATE_DIR_ENV, "") or DEFAULT_DIR
    return Path(state_dir).expanduser() / FILE_NAME


class BaselineStore:
    """One SQLite file; each call opens its own connection (threads record at once)."""

    def __init__(self, path: Path | None = None):
        self.path = path or store_path()

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._verified_path() as (verified, identity):
            try:
                db = sqlite3.connect(verified, timeout=BUSY_TIMEOUT_S)
            except sqlite3.Error as exc:
                raise BaselineStoreError(f"baseline store {self.path}: {exc}") from None
            named = os.stat(verified, follow_symlinks=False)
            if (named.st_dev, named.st_ino) != identity:
                db.close()
                raise BaselineStoreError(f"baseline store {self.path}: it was replaced while being opened")
            yield from self._schema_and_transaction(db)

    @contextmanager
    def _verified_path(self) -> Iterator[tuple[str, tuple[int, int]]]:
        """A path SQLite opens that can only be the file rigger checked: the state
        directory opened by the one walk (made 0700; refused when another user's, or when a
        directory above it is neither root's nor ours, so nobody else can move the path),
        the file created or opened there without following a link and non-blocking (a
        FIFO is refused), regular and ours. SQLite gets that real path (it turns
        /proc/self/fd/N back into a path by itself), and after it opened it the name must
        still be the checked file."""
        name = self.path.name
        try:
            dir_fd, real = open_state_dir(os.path.abspath(self.path.parent))
        except OSError as exc:
            raise BaselineStoreError(f"baseline store {self.path}: {exc}") from None
        try:
            try:
                file_fd = open_state_file(dir_fd, name, os.O_RDWR | os.O_CREAT, f"{real.rstrip('/')}/{name}")
            except OSError as exc:
                raise BaselineStoreError(f"baseline store {self.path}: {exc}") from None
            try:
                opened = os.fstat(file_fd)
                yield f"{real.rstrip('/')}/{name}", (opened.st_dev, opened.st_ino)
            finally:
                os.close(file_fd)
        finally:
            os.close(dir_fd)

    def _schema_and_transaction(self, db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        try:
            db.executescript(_SCHEMA)
            with db:
                yield db
        except sqlite3.DatabaseError as exc:
            raise BaselineStoreError(
                f"baseline store {self.path}: {exc} (move the file away to start a new one)"
            ) from None
        finally:
            db.close()

    def record(self, measurement: Measurement) -> None:
        row = {**asdict(measurement.key), **asdict(measurement)}
        row.pop("key")
        row["at"] = measurement.at or time.time()
        columns = ", ".join(row)
        marks = ", ".join(f":{name}" for name in row)
        with self._db() as db:
            db.execute(f"INSERT INTO measurements ({columns}) VALUES ({marks})", row)

    def measurements(self, host: str | None = None, key: BaselineKey | None = None) -> list[Measurement]:
        """Oldest first; only ``host``'s, or only those with exactly ``key``."""
        where, params = [], {}
        if key is not None:
            for name, value in asdict(key).items():
                where.append(f"{name} = :{name}")
                params[name] = value
        elif host is not None:
            where.append("host = :host")
            params["host"] = host
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._db() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(f"SELECT * FROM measurements{clause} ORDER BY at, id", params).fetchall()
        return [_measurement(row) for row in rows]

    def record_rollout(self, rollout_id: str, outcome: str, record: Mapping[str, Any]) -> Path:
        """Store a rollout's record, and write it as JSON beside the store (what ``rigger
        show`` renders): a 0700 folder, the file written atomically, never through a link."""
        text = mask.dumps(record, sort_keys=True, default=str)
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO rollouts (id, at, outcome, record) VALUES (?, ?, ?, ?)",
                (rollout_id, time.time(), outcome, text),
            )
        path = self.path.parent / "rollouts" / f"{rollout_id}.json"
        try:
            write_state(str(path), mask.dumps(record, indent=2, sort_keys=True, default=str).encode() + b"\n")
        except OSError as exc:
            raise BaselineStoreError(f"rollout record {path}: {exc}") from None
        return path

    def rollout(self, rollout_id: str) -> dict[str, Any] | None:
        with self._db() as db:
            row = db.execute("SELECT record FROM rollouts WHERE id = ?", (rollout_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def rollouts(self) -> list[tuple[str, float, str]]:
        with self._db() as db:
            return [
                (str(r[0]), float(r[1]), str(r[2]))
                for r in db.execute("SELECT id, at, outcome FROM rollouts ORDER BY at")
            ]


def _measurement(row: sqlite3.Row) -> Measurement:
    return Measurement(
        key=BaselineKey.of(dict(row)),
        tokens_per_s=float(row["tokens_per_s"]),
        ttft_p50_s=row["ttft_p50_s"],
        ttft_p95_s=row["ttft_p95_s"],
        requests=int(row["requests"]),
        errors=int(row["errors"]),
        source=str(row["source"]),
        rollout_id=row["rollout_id"],
        at=float(row["at"]),
    )
