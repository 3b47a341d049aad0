"""Fixtures of the Python SDK's tests: a real `fl server` over mutual TLS, with certificates made
by `fl certs`, started from a safetensors file of the test's model.

FL_BINARY names the `fl` program (CTest sets it; default ../../build/cli/fl)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import fl

REPO = Path(__file__).resolve().parents[2]
FL_BINARY = os.environ.get("FL_BINARY", str(REPO / "build" / "cli" / "fl"))


def small_weights() -> dict[str, np.ndarray]:
    """A model of three tensors (a matrix, a vector, a scalar)."""
    return {
        "dense.weight": np.arange(12, dtype=np.float32).reshape(3, 4) / 10,
        "dense.bias": np.array([0.5, -0.5, 1.0], dtype=np.float32),
        "scale": np.array(2.0, dtype=np.float32),
    }


class Federation:
    """A server and the certificates of its sites; `site(i)` gives fl.Client's TLS arguments."""

    def __init__(self, root: Path, sites: int, weights: dict, server_args: list[str]):
        self.root = root
        subprocess.run(
            [FL_BINARY, "certs", "--out", str(root / "pki"), "--clients", str(sites)],
            check=True,
            capture_output=True,
        )
        model = root / "model.safetensors"
        fl.save_safetensors(str(model), weights)
        self.log = root / "server.log"
        args = [
            FL_BINARY, "server", "--listen", "127.0.0.1:0", "--data-dir", str(root / "data"),
            "--ca", str(root / "pki/ca.pem"), "--cert", str(root / "pki/server.pem"),
            "--key", str(root / "pki/server.key"), "--initial-model", str(model),
            "--min-clients", str(sites), "--min-fit-clients", str(sites), "--grace", "2",
        ]
        for i in range(sites):
            args += ["--enroll", str(root / f"pki/clients/site-{i}.pem")]
        self.process = subprocess.Popen(
            args + server_args, stdout=subprocess.DEVNULL, stderr=open(self.log, "w")
        )
        self.port = self._wait_for_port()
        self.address = f"127.0.0.1:{self.port}"

    def _wait_for_port(self) -> int:
        deadline = time.time() + 20
        while time.time() < deadline:
            found = re.search(r"server_listening .*port=(\d+)", self.log.read_text())
            if found:
                return int(found.group(1))
            if self.process.poll() is not None:
                raise RuntimeError(f"fl server exited: {self.log.read_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"fl server did not listen: {self.log.read_text()}")

    def site(self, i: int) -> dict:
        return dict(
            server=self.address,
            ca=str(self.root / "pki/ca.pem"),
            cert=str(self.root / f"pki/clients/site-{i}.pem"),
            key=str(self.root / f"pki/clients/site-{i}.key"),
        )

    def admin(self, *args: str) -> str:
        return subprocess.run(
            [FL_BINARY, "admin", "--data-dir", str(self.root / "data"), *args],
            check=True, capture_output=True, text=True,
        ).stdout

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture
def federation(tmp_path):
    """federation(sites=2, weights=small_weights(), args=[...]) starts a server; stopped after."""
    started = []

    def start(sites: int = 2, weights=None, args=None) -> Federation:
        f = Federation(tmp_path, sites, weights if weights is not None else small_weights(),
                       args or ["--rounds", "2"])
        started.append(f)
        return f

    yield start
    for f in started:
        f.stop()
