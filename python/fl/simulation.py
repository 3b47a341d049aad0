"""A whole federation of Python sites on this machine: the real round engine, SQLite store and
strategy of the C++ core, with virtual sites whose trainers are Python objects, run on a bounded
pool of worker threads (``workers``; the GIL is taken around each trainer call).

    import fl.simulation

    parts = fl.simulation.partition(y_train, 20, "dirichlet", alpha=0.5)
    result = fl.simulation.run(lambda cid, rows: MySite(x_train[rows], y_train[rows]),
                               num_clients=20, rounds=10, partition=parts,
                               evaluate_fn=lambda w: {"test_accuracy": score(w)})

A site's trainer is made by ``client_fn`` when the site has a task in a round and dropped after
it, so sites hold no state between rounds (keep what must persist outside the trainer).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from . import _fl


@dataclass(frozen=True)
class Round:
    """One round attempt as the simulation reports it."""

    round: int
    committed: bool
    num_accepted: int
    metrics: dict  # the round's metrics (train_loss, the evaluate_fn's ...)
    reason: str  # why it failed, when it did
    dp_epsilon: float
    wall_seconds: float


@dataclass(frozen=True)
class Result:
    run_id: int
    rounds: list = field(default_factory=list)  # of Round
    final_test_accuracy: float = 0.0  # the evaluate_fn's "test_accuracy" of the last round
    finish_reason: str = ""  # why the run ended before its last round, if it did
    db_path: str = ""  # the SQLite file with the run (fl admin, fl report read it)
    wall_seconds: float = 0.0


def _round(d: dict) -> Round:
    return Round(d["round"], d["committed"], d["num_accepted"], dict(d["metrics"]), d["reason"],
                 d["dp_epsilon"], d["wall_seconds"])


def partition(labels, num_clients: int, method: str = "iid", *, alpha: float = 0.5, k: int = 2,
              shards_per_client: int = 2, examples_per_client: int = 0,
              seed: int = 0) -> list[np.ndarray]:
    """Row indices per site, from the simulation's partitioners (NIID-Bench's): "iid",
    "dirichlet" (label skew with concentration ``alpha``), "label_k" (``k`` classes per site),
    "shards", "quantity_skew" (``alpha``), "sampled" (``examples_per_client`` each)."""
    return _fl.partition(labels, num_clients, method, alpha, k, shards_per_client,
                         examples_per_client, seed)


def run(client_fn: Callable[..., Any], num_clients: int, rounds: int, *,
        strategy: str | Mapping[str, Any] = "fedavg",
        partition: Optional[Sequence[np.ndarray]] = None,
        initial_weights: Optional[Mapping[str, np.ndarray]] = None,
        evaluate_fn: Optional[Callable[[dict], Mapping[str, float]]] = None,
        sample_fraction: float = 1.0, min_fit_clients: int = 0, local_epochs: int = 1,
        batch_size: int = 32, learning_rate: float = 0.1, seed: int = 0, workers: int = 0,
        work_dir: Optional[str] = None,
        on_round: Optional[Callable[[Round], None]] = None) -> Result:
    """Runs ``rounds`` rounds of a federation of ``num_clients`` sites and returns the result.

    ``client_fn(cid)`` (``client_fn(cid, rows)`` with a ``partition``: the site's row indices)
    returns the site's trainer (``fit``, optionally ``evaluate``; see ``fl``). The server starts
    from ``initial_weights`` (default: ``client_fn(0).get_weights()``). ``strategy`` is a name
    ("fedavg", "fedprox", "fedadam", "trimmed_mean", ...) or a dict with "name" and its options
    (e.g. {"name": "fedprox", "proximal_mu": 0.01}). ``evaluate_fn(weights)``, when given, scores
    each new global model on the server side and returns metrics ("test_accuracy" becomes
    ``final_test_accuracy``). ``workers`` threads run the sites' tasks (0: the machine's cores).
    Raises ``fl.FlError`` for a bad option (INVALID_ARGUMENT) or a failed run (ABORTED, with the
    reason); ``KeyboardInterrupt`` on Ctrl-C once the run has stopped.
    """
    if partition is not None:
        if len(partition) != num_clients:
            raise ValueError(f"partition has {len(partition)} sites; num_clients is {num_clients}")
        parts = list(partition)
        make = lambda cid: client_fn(cid, parts[cid])  # noqa: E731
    else:
        make = client_fn
    if initial_weights is None:
        first = make(0)
        if not hasattr(first, "get_weights"):
            raise TypeError("pass initial_weights, or give client_fn(0) a get_weights()")
        initial_weights = first.get_weights()
    if isinstance(strategy, str):
        strategy = {"name": strategy}
    if work_dir is None:
        work_dir = tempfile.mkdtemp(prefix="fl-sim-")
    os.makedirs(work_dir, exist_ok=True)
    fit = {"local_epochs": local_epochs, "batch_size": batch_size,
           "learning_rate": float(learning_rate)}
    report = (lambda d: on_round(_round(d))) if on_round is not None else None
    r = _fl.simulate(make, dict(initial_weights), num_clients, rounds, dict(strategy), fit,
                     sample_fraction, min_fit_clients, seed, workers, work_dir, evaluate_fn,
                     report)
    return Result(r["run_id"], [_round(d) for d in r["rounds"]], r["final_test_accuracy"],
                  r["finish_reason"], r["db_path"], r["wall_seconds"])
