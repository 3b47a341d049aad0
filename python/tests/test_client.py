"""The site API against a real `fl server` over mutual TLS."""

import logging
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import fl
from conftest import FL_BINARY, small_weights


class AddOne:
    """Adds 1 to every weight; remembers what it was handed."""

    def __init__(self, in_place_buffer: bool = True):
        self.seen = []  # (round, weights copy, read-only, one buffer)
        self.in_place_buffer = in_place_buffer

    def get_weights(self):
        return small_weights()

    def fit(self, weights, config):
        arrays = list(weights.values())
        one_buffer = all(
            b.__array_interface__["data"][0]
            == a.__array_interface__["data"][0] + a.nbytes
            for a, b in zip(arrays, arrays[1:])
        )
        self.seen.append((config["round"], fl.copy_weights(weights),
                          not any(a.flags.writeable for a in arrays), one_buffer))
        if self.in_place_buffer:
            out = fl.copy_weights(weights)
            for a in out.values():
                a += 1
        else:
            out = {k: v + 1 for k, v in weights.items()}
        return out, 10, {"loss": 0.5}

    def evaluate(self, weights, config):
        return 0.25, 5, {"accuracy": 0.75}


def run_sites(federation, trainers, **options):
    clients = [fl.Client(**federation.site(i), **options) for i in range(len(trainers))]
    results = [None] * len(trainers)

    def run(i):
        try:
            results[i] = clients[i].run(trainers[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(trainers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return clients, results


def test_two_python_sites_train_a_run_over_mutual_tls(federation, caplog):
    f = federation(sites=2, args=["--rounds", "2", "--eval-every", "1"])
    caplog.set_level(logging.INFO, logger="fl")
    trainers = [AddOne(), AddOne(in_place_buffer=False)]
    clients, results = run_sites(f, trainers, share_site_evaluation=True)
    for r in results:
        assert isinstance(r, fl.RunEnd), r
        assert not r.failed
    for t in trainers:
        assert [s[0] for s in t.seen] == [1, 2]
        # Round 1 hands out the initial model; round 2 FedAvg's mean of the two (+1 each).
        for name, a in small_weights().items():
            np.testing.assert_allclose(t.seen[0][1][name], a, rtol=1e-6)
            np.testing.assert_allclose(t.seen[1][1][name], a + 1, rtol=1e-6)
        assert all(s[2] for s in t.seen), "the global weights must be read-only views"
        assert all(s[3] for s in t.seen), "the global weights must be views of one buffer"
    # The first site's updates were one buffer: borrowed, never copied; the second's were not.
    assert clients[0]._client.borrowed_results == 2
    assert clients[1]._client.borrowed_results == 0
    assert clients[0].client_id
    rounds = f.admin("rounds")
    assert "committed" in rounds
    # The SDK's log lines went to Python's logging, logger "fl", at their level: each site's
    # end of the run, at INFO.
    done = [r for r in caplog.records if r.name == "fl" and " client_done " in r.getMessage()]
    assert len(done) == 2 and all(r.levelno == logging.INFO for r in done), caplog.records


def test_errors_are_fl_errors_with_their_code(federation, tmp_path):
    f = federation(sites=1)
    with pytest.raises(fl.FlError) as e:
        fl.Client(**f.site(0), limits={"max_epochs": 1}).run(AddOne())
    assert e.value.code == "INVALID_ARGUMENT"
    assert "unknown limit 'max_epochs'" in e.value.message
    assert "max_local_epochs" in e.value.message

    with pytest.raises(fl.FlError) as e:
        fl.Client(**f.site(0)).run(object())
    assert e.value.code == "INVALID_ARGUMENT"
    assert "get_weights()" in e.value.message

    # A site whose model is not the server's is refused at join, naming the difference.
    class Other(AddOne):
        def get_weights(self):
            return {"w": np.zeros(5, np.float32)}

    with pytest.raises(fl.FlError) as e:
        fl.Client(**f.site(0)).run(Other())
    assert e.value.code in ("FAILED_PRECONDITION", "INVALID_ARGUMENT", "PERMISSION_DENIED")
    assert "model" in e.value.message

    # A server this site cannot trust (a CA of another federation).
    subprocess.run([FL_BINARY, "certs", "--out", str(tmp_path / "other"), "--clients", "1"],
                   check=True, capture_output=True)
    site = f.site(0)
    site["ca"] = str(tmp_path / "other/ca.pem")
    with pytest.raises(fl.FlError) as e:
        fl.Client(**site).run(AddOne())
    assert e.value.code == "UNAUTHENTICATED"
    assert "cannot trust the server" in e.value.message

    # Nobody listening: UNAVAILABLE once reconnect_timeout has passed.
    site = f.site(0)
    site["server"] = "127.0.0.1:1"
    with pytest.raises(fl.FlError) as e:
        fl.Client(**site, reconnect_timeout=0.5).run(AddOne())
    assert e.value.code == "UNAVAILABLE"


@pytest.mark.parametrize(
    "fit_result, reason",
    [
        # The server's log escapes the backslash that stands for the lone surrogate.
        ("raise_surrogate", "fit raised ValueError: bad \\\\udcff"),
        ("bool_examples", "num_examples must be a positive int, not True"),
        ("nan_metric", "fit's metric 'loss' is nan; metrics must be finite"),
        ("surrogate_metric", "must be a number under a string name"),
        ("fl_error_subclass", "the site's own refusal"),
    ],
)
def test_a_bad_fit_declines_the_task_and_the_process_lives(federation, fit_result, reason):
    f = federation(sites=1, args=["--rounds", "1", "--max-round-retries", "0"])

    class MyError(fl.FlError):
        pass

    class Bad(AddOne):
        def fit(self, weights, config):
            out = fl.copy_weights(weights)
            if fit_result == "raise_surrogate":
                raise ValueError("bad \udcff")
            if fit_result == "bool_examples":
                return out, True
            if fit_result == "nan_metric":
                return out, 1, {"loss": float("nan")}
            if fit_result == "surrogate_metric":
                return out, 1, {"\udcff": "x"}
            raise MyError("PERMISSION_DENIED", "the site's own refusal")

    end = fl.Client(**f.site(0)).run(Bad())
    assert end.failed
    log = f.log.read_text()
    assert reason in log, log[-2000:]
    if fit_result == "fl_error_subclass":
        assert "PERMISSION_DENIED" in log


def test_limits_out_of_range_are_refused_before_anything_runs(federation):
    f = federation(sites=1)
    for limits, what in (({"max_local_epochs": True}, "must be a number"),
                         ({"max_local_epochs": -5}, "max_local_epochs must be >= 0"),
                         ({"max_epsilon": float("nan")}, "max_epsilon must be a finite"),
                         ({"epsilon_delta": 1.0}, "epsilon_delta must be in (0, 1)")):
        with pytest.raises(fl.FlError) as e:
            fl.Client(**f.site(0), limits=limits).run(AddOne())
        assert e.value.code == "INVALID_ARGUMENT"
        assert what in e.value.message, e.value.message


def test_a_trainers_exception_declines_the_task_with_its_message(federation):
    f = federation(sites=1, args=["--rounds", "1", "--max-round-retries", "0"])

    class Broken(AddOne):
        def fit(self, weights, config):
            raise ValueError("no data on this site today")

    client = fl.Client(**f.site(0))
    end = client.run(Broken())
    assert end.failed
    log = f.log.read_text()
    assert "fit raised ValueError: no data on this site today" in log


def test_the_gil_is_released_while_the_client_waits(federation):
    # Two sites are needed for a round; only one comes: its run() waits on the network.
    f = federation(sites=2)
    client = fl.Client(**f.site(0))
    outcome = []
    waiting = threading.Thread(target=lambda: outcome.append(_outcome(client.run, AddOne())))

    def spin(seconds):
        n, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            n += 1
        return n

    alone = spin(0.5)
    waiting.start()
    time.sleep(0.5)  # joined and polling
    beside = spin(0.5)
    assert waiting.is_alive() and not outcome, "run() must still be waiting on the network"
    client.stop()
    waiting.join(timeout=30)
    assert not waiting.is_alive()
    assert outcome == ["CANCELLED"], outcome
    # A client holding the GIL through its wait (in C++, never yielding it) would leave this
    # thread nothing at all; a margin for a loaded CI machine.
    assert beside > 0.4 * alone, (beside, alone)


def _outcome(fn, *args):
    try:
        fn(*args)
        return "OK"
    except fl.FlError as e:
        return e.code


def test_client_id_read_while_the_run_ends_does_not_deadlock(federation):
    # The loop logs the run's end; the log line goes to Python (it needs the GIL) while another
    # thread reads client_id (it held the GIL and waited for the loop's lock).
    f = federation(sites=1, args=["--rounds", "1"])
    client = fl.Client(**f.site(0))
    done = threading.Event()
    reads = []

    def poll():
        while not done.is_set():
            reads.append(client.client_id)

    poller = threading.Thread(target=poll)
    poller.start()
    runner = threading.Thread(target=lambda: (client.run(AddOne()), done.set()))
    runner.start()
    runner.join(timeout=60)
    done.set()
    poller.join(timeout=10)
    assert not runner.is_alive() and not poller.is_alive(), "deadlocked"
    assert any(reads)


def test_stop_before_run_makes_it_return_cancelled(federation):
    f = federation(sites=1)
    client = fl.Client(**f.site(0))
    client.stop()
    assert _outcome(client.run, AddOne()) == "CANCELLED"


def test_secure_aggregation_leaves_a_borrowed_update_alone(federation):
    # The masked-input stage turns the update into its change in place: never the trainer's
    # own buffer, even when the SDK would borrow it.
    f = federation(sites=3, args=["--rounds", "1", "--secagg"])

    class Keeps(AddOne):
        def fit(self, weights, config):
            self.update = fl.copy_weights(weights)
            for a in self.update.values():
                a += 2
            self.kept = fl.copy_weights(self.update)
            self.secure = config["secure_aggregation"]
            return self.update, 10

    trainers = [Keeps() for _ in range(3)]
    clients, results = run_sites(f, trainers)
    assert all(isinstance(r, fl.RunEnd) and not r.failed for r in results), results
    for t in trainers:
        assert t.secure
        for name in t.kept:
            np.testing.assert_array_equal(t.update[name], t.kept[name])
    assert all(c._client.borrowed_results == 0 for c in clients)


SCRIPT = textwrap.dedent(
    """
    import sys, time, numpy as np, fl
    class Slow:
        def get_weights(self):
            return {"dense.weight": np.zeros((3, 4), np.float32),
                    "dense.bias": np.zeros(3, np.float32), "scale": np.zeros((), np.float32)}
        def fit(self, weights, config):
            print("fit started", flush=True)
            end = time.time() + 120
            while time.time() < end:
                time.sleep(0.01)
            return dict(weights), 1
    print("running", flush=True)
    fl.Client(server=sys.argv[1], ca=sys.argv[2], cert=sys.argv[3], key=sys.argv[4]).run(Slow())
    """
)


@pytest.mark.parametrize("during", ["wait", "fit"])
def test_ctrl_c_stops_the_client(federation, during):
    import os
    import signal

    f = federation(sites=2 if during == "wait" else 1)
    site = f.site(0)
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, site["server"], site["ca"], site["cert"], site["key"]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    expect = "fit started" if during == "fit" else "running"
    line = ""
    deadline = time.time() + 60
    while expect not in line and time.time() < deadline:
        line = child.stdout.readline()
    assert expect in line
    time.sleep(0.5)
    start = time.time()
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=30)
    assert time.time() - start < 10
    assert child.returncode != 0
    assert "KeyboardInterrupt" in err
