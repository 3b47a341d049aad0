"""Flower's side of bench/flower_compare.sh: FedAvg rounds with N clients and a P-parameter model.

Workload (issue 6, benchmark 4): a Flower 1.42 server (legacy `flwr.server.start_server`, gRPC
bidirectional stream, TLS with a CA made here for the run) and N clients
(`flwr.client.start_client`), each in its own process on loopback. The model is one float32
array of P parameters; every client's "training" returns the parameters it received, unchanged,
with num_examples 1 (a `flwr.client.Client`, not a NumPyClient: no numpy decode and encode on
the client), so only the framework is measured. FedAvg with fraction_fit = 1,
min_fit_clients = min_available_clients = N, no evaluation (fraction_evaluate = 0, no central
evaluate function). R rounds; round 1 is a warm-up.

Why the legacy API: it is the one Flower 1.42 path that runs a real gRPC server and separate
client processes with no Ray and no SuperLink/SuperNode/SuperExec/ServerApp process tree, so the
server is one process whose peak memory is its own. Flower's TLS authenticates the server only
(Flower has no mutual TLS); our side runs mutual TLS.

Measured, in the server process:
  round period: time from the end of one round's aggregation (aggregate_fit returning) to the end
                of the next's, so it holds everything the server does in a round (configure,
                send, wait for the clients, receive, aggregate, the empty evaluation round).
  round duration: configure_fit called to aggregate_fit returned (the same round, no gap).
  peak RSS: VmHWM of the server process (its whole life: imports, start, all rounds).

Prints a short table and one machine-readable line starting with "RESULT ".

  python flower_round.py --clients 10 --params 100000 --rounds 21
"""

import argparse
import datetime
import importlib.metadata
import logging
import multiprocessing as mp
import queue
import os
import socket
import statistics
import sys
import time

# Before flwr is imported anywhere (spawned children inherit the environment): no telemetry
# calls to Flower's servers, which this machine cannot reach anyway.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


def _make_tls():
    """A CA and a server certificate for localhost / 127.0.0.1, as PEM bytes (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flower-bench-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (ca.public_bytes(pem), cert.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quiet():
    # Called after flwr is imported: importing it sets its logger to INFO.
    logging.getLogger("flwr").setLevel(logging.ERROR)


def _vm_hwm_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def server_process(port, clients, params, rounds, tls, results):
    import numpy as np
    import flwr as fl
    from flwr.common import ndarrays_to_parameters
    _quiet()

    class TimedFedAvg(fl.server.strategy.FedAvg):
        """FedAvg that records when each round starts and ends; the math is Flower's."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self.starts, self.ends = {}, {}

        def configure_fit(self, server_round, parameters, client_manager):
            self.starts[server_round] = time.perf_counter()
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results_, failures):
            out = super().aggregate_fit(server_round, results_, failures)
            self.ends[server_round] = time.perf_counter()
            if failures:
                self.failures = getattr(self, "failures", 0) + len(failures)
            return out

    initial = ndarrays_to_parameters([np.zeros(params, dtype=np.float32)])
    strategy = TimedFedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=clients,
                           min_evaluate_clients=0, min_available_clients=clients,
                           initial_parameters=initial)
    del initial  # the strategy holds it; count only what Flower keeps
    base = _vm_hwm_mib()
    fl.server.start_server(server_address=f"127.0.0.1:{port}",
                           config=fl.server.ServerConfig(num_rounds=rounds),
                           strategy=strategy, certificates=tls)
    ends = [strategy.ends[r] for r in sorted(strategy.ends)]
    results.put({
        "committed": len(ends),
        "failures": getattr(strategy, "failures", 0),
        "periods": [b - a for a, b in zip(ends, ends[1:])],
        "durations": [strategy.ends[r] - strategy.starts[r] for r in sorted(strategy.ends)],
        "peak_mib": _vm_hwm_mib(),
        "base_mib": base,
        "first_end": strategy.ends[min(strategy.ends)],
        "last_end": max(strategy.ends.values()),
    })


