"""fl.simulation: a federation of Python sites in process, on the real engine and store."""

import os
import sqlite3

import numpy as np
import pytest

import fl
import fl.simulation

TRUE_W = np.array([1.0, -2.0, 0.5], np.float32)


def make_data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = x @ TRUE_W + 0.3
    return x, y.astype(np.float32)


class LinearSite:
    """A site fitting y = w x + b by gradient steps on its own rows."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def get_weights(self):
        return {"w": np.zeros(3, np.float32), "b": np.zeros(1, np.float32)}

    def fit(self, weights, config):
        out = fl.copy_weights(weights)
        w, b = out["w"], out["b"]
        for _ in range(int(config["local_epochs"]) * 10):
            err = self.x @ w + b - self.y
            w -= config["learning_rate"] * (self.x.T @ err) / len(self.y)
            b -= config["learning_rate"] * err.mean()
        return out, len(self.y), {"loss": float((err**2).mean())}


def test_a_federation_of_python_sites_learns_and_records_every_round(tmp_path):
    x, y = make_data()
    test_x, test_y = make_data(200, seed=1)
    parts = fl.simulation.partition(np.zeros(len(y), np.int32), 10, "iid", seed=3)
    seen = []

    def evaluate(weights):
        pred = test_x @ weights["w"] + weights["b"]
        mse = float(((pred - test_y) ** 2).mean())
        return {"test_mse": mse, "test_accuracy": 1.0 / (1.0 + mse)}

    result = fl.simulation.run(
        lambda cid, rows: LinearSite(x[rows], y[rows]), num_clients=10, rounds=6,
        partition=parts, evaluate_fn=evaluate, workers=2, work_dir=str(tmp_path),
        on_round=seen.append)
    assert [r.round for r in result.rounds] == [1, 2, 3, 4, 5, 6]
    assert all(r.committed and r.num_accepted == 10 for r in result.rounds)
    assert [r.round for r in seen] == [1, 2, 3, 4, 5, 6]
    mses = [r.metrics["test_mse"] for r in result.rounds]
    assert mses[-1] < mses[0] / 10 and mses[-1] < 0.01, mses
    assert result.final_test_accuracy == pytest.approx(1.0 / (1.0 + mses[-1]))
    # The run is in a real SQLite file, every round committed there.
    assert os.path.exists(result.db_path)
    with sqlite3.connect(result.db_path) as db:
        committed = db.execute("SELECT COUNT(*) FROM rounds WHERE status = 'committed'").fetchone()
    assert committed[0] == 6


def test_sampling_and_a_strategy_by_name_with_options(tmp_path):
    x, y = make_data()
    result = fl.simulation.run(
        lambda cid: LinearSite(x[cid::8], y[cid::8]), num_clients=8, rounds=3,
        strategy={"name": "fedprox", "proximal_mu": 0.01}, sample_fraction=0.5,
        work_dir=str(tmp_path))
    assert all(r.committed and r.num_accepted == 4 for r in result.rounds)


def test_partitioners_cover_the_rows_as_they_say():
    labels = np.repeat(np.arange(10), 50)
    iid = fl.simulation.partition(labels, 5, "iid", seed=1)
    assert sorted(np.concatenate(iid).tolist()) == list(range(500))
    two = fl.simulation.partition(labels, 5, "label_k", k=2, seed=1)
    for rows in two:
        assert len(set(labels[rows].tolist())) <= 2
    with pytest.raises(fl.FlError) as e:
        fl.simulation.partition(labels, 5, "nonsense")
    assert e.value.code == "INVALID_ARGUMENT"


def test_refusals_name_what_is_wrong(tmp_path):
    x, y = make_data()
    with pytest.raises(fl.FlError) as e:
        fl.simulation.run(lambda cid: LinearSite(x, y), num_clients=2, rounds=1,
                          strategy="scaffold", work_dir=str(tmp_path))
    assert e.value.code == "INVALID_ARGUMENT"
    assert "control variates" in e.value.message
    with pytest.raises(ValueError, match="partition has 1 sites"):
        fl.simulation.run(lambda cid, rows: LinearSite(x, y), num_clients=2, rounds=1,
                          partition=[np.arange(3)])

    def broken(cid):
        if cid == 1:
            raise RuntimeError("site 1 has no data")
        return LinearSite(x, y)

    with pytest.raises(fl.FlError) as e:
        fl.simulation.run(broken, num_clients=2, rounds=1, work_dir=str(tmp_path / "b"))
    assert "client_fn(1) raised RuntimeError: site 1 has no data" in e.value.message
