"""Flower's NumPyClient on the fl SDK, unchanged and without Flower installed.

A Flower client's ``get_parameters(config)``, ``fit(parameters, config)`` and
``evaluate(parameters, config)`` speak in lists of numpy arrays; fl speaks in named tensors. The
adapter names the list's entries (``names``, or ``param_0``, ``param_1``, ... by default), which
must be the names of the server's model (a safetensors file written with
``fl.save_safetensors(path, fl.flower.initial_weights(client))`` has them)::

    client = MyFlowerClient()                          # unchanged
    fl.Client(server=..., ca=..., cert=..., key=...).run(fl.flower.adapt(client))

The parameters a Flower client receives are read-only views of the SDK's buffer (no copy); a
client that writes into them in place raises numpy's "read-only" error. Metrics that are not
numbers (Flower allows strings and bytes) are left out.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence

import numpy as np

from .weights import Weights


class NumPyClient:
    """A stand-in for ``flwr.client.NumPyClient`` with the same methods, for code that should run
    without Flower installed: ``from fl.flower import NumPyClient``."""

    def get_parameters(self, config: dict) -> list[np.ndarray]:
        raise NotImplementedError

    def fit(self, parameters: list[np.ndarray], config: dict):
        raise NotImplementedError

    def evaluate(self, parameters: list[np.ndarray], config: dict):
        raise NotImplementedError


def _numeric(metrics: Optional[dict]) -> dict[str, float]:
    # bool is a number here (1.0 / 0.0), as the SDK takes it; str and bytes are left out.
    return {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, numbers.Real)}


class _Adapter:
    def __init__(self, client: Any, names: Optional[Sequence[str]]):
        self._client = client
        self._names = list(names) if names is not None else None

    def _named(self, arrays: Sequence[np.ndarray]) -> Weights:
        if self._names is None:
            self._names = [f"param_{i}" for i in range(len(arrays))]
        if len(arrays) != len(self._names):
            raise ValueError(
                f"the Flower client gave {len(arrays)} arrays; the model has {len(self._names)}"
            )
        return dict(zip(self._names, arrays))

    def get_weights(self) -> Weights:
        return self._named(self._client.get_parameters({}))

    def fit(self, weights: Weights, config: dict):
        parameters = [weights[n] for n in self._names]
        result = self._client.fit(parameters, dict(config))
        updated, num_examples, metrics = result
        return self._named(updated), int(num_examples), _numeric(metrics)

    def evaluate(self, weights: Weights, config: dict):
        parameters = [weights[n] for n in self._names]
        loss, num_examples, metrics = self._client.evaluate(parameters, dict(config))
        return float(loss), int(num_examples), _numeric(metrics)


def adapt(numpy_client: Any, names: Optional[Sequence[str]] = None) -> _Adapter:
    """An fl trainer that runs ``numpy_client`` (a Flower NumPyClient, or any object with its
    three methods), its list entries named ``names`` (default ``param_0``, ``param_1``, ...)."""
    for method in ("get_parameters", "fit"):
        if not callable(getattr(numpy_client, method, None)):
            raise TypeError(f"a Flower NumPyClient needs {method}(); {numpy_client!r} has none")
    return _Adapter(numpy_client, names)


def initial_weights(numpy_client: Any, names: Optional[Sequence[str]] = None) -> Weights:
    """The client's ``get_parameters`` as named weights, to write the server's model from."""
    return adapt(numpy_client, names).get_weights()
