"""A real `glassformer serve` process for the tests: started on a free port (the OS picks it:
--port 0, read back from its first log line), stopped in teardown with Ctrl-C (SIGINT), killed
only if it does not stop. (Not conftest.py: several test folders have one, so a test imports
this by its own name.)"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START_S = 60.0   # generous: the 2-core test machine is shared
STOP_S = 30.0


class Server:
    def __init__(self, process, log: Path, url: str):
        self.process, self.log, self.url = process, log, url

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8")

    def peak_bytes(self) -> int:
        """The server process's peak resident memory so far (Linux: VmHWM)."""
        status = Path(f"/proc/{self.process.pid}/status").read_text(encoding="utf-8")
        return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE).group(1)) * 1024

    def stop(self) -> int:
        """Ctrl-C, as a person would; the exit status (killed after STOP_S: -9)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_server(folder, tmp_path: Path, *flags: str) -> Server:
    log = tmp_path / f"server-{time.monotonic_ns()}.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                                   "")])}
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "glassformer", "serve", "--model", str(folder), "--port", "0",
             *flags], stdout=sink, stderr=sink, env=env, cwd=tmp_path)
    server = Server(process, log, "")
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        found = re.search(r"at (http://[\d.]+:\d+)/v1", log.read_text(encoding="utf-8"))
        if found:
            server.url = found.group(1)
            return server
        if process.poll() is not None:
            break
        time.sleep(0.1)
    server.stop()
    pytest.fail(f"the server did not start:\n{log.read_text(encoding='utf-8')}")
