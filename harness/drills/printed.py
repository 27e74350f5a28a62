"""What an answer printed: read from a pipe while the answer runs, the last 64 KiB kept, the sandbox's noise left out.

The answer's stdout and stderr are the write end of a pipe the checker drains as it waits for the report, so
an answer that prints a gigabyte costs the checker 64 KiB of memory and no disk. Lines that the sandbox itself
causes (gloo warning that the hostname of a socket's peer cannot be looked up, in a namespace with no DNS)
are not the candidate's output and are never shown as such.
"""

from __future__ import annotations

import os
import re
import select
import time

KEEP_BYTES = 64 * 1024
AFTER_REPORT_S = 10.0
NOISE = (
    re.compile(r"^\[W\w* [^\]]*\] \[c10d\] The hostname of the client socket cannot be retrieved\. err=-?\d+$"),
)


class Tail:
    """The last `keep` bytes of a stream, and how many came before them."""

    def __init__(self, keep: int = KEEP_BYTES) -> None:
        self.keep = keep
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.keep:  # trimmed now and then: amortised, never more than 2 * keep held
            cut = len(self.data) - self.keep
            self.dropped += cut
            del self.data[:cut]

    def kept(self) -> bytes:
        """The last `keep` bytes."""
        extra = max(0, len(self.data) - self.keep)
        return bytes(self.data[extra:])

    @property
    def total(self) -> int:
        return self.dropped + len(self.data)


def collect(report_fd: int, output_fd: int, timeout_s: float, max_report: int) -> tuple[bytes, bool, Tail]:
    """Read the report pipe until its writers close it, draining the output pipe meanwhile (and then to its end,
    for `AFTER_REPORT_S` at most: the runner ends whatever the answer left holding it).

    Returns:
        (the report's bytes, whether the deadline passed before the report ended, the output's tail). A report
        over `max_report` bytes is read to its end and returned empty (no honest probe sends one).
    """
    deadline = time.monotonic() + timeout_s
    report, size, tail = bytearray(), 0, Tail()
    open_fds = [report_fd, output_fd]
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.remove(fd)
                if fd == report_fd:
                    deadline = min(deadline, time.monotonic() + AFTER_REPORT_S)
            elif fd == output_fd:
                tail.add(chunk)
            else:
                size += len(chunk)
                report += chunk if size <= max_report else b""
    timed_out = report_fd in open_fds
    return (b"" if size > max_report else bytes(report)), timed_out, tail


def shown(tail: Tail) -> str:
    """The output as the candidate reads it: the sandbox's noise left out, and a note when the start was cut."""
    text = tail.kept().decode(errors="replace")
    lines = [line for line in text.splitlines() if not any(noise.match(line) for noise in NOISE)]
    cut = f"(the first {tail.total - len(tail.kept())} bytes of the output are not kept)\n" if tail.dropped else ""
    return cut + "\n".join(lines)
