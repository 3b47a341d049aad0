"""The exception the fl package raises."""


class FlError(Exception):
    """An error of the fl SDK, with the status code it carries.

    ``code`` is the name of an absl status code, e.g. ``"PERMISSION_DENIED"`` when the server
    refuses this site, ``"UNAVAILABLE"`` when it stays unreachable, ``"INVALID_ARGUMENT"`` for a
    bad option; ``message`` says what was wrong and what to do. A trainer may raise it too: the
    task is then declined with that code and message.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
