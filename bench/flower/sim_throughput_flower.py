"""Flower's side of bench/sim_throughput.sh: the workload on Flower 1.42's Simulation Runtime.

A ServerApp and a ClientApp on Flower's Message API (flwr.serverapp, flwr.clientapp, flwr.app),
run by `flwr.simulation.run_simulation` with the Ray backend: N virtual SuperNodes, and a pool
of Ray actors that run the ClientApp for whichever nodes are sampled (client_resources num_cpus
1 on a Ray started with WORKERS CPUs: WORKERS actors). The ServerApp runs the stock
`flwr.serverapp.strategy.FedAvg` (fraction_train = --sample-fraction, min_train_nodes as
`fl sim` sets it, every node required to be available, no federated evaluation) with a central
evaluate_fn on the 10,000 test examples after every round; the ClientApp runs the same numpy
SGD as the floor (bench/flower/sim_softmax.py), on its node's IID part; each actor process loads
the training set (as bytes) and the split once and keeps them. lr, batch size, epochs, seed and
the data's location travel in the train ConfigRecord, as a Flower app passes them.

Why run_simulation: Flower 1.42 marks it deprecated in favour of `flwr run`, which submits the
app to a background local SuperLink (started detached and left running) and runs it in a
flwr-simulation process; both use the same Simulation Runtime and Ray backend.
run_simulation does the same work in the process that calls it, so the run is one process tree
that starts and ends with the measurement.

Prints "ROUND <r> <test accuracy> <test loss>" from evaluate_fn after each round, flushed, and
"FINAL <test accuracy>" at the end; Flower's and Ray's own logs go to stderr.

  python sim_throughput_flower.py --clients 1000 --examples-per-client 60 \
      --sample-fraction 0.01 --rounds 100 --local-epochs 1 --batch-size 10 --lr 0.1 --workers 2
"""

import argparse
import os
import sys
import time

# Before flwr or ray are imported (Ray's processes inherit the environment): no telemetry or
# usage reports to servers this machine cannot reach anyway.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord  # noqa: E402
from flwr.app import RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

import sim_softmax as sm  # noqa: E402  (Flower passes the driver's sys.path on to Ray's workers)

client_app = ClientApp()


@client_app.train()
def client_train(msg: Message, context: Context) -> Message:
    config = msg.content["config"]
    w, b = msg.content["arrays"].to_numpy_ndarrays()
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    x, y = sm.cached_site_data(str(config["dataset-dir"]), num_partitions,
                               int(config["examples-per-client"]), int(config["seed"]),
                               partition_id)
    w, b, loss = sm.train(w, b, x, y, int(config["local-epochs"]), int(config["batch-size"]),
                          float(config["lr"]),
                          sm.site_rng(int(config["seed"]), partition_id,
                                      int(config["server-round"])))
    content = RecordDict({
        "arrays": ArrayRecord([w, b]),
        "metrics": MetricRecord({"train_loss": loss, "num-examples": len(y)}),
    })
    return Message(content=content, reply_to=msg)


def make_server_app(args):
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        test_images, test_labels = sm.load_split(args.dataset_dir, "t10k")
        x_test = sm.to_float(test_images)
        print(f"ServerApp process {os.getpid()}: BLAS: {sm.blas_info()}", file=sys.stderr,
              flush=True)
        last = {"acc": 0.0}

        def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            w, b = arrays.to_numpy_ndarrays()
            acc, loss = sm.evaluate(w, b, x_test, test_labels)
            if server_round > 0:  # round 0 is the initial model, which fl sim does not evaluate
                print(f"ROUND {server_round} {acc:.4f} {loss:.4f}", flush=True)
            last["acc"] = acc
            return MetricRecord({"accuracy": acc, "loss": loss})

        per_round = max(1, int(args.clients * args.sample_fraction))
        strategy = FedAvg(fraction_train=args.sample_fraction, fraction_evaluate=0.0,
                          min_train_nodes=per_round, min_available_nodes=args.clients)
        w, b = sm.initial_model()
        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord([w, b]),
            num_rounds=args.rounds,
            train_config=ConfigRecord({
                "lr": args.lr, "batch-size": args.batch_size, "local-epochs": args.local_epochs,
                "seed": args.seed, "examples-per-client": args.examples_per_client,
                "dataset-dir": args.dataset_dir,
            }),
            evaluate_fn=evaluate_fn,
        )
        print(f"FINAL {last['acc']:.4f}", flush=True)

    return server_app


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sm.add_workload_args(ap)
    ap.add_argument("--workers", type=int, default=2,
                    help="CPUs given to Ray, one per ClientApp actor")
    ap.add_argument("--verbose", action="store_true", help="Flower's DEBUG logs")
    args = ap.parse_args()

    t0 = time.monotonic()
    print(f"flower: {args.clients} supernodes, {args.workers} Ray workers", flush=True)
    run_simulation(
        server_app=make_server_app(args),
        client_app=client_app,
        num_supernodes=args.clients,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": args.workers, "num_gpus": 0},
        },
        verbose_logging=args.verbose,
    )
    print(f"flower: run_simulation returned after {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
