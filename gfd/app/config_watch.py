"""Whether the config file gfd was started with has changed since it was read.

Under the GPU Operator, NVIDIA's config-manager rewrites the config file and sends SIGHUP
once; it never retries a signal that found no process, and its init container may write
the file after gfd has started. So the loop also looks at the file itself (its bytes: a
rewrite with the same content is no change) while it sleeps, and reloads when it changed.

A file that is gone is no change: config-manager replaces the file by removing its symlink
and making a new one, and a look between the two saw the file absent, then the new one, and
reloaded twice (seen against the real config-manager v0.20.0). A reload without the file
would fail and keep the running configuration anyway; gfd keeps it, and reloads when a file
with other bytes is there again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


class ConfigFileWatch:
    """The state of one file (or of no file, for None), compared on each :meth:`changed`."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self._seen = self._state()

    def _state(self) -> str | None:
        if self.path is None:
            return None
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def changed(self) -> bool:
        """True once per change of the file's content, or its appearance (see the module)."""
        if self.path is None:
            return False
        state = self._state()
        if state is None or state == self._seen:
            return False
        self._seen = state
        return True
