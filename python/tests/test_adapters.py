"""fl.torch and fl.flower: the PyTorch state-dict helpers, and a Flower NumPyClient run unchanged
against a real server."""

import threading

import numpy as np
import pytest

import fl
import fl.flower


class QuickstartClient(fl.flower.NumPyClient):
    """Flower's quickstart shape: a linear model y = w x + b fitted by a few gradient steps on
    the site's own points, in Flower's list-of-arrays API."""

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(64, 3)).astype(np.float32)
        self.y = self.x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3
        self.w = np.zeros(3, np.float32)
        self.b = np.zeros(1, np.float32)
        self.configs = []

    def get_parameters(self, config):
        return [self.w, self.b]

    def set_parameters(self, parameters):
        self.w, self.b = parameters[0].copy(), parameters[1].copy()

    def fit(self, parameters, config):
        self.configs.append(config)
        self.set_parameters(parameters)
        for _ in range(20):
            err = self.x @ self.w + self.b - self.y
            self.w -= 0.1 * (self.x.T @ err) / len(self.y)
            self.b -= 0.1 * err.mean()
        return self.get_parameters({}), len(self.y), {"note": "strings are dropped", "mse": 0.1}

    def evaluate(self, parameters, config):
        self.set_parameters(parameters)
        err = self.x @ self.w + self.b - self.y
        return float((err**2).mean()), len(self.y), {"mse": float((err**2).mean())}


def test_a_flower_numpy_client_trains_unchanged(federation):
    sites = [QuickstartClient(1), QuickstartClient(2)]
    f = federation(sites=2, weights=fl.flower.initial_weights(sites[0]), args=["--rounds", "5"])
    ends = [None, None]

    def run(i):
        ends[i] = fl.Client(**f.site(i)).run(fl.flower.adapt(sites[i]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(e is not None and not e.failed for e in ends), ends
    assert [c["round"] for c in sites[0].configs] == [1, 2, 3, 4, 5]
    # FedAvg of the two sites' steps approaches the true line.
    np.testing.assert_allclose(sites[0].w, [1.0, -2.0, 0.5], atol=0.1)


def test_flower_adapter_refuses_what_is_not_a_numpy_client():
    with pytest.raises(TypeError, match="get_parameters"):
        fl.flower.adapt(object())
    adapter = fl.flower.adapt(QuickstartClient(0), names=["w"])
    with pytest.raises(ValueError, match="gave 2 arrays; the model has 1"):
        adapter.get_weights()


torch = pytest.importorskip("torch")


def test_state_dict_to_weights_and_back_keeps_names_and_shapes():
    import fl.torch

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    weights = fl.torch.to_weights(model)
    # Floating-point entries only, in the state dict's order; num_batches_tracked stays local.
    expected = [n for n, t in model.state_dict().items() if torch.is_floating_point(t)]
    assert list(weights) == expected
    assert "1.num_batches_tracked" not in weights
    for name in expected:
        assert weights[name].shape == tuple(model.state_dict()[name].shape)
    # One buffer: handed back from fit without a copy.
    assert fl._fl._round_trip(weights)[1]
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    views, _ = fl._fl._round_trip(weights)  # read-only, as fit receives them
    fl.torch.load_weights(other, views)
    for name in expected:
        assert torch.equal(other.state_dict()[name], model.state_dict()[name])
    with pytest.raises(KeyError, match="lack"):
        fl.torch.load_weights(other, {"0.weight": views["0.weight"]})
    bad = dict(views)
    bad["0.bias"] = np.zeros(7, np.float32)
    with pytest.raises(ValueError, match=r"'0.bias' is \(7,\)"):
        fl.torch.load_weights(other, bad)
