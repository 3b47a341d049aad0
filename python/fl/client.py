"""fl.Client: one site's loop against the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from . import _fl


@dataclass(frozen=True)
class RunEnd:
    """How the run that ended ``Client.run`` ended."""

    run_id: int
    failed: bool  # the server says the run failed (else it finished)
    message: str  # the server's words


class Client:
    """A site of a federation.

    ``server`` is host:port; ``ca``, ``cert`` and ``key`` are the PEM files of the federation's CA,
    this site's certificate and its key (mutual TLS). ``limits`` is what the site agrees to,
    whatever the server asks (keys of the C++ ``SiteLimits``: ``max_local_epochs``,
    ``allowed_models``, ``require_differential_privacy``, ``require_secure_aggregation``,
    ``min_noise_multiplier``, ``max_epsilon``, ``epsilon_delta``, ``privacy_ledger``,
    ``min_sum_size``, ``min_corrupt_fraction``, ``grinding_bits``); a task outside them is declined
    and the server records why. ``insecure_plaintext`` is for tests on loopback only.
    """

    def __init__(
        self,
        server: str,
        ca: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
        *,
        limits: Optional[Mapping[str, Any]] = None,
        name: str = "",
        insecure_plaintext: bool = False,
        reconnect_timeout: Optional[float] = None,
        poll_wait: Optional[float] = None,
        share_site_evaluation: bool = False,
    ) -> None:
        self._options = dict(
            server=server,
            ca=ca or "",
            cert=cert or "",
            key=key or "",
            limits=dict(limits) if limits is not None else None,
            name=name,
            insecure_plaintext=insecure_plaintext,
            reconnect_timeout=reconnect_timeout,
            poll_wait=poll_wait,
            share_site_evaluation=share_site_evaluation,
        )
        self._client: Optional[_fl.Client] = None
        self._stop_requested = False

    def run(self, trainer: Any, on_task: Optional[Callable[[dict], None]] = None) -> RunEnd:
        """Takes part in the server's run with ``trainer`` until the run ends.

        ``on_task``, when given, is called after every fit task (and secure-aggregation stage)
        with a dict: ``round``, ``stage``, ``status`` ("OK" or the error), ``num_examples``,
        ``train_seconds`` (the trainer's call) and ``task_seconds`` (download, training and
        upload, until the server answered).

        Returns how it ended. Raises ``fl.FlError`` when the server refuses this site
        (``PERMISSION_DENIED``/``UNAUTHENTICATED``), stays unreachable past ``reconnect_timeout``
        (``UNAVAILABLE``) or an option is wrong (``INVALID_ARGUMENT``); ``KeyboardInterrupt`` on
        Ctrl-C, once the loop has stopped (a fit under way is interrupted). The GIL is released
        while the loop waits on the network.
        """
        self._client = _fl.Client(trainer, **self._options)
        if self._stop_requested:  # stop() came before the loop existed
            self._client.stop()
        end = self._client.run(on_task)
        return RunEnd(run_id=end["run_id"], failed=end["failed"], message=end["message"])

    def stop(self) -> None:
        """Makes ``run`` return soon (from another thread); before ``run``, makes it return at
        once. ``run`` then raises ``fl.FlError`` with code CANCELLED."""
        self._stop_requested = True
        if self._client is not None:
            self._client.stop()

    @property
    def client_id(self) -> str:
        """The identity the server knows this site by (empty before it joined)."""
        return self._client.client_id if self._client is not None else ""
