"""The Python side of bench/python_sdk_bench.sh: one site with a trivial trainer over the Python
SDK (fl), for the model in a safetensors file. --mode says what fit hands back:
    views    the global weights it was given (read-only views: the SDK copies them, as the C++
             trivial trainer's Clone does)
    buffer   an update it writes into one buffer of its own each round (the global copied in
             with numpy, as a trainer's result would be written): the SDK borrows it, so the
             round holds the same one copy as the C++ Clone, made in Python
    flower   the same as views, written as a Flower NumPyClient run through fl.flower.adapt
Prints one line per fit task after the run:
    TASK <round> <task seconds> <train seconds>

    python python_sdk_site.py --server HOST:PORT --ca CA --cert CERT --key KEY \\
        --model init.safetensors [--mode views|buffer|flower]
"""

import argparse
import sys

import numpy as np

import fl
import fl.flower


class Trivial:
    """Hands the global weights back, or an update kept in one buffer."""

    def __init__(self, weights, buffer: bool):
        self._weights = weights
        self._update = fl.copy_weights(weights) if buffer else None

    def get_weights(self):
        return self._weights

    def fit(self, weights, config):
        if self._update is None:
            return weights, 1
        for name, a in weights.items():
            np.copyto(self._update[name], a)
        return self._update, 1


class TrivialNumPyClient(fl.flower.NumPyClient):
    def __init__(self, weights):
        self._parameters = list(weights.values())

    def get_parameters(self, config):
        return self._parameters

    def fit(self, parameters, config):
        return parameters, 1, {}


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--server", "--ca", "--cert", "--key", "--model"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--mode", choices=("views", "buffer", "flower"), default="views")
    args = parser.parse_args()
    weights = fl.load_safetensors(args.model)
    if args.mode == "flower":
        trainer = fl.flower.adapt(TrivialNumPyClient(weights), names=list(weights))
    else:
        trainer = Trivial(weights, buffer=args.mode == "buffer")
    reports = []
    fl.Client(server=args.server, ca=args.ca, cert=args.cert, key=args.key).run(
        trainer, on_task=reports.append
    )
    for r in reports:
        if r["stage"] == "fit" and r["status"] == "OK":
            print(f"TASK {r['round']} {r['task_seconds']:.6f} {r['train_seconds']:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
