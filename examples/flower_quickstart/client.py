"""A Flower quickstart-style NumPyClient, ported to fl in one line.

The client below is written against Flower's NumPyClient API (get_parameters, fit, evaluate on
lists of numpy arrays): softmax regression on a slice of Fashion-MNIST, in numpy. With Flower it
would be started with

    flwr.client.start_client(server_address=..., client=FashionClient(...).to_client())

With fl it runs unchanged, over mutual TLS, without Flower installed: the one line is

    fl.Client(server=..., ca=..., cert=..., key=...).run(fl.flower.adapt(FashionClient(...)))

    python client.py init --out model.safetensors      # the server's initial model
    python client.py --server HOST:PORT --ca ca.pem --cert site.pem --key site.key --first 0
"""

import argparse
import gzip
import sys

import numpy as np

try:  # Flower's base class when Flower is installed, fl's stand-in otherwise
    from flwr.client import NumPyClient
except ImportError:
    from fl.flower import NumPyClient

DATA = "/usr/share/datasets/fashion-mnist"


def load(kind, first, count):
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[first : first + count]
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[first : first + count]
    return x.astype(np.float32) / 255.0, y.astype(np.int64)


class FashionClient(NumPyClient):
    """Softmax regression: parameters [W (784 x 10), b (10)]."""

    def __init__(self, first=0, count=2000):
        self.x, self.y = load("train", first, count)
        self.w = np.zeros((784, 10), np.float32)
        self.b = np.zeros(10, np.float32)

    def get_parameters(self, config):
        return [self.w, self.b]

    def set_parameters(self, parameters):
        self.w, self.b = parameters[0].copy(), parameters[1].copy()

    def _probabilities(self, x):
        z = x @ self.w + self.b
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def fit(self, parameters, config):
        self.set_parameters(parameters)
        lr = float(config.get("learning_rate", 0.1))
        batch = int(config.get("batch_size", 32))
        for _ in range(int(config.get("local_epochs", 1))):
            for i in range(0, len(self.y), batch):
                x, y = self.x[i : i + batch], self.y[i : i + batch]
                g = self._probabilities(x)
                g[np.arange(len(y)), y] -= 1
                self.w -= lr * x.T @ g / len(y)
                self.b -= lr * g.mean(axis=0)
        return self.get_parameters({}), len(self.y), {}

    def evaluate(self, parameters, config):
        self.set_parameters(parameters)
        p = self._probabilities(self.x)
        loss = float(-np.log(p[np.arange(len(self.y)), self.y] + 1e-12).mean())
        return loss, len(self.y), {"accuracy": float((p.argmax(1) == self.y).mean())}


def main():
    import fl
    import fl.flower

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", default="train", choices=("train", "init", "score"))
    parser.add_argument("--out", help="init: where to write the initial model")
    parser.add_argument("--model", help="score: a safetensors model to score on the test set")
    for flag in ("--server", "--ca", "--cert", "--key"):
        parser.add_argument(flag)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    if args.command == "init":
        fl.save_safetensors(args.out, fl.flower.initial_weights(FashionClient(0, 1)))
        return 0
    if args.command == "score":
        client = FashionClient(0, 1)
        client.x, client.y = load("t10k", 0, 10000)
        weights = fl.load_safetensors(args.model)
        loss, n, metrics = client.evaluate([weights["param_0"], weights["param_1"]], {})
        print(f"test accuracy {metrics['accuracy'] * 100:.2f} % on {n} images")
        return 0
    # The one line that ports the Flower client to fl:
    end = fl.Client(server=args.server, ca=args.ca, cert=args.cert, key=args.key).run(
        fl.flower.adapt(FashionClient(args.first, args.count)))
    return 1 if end.failed else 0


if __name__ == "__main__":
    sys.exit(main())
