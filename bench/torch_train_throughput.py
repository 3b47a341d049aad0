#!/usr/bin/env python3
"""Training throughput of the built-in models in PyTorch (CPU or CUDA): the same workload as
train_throughput (bench/train_throughput.cc) so that the two can be compared.

Mini-batch SGD (batch 64, momentum 0.9, lr 0.01) for a fixed number of steps over the first
steps * batch Fashion-MNIST training images (pixels scaled to [0, 1]), shuffled, after 20 warm-up
steps, on --device (cpu by default). Models: softmax (Linear 784 -> 10), mlp (784-200-10, ReLU),
simple_cnn (NIID-Bench: Conv(1,6,5) ReLU MaxPool2, Conv(6,16,5) ReLU MaxPool2, 256-120-84-10;
44,426 parameters). Prints one line per model:
<model> torch[-<device>] <samples per second> <seconds> <steps> <final loss>.
"""
import argparse
import gzip
import time

import numpy as np
import torch
from torch import nn


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def make_model(name):
    if name == "softmax":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 10))
    if name == "simple_cnn":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    raise SystemExit(f"unknown model {name!r}; choose softmax, mlp or simple_cnn")


def run(name, images, labels, steps, batch, device):
    torch.manual_seed(0)
    model = make_model(name).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    n = steps * batch
    x_all = images[np.arange(n) % len(images)].to(device)
    y_all = labels[np.arange(n) % len(labels)].to(device)
    gen = torch.Generator().manual_seed(1)

    def train(num_steps):
        order = torch.randperm(n, generator=gen)
        loss = None
        for s in range(num_steps):
            idx = order[s * batch:(s + 1) * batch].to(device)
            x, y = x_all[idx], y_all[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        return loss.item()  # waits for the device

    train(min(20, steps))
    start = time.perf_counter()
    loss = train(steps)
    seconds = time.perf_counter() - start
    rate = steps * batch / seconds
    side = "torch" if device == "cpu" else f"torch-{device}"
    print(f"{name} {side} {rate:.1f} {seconds:.4f} {steps} {loss:.4f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["softmax", "mlp", "simple_cnn"])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=0, help="0: every core")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--device", default="cpu", help="cpu or cuda (the batches stay on it)")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
    images = load_idx(f"{args.data}/train-images-idx3-ubyte.gz")
    labels = load_idx(f"{args.data}/train-labels-idx1-ubyte.gz")
    images = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    labels = torch.from_numpy(labels.astype(np.int64))
    for name in args.models:
        run(name, images, labels, args.steps, args.batch, args.device)


if __name__ == "__main__":
    main()
