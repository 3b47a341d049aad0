"""PyTorch state dicts as fl weights, and back.

The weights keep the state dict's names and shapes, in its order, so that the server's model (a
safetensors export of the same module: ``fl.save_safetensors(path, to_weights(module))``) and the
site's agree. Only floating-point entries travel: integer buffers such as BatchNorm's
``num_batches_tracked`` stay at the site (``floating_only=False`` refuses them instead).
"""

from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np
import torch

from .weights import Weights, empty_weights


def _entries(source, floating_only: bool):
    state = source.state_dict() if isinstance(source, torch.nn.Module) else source
    out = []
    for name, t in state.items():
        if not torch.is_floating_point(t):
            if floating_only:
                continue
            raise ValueError(f"state dict entry '{name}' is {t.dtype}, not floating point")
        out.append((name, t))
    return out


def to_weights(source, *, floating_only: bool = True) -> Weights:
    """A module's (or a state dict's) floating-point tensors as float32 weights, in one buffer
    (``fl.empty_weights``), so that returning them from ``fit`` hands them over without a copy."""
    entries = _entries(source, floating_only)
    out = empty_weights([(name, tuple(t.shape)) for name, t in entries])
    for name, t in entries:
        np.copyto(out[name], t.detach().to("cpu", torch.float32).numpy())
    return out


def load_weights(module: torch.nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Copies ``weights`` into ``module``'s parameters and buffers of the same names (every
    floating-point entry of its state dict must be there, with its shape)."""
    state = module.state_dict()
    missing = [n for n, t in state.items() if torch.is_floating_point(t) and n not in weights]
    if missing:
        raise KeyError(f"the weights lack {missing[0]!r} of the module ({len(missing)} missing)")
    with torch.no_grad(), warnings.catch_warnings():
        # The SDK's views are read-only; copy_ only reads them.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for name, t in state.items():
            if name not in weights:
                continue
            source = torch.from_numpy(np.asarray(weights[name]))
            if tuple(source.shape) != tuple(t.shape):
                raise ValueError(
                    f"weights '{name}' is {tuple(source.shape)}; the module's is {tuple(t.shape)}"
                )
            t.copy_(source)
