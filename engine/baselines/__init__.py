"""The controller's record of serving measurements and rollouts (SQLite, stdlib sqlite3).

Every ``check_serving`` result (and every measurement a rollout's gates take) is one row,
keyed by what decides how fast a server can be: host, model and revision, vLLM and torch
versions, the serving flags' hash and the GPU type. ``rigger baselines`` reads them back
(``report``); a rollout's gates read a host's history to learn its noise. The file lives
in the controller's state directory: ``$RIGGER_STATE_DIR`` as the run lock reads it, else
``~/.local/state/rigger``.

May import: engine.errors, engine.runlock, engine.probes, engine.mask, engine.hosttext.

(engine.runlock for the state directory's variable, RIGGER_STATE_DIR; engine.probes for
fileio's guarded writes of the rollout records.)
"""

from engine.baselines import report
from engine.baselines.store import BaselineKey, BaselineStore, Measurement, store_path

__all__ = ["BaselineKey", "BaselineStore", "Measurement", "report", "store_path"]
