"""vLLM servers for the plan: launched from the user's own command, or already running at a URL.

The command carries ``{port}`` (anywhere) and ``{speculative_config}`` (an argument of its own:
``--speculative-config <JSON>``, or nothing for ``off``). It is split with ``shlex`` and run
without a shell in its own process group, so stopping it stops the engine's processes too. A
server that exits before it is ready was refused: :func:`refusal_reason` reads vLLM's own error
from its log. One that dies while measured makes :meth:`Server.alive` false.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Mapping

from .stream import get

SPEC = "{speculative_config}"
PORT = "{port}"
_PLACEHOLDER = re.compile(r"\{[a-z_]*\}")
# "ValueError: ...", "vllm.x.YError: ...", possibly after vLLM's "(EngineCore pid=1) " process prefix and a
# log record's "ERROR 12-04 21:01:52 [multiproc_executor.py:953] " (a worker's traceback goes through its logger)
_EXCEPTION = re.compile(r"^(?:\([^)]*\)\s*)?(?:[A-Z]+\s+\S+\s+\S+\s+\[[^\]]*\]\s*)?"
                        r"((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)):\s*(.+)$")
_GENERIC = ("Engine core initialization failed", "See root cause above", "Worker failed",
            "WorkerProc initialization failed")


class ServerRefused(RuntimeError):
    """A server that exited before it was ready (vLLM refused the configuration); ``reason`` is vLLM's own."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"{name}: vLLM refused to start: {reason}")
        self.name, self.reason = name, reason


class ServerDied(RuntimeError):
    """A server that stopped answering while it was measured."""


class ServeCommand:
    """The user's server command with its two placeholders (module docstring)."""

    def __init__(self, text: str):
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise ValueError(f"--serve: cannot split the command {text!r}: {exc}") from None
        if not argv:
            raise ValueError("--serve: the command is empty")
        if argv.count(SPEC) != 1:
            raise ValueError(f"--serve: the command must hold {SPEC} exactly once, as an argument of its own "
                             f"(it becomes --speculative-config <JSON>, or nothing for off); got {text!r}")
        if not any(PORT in a for a in argv):
            raise ValueError(f"--serve: the command must hold {PORT} (where the server listens); got {text!r}")
        unknown = sorted({m for a in argv for m in _PLACEHOLDER.findall(a)} - {SPEC, PORT})
        if unknown:
            raise ValueError(f"--serve: unknown placeholders {unknown}; only {PORT} and {SPEC}")
        if any(a.startswith("--speculative-config") or a.startswith("--speculative_config") for a in argv):
            raise ValueError("--serve: leave --speculative-config out of the command; the plan sets it per candidate")
        self.argv = tuple(argv)
        self.text = text

    def expand(self, port: int, config: dict | None) -> list[str]:
        out: list[str] = []
        for a in self.argv:
            if a == SPEC:
                if config is not None:
                    out += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
            else:
                out.append(a.replace(PORT, str(port)))
        return out

    def option(self, *names: str) -> str | None:
        """The value the command gives a flag (``--flag value`` or ``--flag=value``), else None."""
        for i, a in enumerate(self.argv):
            for n in names:
                if a == n and i + 1 < len(self.argv):
                    return self.argv[i + 1]
                if a.startswith(n + "="):
                    return a.split("=", 1)[1]
        return None

    def model(self) -> str | None:
        """The served model: ``--model``, or the argument after ``serve`` (``vllm serve MODEL``)."""
        found = self.option("--model")
        if found is not None:
            return found
        if "serve" in self.argv:
            i = self.argv.index("serve")
            if i + 1 < len(self.argv) and not self.argv[i + 1].startswith("-"):
                return self.argv[i + 1]
        return None


def refusal_reason(log_text: str) -> str:
    """vLLM's reason for not starting, from its log: the last exception it raised that is not one of
    its wrappers ("Engine core initialization failed ..."), else the last line of the log."""
    found = [m for m in (_EXCEPTION.match(line.strip()) for line in log_text.splitlines()) if m]
    specific = [m for m in found if not any(g in m.group(2) for g in _GENERIC)]
    pick = (specific or found)
    if pick:
        return f"{pick[-1].group(1).rsplit('.', 1)[-1]}: {pick[-1].group(2).strip()}"
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    return lines[-1] if lines else "the server exited without a log line"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server: started here (``proc`` set, stopped by :meth:`stop`) or running elsewhere (``proc`` None)."""

    def __init__(self, name: str, url: str, proc: subprocess.Popen | None = None, log: Path | None = None):
        self.name, self.url, self.proc, self.log = name, url.rstrip("/"), proc, log

    @classmethod
    def launch(cls, name: str, command: ServeCommand, config: dict | None, log: Path, *,
               env: Mapping[str, str] | None = None, port: int | None = None) -> "Server":
        """Start the command for ``config`` on a free port (output to ``log``); returns at once."""
        port = free_port() if port is None else port
        argv = command.expand(port, config)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as out:
            out.write("$ " + shlex.join(argv) + "\n")
            out.flush()
            try:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                        env={**os.environ, **(env or {})})
            except OSError as exc:
                raise ServerRefused(name, f"cannot run {argv[0]!r}: {exc}") from None
        return cls(name, f"http://127.0.0.1:{port}", proc, log)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log is not None and self.log.exists() else ""

    def healthy(self) -> bool:
        try:
            return get(self.url, "/health", timeout=3.0)[0] == 200
        except OSError:
            return False

    def alive(self) -> bool:
        """The process runs (a launched server) or ``/health`` answers (a running one)."""
        return self.proc.poll() is None if self.proc is not None else self.healthy()

    def wait_ready(self, timeout: float) -> None:
        """Block until ``/health`` answers 200.

        Raises:
            ServerRefused: the process exited first (vLLM's reason from the log).
            TimeoutError: not ready within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerRefused(self.name, refusal_reason(self.log_text()))
            if self.healthy():
                return
            time.sleep(1.0)
        raise TimeoutError(f"{self.name}: the server at {self.url} was not ready after {timeout:.0f} s"
                           + (f" (log: {self.log})" if self.log else ""))

    def death(self) -> str:
        """Why a server that stopped answering stopped (its exit status and log's last error)."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"exited with status {self.proc.returncode}: {refusal_reason(self.log_text())}"
        return f"stopped answering at {self.url}"

    def stop(self) -> None:
        """Stop a launched server's whole process group (SIGTERM, then SIGKILL after 30 s); a server
        running elsewhere is left alone."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):  # also when the leader exited: its children may not have
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
