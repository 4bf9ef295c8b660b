"""The base of operational failures whose message is all a user needs (what happened and
what to do): the CLI prints it as one line, without a traceback unless ``-v``."""

from __future__ import annotations


class UserFacingError(RuntimeError):
    """A failure the user can act on; its message says how."""
