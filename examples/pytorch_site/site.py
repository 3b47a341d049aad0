"""A hospital's site that trains its own PyTorch model under federation.

The site keeps its images (here a slice of Fashion-MNIST's training set, standing in for a
hospital's records); each round it loads the server's global weights into its module, trains
locally, and hands the new weights back through the fl SDK (mutual TLS to the server).

    python site.py init --out model.safetensors          # the model the server starts from
    python site.py train --server HOST:PORT --ca ca.pem --cert site.pem --key site.key \\
        --first 0 --count 3000                            # one site's run
    python site.py evaluate --model global.safetensors    # score a model on the 10k test images

The server is `fl server --initial-model model.safetensors ...`: it has never seen this code.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import sys

import numpy as np
import torch

import fl
import fl.torch

DATA = "/usr/share/datasets/fashion-mnist"


def load(kind: str, first: int, count: int):
    """Images scaled to [0, 1] and their labels, rows first .. first + count of the IDX files."""
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    rows = slice(first, first + count)
    x = torch.from_numpy(images[rows].astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels[rows].astype(np.int64))


class Net(torch.nn.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, hidden)
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def accuracy(model: torch.nn.Module, x, y) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y).item()
        return loss, (logits.argmax(1) == y).float().mean().item()


class HospitalSite:
    """fl's trainer protocol over a PyTorch module."""

    def __init__(self, x, y, seed: int):
        torch.manual_seed(seed)
        self.model = Net()
        self.x, self.y = x, y
        # A held-out fifth of the site's rows for federated evaluation.
        cut = len(x) * 4 // 5
        self.train_x, self.train_y = x[:cut], y[:cut]
        self.test_x, self.test_y = x[cut:], y[cut:]

    def get_weights(self):
        return fl.torch.to_weights(self.model)

    def fit(self, weights, config):
        fl.torch.load_weights(self.model, weights)
        self.model.train()
        opt = torch.optim.SGD(self.model.parameters(), lr=float(config["learning_rate"]))
        batch = int(config["batch_size"])
        losses = []
        for _ in range(int(config["local_epochs"])):
            order = torch.randperm(len(self.train_x))
            for i in range(0, len(order), batch):
                rows = order[i : i + batch]
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(self.model(self.train_x[rows]),
                                                         self.train_y[rows])
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return fl.torch.to_weights(self.model), len(self.train_x), {"loss": float(np.mean(losses))}

    def evaluate(self, weights, config):
        fl.torch.load_weights(self.model, weights)
        loss, acc = accuracy(self.model, self.test_x, self.test_y)
        return loss, len(self.test_x), {"accuracy": acc}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write the initial model as safetensors")
    init.add_argument("--out", required=True)
    init.add_argument("--seed", type=int, default=0)
    train = sub.add_parser("train", help="take part in the server's run")
    for flag in ("--server", "--ca", "--cert", "--key"):
        train.add_argument(flag, required=True)
    train.add_argument("--first", type=int, default=0, help="first training row of this site")
    train.add_argument("--count", type=int, default=3000, help="training rows of this site")
    train.add_argument("--seed", type=int, default=1)
    train.add_argument("--max-local-epochs", type=int, default=5,
                       help="the most local epochs this site agrees to (a limit the server "
                       "cannot override)")
    evaluate = sub.add_parser("evaluate", help="score a model on the 10k test images")
    evaluate.add_argument("--model", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.command == "init":
        torch.manual_seed(args.seed)
        fl.save_safetensors(args.out, fl.torch.to_weights(Net()))
        print(f"wrote {args.out}")
        return 0
    if args.command == "evaluate":
        model = Net()
        fl.torch.load_weights(model, fl.load_safetensors(args.model))
        loss, acc = accuracy(model, *load("t10k", 0, 10000))
        print(f"test loss {loss:.4f}, accuracy {acc * 100:.2f} % on 10000 images")
        return 0
    x, y = load("train", args.first, args.count)
    site = HospitalSite(x, y, args.seed)
    client = fl.Client(server=args.server, ca=args.ca, cert=args.cert, key=args.key,
                       limits={"max_local_epochs": args.max_local_epochs})
    end = client.run(site)
    print(f"run {end.run_id} {'failed' if end.failed else 'finished'}: {end.message}")
    return 1 if end.failed else 0


if __name__ == "__main__":
    sys.exit(main())
