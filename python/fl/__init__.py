"""fl: a site of a federation, in Python, over the fl C++ SDK.

A site keeps its data and trains its own model; the SDK's C++ loop talks to the server (gRPC over
mutual TLS), downloads each round's global model, calls the site's trainer, and streams the update
back, masked under secure aggregation when the run asks for it. The trainer is a Python object::

    class Trainer:
        def get_weights(self) -> dict[str, np.ndarray]: ...   # the model's tensors by name
        def fit(self, weights, config): ...   # -> (weights, num_examples[, metrics])
        def evaluate(self, weights, config): ...   # -> (loss, num_examples[, metrics]), optional

``weights`` are read-only float32 views of the SDK's buffer (no copy); ``config`` holds the round's
settings (``round``, ``local_epochs``, ``batch_size``, ``learning_rate`` and the strategy's extras).
Run it with::

    import fl
    client = fl.Client(server="fl.example.org:7443", ca="ca.pem", cert="site.pem", key="site.key",
                       limits={"max_local_epochs": 2})
    client.run(MyTrainer())

Errors are ``fl.FlError`` (with ``.code``); the SDK's log lines go to the ``logging`` logger "fl".
``fl.torch`` maps PyTorch state dicts to weights, ``fl.flower.adapt`` runs a Flower NumPyClient.
"""

import atexit as _atexit
import logging as _logging

from . import _fl
from ._errors import FlError
from .client import Client, RunEnd
from .weights import copy_weights, empty_weights, load_safetensors, save_safetensors

__all__ = [
    "Client",
    "FlError",
    "RunEnd",
    "copy_weights",
    "empty_weights",
    "load_safetensors",
    "save_safetensors",
]
__version__ = "0.1.0"

_logger = _logging.getLogger("fl")
_LEVELS = {0: _logging.DEBUG, 1: _logging.INFO, 2: _logging.WARNING, 3: _logging.ERROR}


def _forward_log(level: int, line: str) -> None:
    _logger.log(_LEVELS.get(level, _logging.INFO), line)


_fl.set_log_handler(_forward_log)
_atexit.register(_fl.set_log_handler, None)