def client_process(port, params, ca_pem, numpy_client=False):
    import numpy as np
    import flwr as fl
    from flwr.common import (Code, EvaluateRes, FitRes, GetParametersRes, Status,
                             ndarrays_to_parameters)
    _quiet()
    ok = Status(code=Code.OK, message="")

    class UnchangedClient(fl.client.Client):
        """Returns the parameters it received, as received: no numpy round trip, the least work
        (and memory) a Flower client can do, so Flower's figures are its framework's alone."""

        def get_parameters(self, ins):
            return GetParametersRes(status=ok, parameters=ndarrays_to_parameters(
                [np.zeros(params, dtype=np.float32)]))

        def fit(self, ins):
            return FitRes(status=ok, parameters=ins.parameters, num_examples=1, metrics={})

        def evaluate(self, ins):
            return EvaluateRes(status=ok, loss=0.0, num_examples=1, metrics={})

    class UnchangedNumPyClient(fl.client.NumPyClient):
        """The same as a NumPyClient, the API Flower's users write (bench/python_sdk_bench.sh):
        Flower decodes the parameters to numpy arrays and encodes the result back."""

        def get_parameters(self, config):
            return [np.zeros(params, dtype=np.float32)]

        def fit(self, parameters, config):
            return parameters, 1, {}

        def evaluate(self, parameters, config):
            return 0.0, 1, {}

    client = UnchangedNumPyClient().to_client() if numpy_client else UnchangedClient()
    fl.client.start_client(server_address=f"localhost:{port}", client=client,
                           root_certificates=ca_pem)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--params", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=21, help="round 1 is a warm-up")
    ap.add_argument("--workload", default="", help="label echoed in the RESULT line")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--numpy-client", action="store_true",
                    help="clients are NumPyClients (numpy decode and encode) instead of Clients")
    args = ap.parse_args()
    if args.rounds < 2:
        sys.exit("--rounds must be at least 2 (round 1 is a warm-up)")

    tls = _make_tls()
    port = _free_port()
    ctx = mp.get_context("spawn")  # no fork after gRPC or numpy threads exist
    results = ctx.Queue()
    t0 = time.perf_counter()
    server = ctx.Process(target=server_process,
                         args=(port, args.clients, args.params, args.rounds, tls, results))
    server.start()
    clients = [ctx.Process(target=client_process,
                           args=(port, args.params, tls[0], args.numpy_client))
               for _ in range(args.clients)]
    for c in clients:
        c.start()
    # Wait for the server's figures, but not for a server that died (the OOM killer picks it
    # first on a small machine: its peak is the largest) or one that overruns --timeout.
    r = None
    deadline = time.perf_counter() + args.timeout
    while r is None:
        try:
            r = results.get(timeout=1)
        except queue.Empty:
            if not server.is_alive() or time.perf_counter() > deadline:
                for p in [server] + clients:
                    p.kill()
                why = (f"the server process died (exit code {server.exitcode}; -9: killed, e.g. "
                       f"by the OOM killer)" if not server.is_alive()
                       else f"the server did not finish in {args.timeout:.0f} s")
                print(f"RESULT side=flower workload={args.workload} clients={args.clients} "
                      f"params={args.params} rounds=0 failures=server_died", flush=True)
                sys.exit(f"flower_round: {why}")
    t_result = time.perf_counter()
    server.join(60)
    t_server = time.perf_counter()
    # A Flower client may linger after "Disconnect and shut down"; the run is over, so each gets
    # a few seconds and is then killed (outside every figure).
    deadline = time.perf_counter() + 5
    for c in clients:
        c.join(max(0.0, deadline - time.perf_counter()))
        if c.is_alive():
            c.kill()
            c.join()
    wall = time.perf_counter() - t0
    print(f"teardown: result {t_result - r['last_end']:.2f} s after the "
          f"last round, server exited {t_server - t_result:.2f} s after its result, "
          f"clients {sum(c.exitcode is not None and c.exitcode < 0 for c in clients)} killed",
          file=sys.stderr)
    # Launch to the end of the warm-up round (process start-up, imports, connecting, round 1);
    # perf_counter is CLOCK_MONOTONIC, the same in every process on Linux.
    setup = r["first_end"] - t0

    periods = r["periods"]
    med = statistics.median(periods)
    dur = statistics.median(r["durations"][1:])
    print(f"Flower {importlib.metadata.version('flwr')}: "
          f"{args.clients} clients, {args.params} float32 parameters, {args.rounds} rounds "
          f"(1 warm-up), server TLS (no client certificates), legacy start_server/start_client")
    print(f"| round period median s | min s | max s | round duration median s "
          f"| server peak RSS MiB | rounds | failures | wall s |")
    print(f"| {med:.4f} | {min(periods):.4f} | {max(periods):.4f} | {dur:.4f} "
          f"| {r['peak_mib']:.0f} | {r['committed']} | {r['failures']} | {wall:.1f} |")
    print(f"RESULT side=flower workload={args.workload} clients={args.clients} "
          f"params={args.params} rounds={r['committed']} failures={r['failures']} "
          f"period_median_s={med:.6f} duration_median_s={dur:.6f} "
          f"peak_rss_mib={r['peak_mib']:.1f} base_rss_mib={r['base_mib']:.1f} "
          f"setup_s={setup:.2f} wall_s={wall:.2f}",
          flush=True)
    ok = r["committed"] == args.rounds and r["failures"] == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
