"""Minimal systemd notify protocol (READY=1, WATCHDOG=1, STOPPING=1, STATUS=...) over $NOTIFY_SOCKET.

No dependency on libsystemd: one datagram per message to the socket systemd names, including abstract
namespace sockets (`@name`). Outside systemd every call is a no-op.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    """Sends sd_notify messages; `enabled` is False when not run by systemd with Type=notify."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]
        self._address = address or None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        ok_pid = not pid or (pid.isdigit() and int(pid) == os.getpid())
        self.watchdog_s: float | None = int(usec) / 1e6 if usec.isdigit() and int(usec) > 0 and ok_pid else None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, message: str) -> bool:
        """Send `message` (e.g. "READY=1"); True if it was sent."""
        if self._address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self._address)
                sock.sendall(message.encode())
            return True
        except OSError:
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")
