"""The floor of bench/sim_throughput.sh: its federated workload in a plain numpy loop.

No framework: one Python process loads Fashion-MNIST, splits it IID, and for each round samples
the sites, runs each one's local SGD one after the other, averages the models weighted by
examples (FedAvg) and evaluates the global model on the 10,000 test examples
(bench/flower/sim_softmax.py holds the model, the trainer and the split). Whatever a framework
adds on top of this is its cost.

Prints "ROUND <r> <test accuracy> <test loss>" after each round's evaluation, flushed, and
"FINAL <test accuracy>" at the end.

  python sim_throughput_numpy.py --clients 1000 --examples-per-client 60 --sample-fraction 0.01 \
      --rounds 100 --local-epochs 1 --batch-size 10 --lr 0.1
"""

import argparse
import sys
import time

import numpy as np

import sim_softmax as sm


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sm.add_workload_args(ap)
    args = ap.parse_args()

    t0 = time.monotonic()
    train_images, train_labels = sm.load_split(args.dataset_dir, "train")
    test_images, test_labels = sm.load_split(args.dataset_dir, "t10k")
    x_test = sm.to_float(test_images)
    parts = sm.iid_parts(len(train_labels), args.clients, args.examples_per_client, args.seed)
    # Each site's data as the trainer sees it, made once: a site is its data.
    sites = [(sm.to_float(train_images[p]), train_labels[p]) for p in parts]
    per_round = max(1, int(args.clients * args.sample_fraction))
    print(f"numpy floor: {args.clients} sites, {per_round} per round, {args.rounds} rounds; "
          f"BLAS: {sm.blas_info()}; setup {time.monotonic() - t0:.2f} s", flush=True)

    server_rng = np.random.default_rng(args.seed)
    w, b = sm.initial_model()
    acc = 0.0
    for r in range(1, args.rounds + 1):
        sampled = server_rng.choice(args.clients, size=per_round, replace=False)
        w_sum = np.zeros_like(w)
        b_sum = np.zeros_like(b)
        total = 0
        for site in sampled:
            x, y = sites[site]
            w_i, b_i, _ = sm.train(w, b, x, y, args.local_epochs, args.batch_size, args.lr,
                                   sm.site_rng(args.seed, int(site), r))
            w_sum += np.float32(len(y)) * w_i
            b_sum += np.float32(len(y)) * b_i
            total += len(y)
        w = w_sum / np.float32(total)
        b = b_sum / np.float32(total)
        acc, loss = sm.evaluate(w, b, x_test, test_labels)
        print(f"ROUND {r} {acc:.4f} {loss:.4f}", flush=True)
    print(f"FINAL {acc:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
