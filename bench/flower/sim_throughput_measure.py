"""Runs one side of bench/sim_throughput.sh and measures it from outside (standard library only).

The command starts in a new session. Its stdout and stderr (merged, line by line) are saved to
--log, each line stamped with the seconds since the start, and its round lines are timed as they
arrive: `fl sim`'s table rows ("   12   10/10   0.9967   0.6891   0.06s") with --format fl,
"ROUND <r> <accuracy> ..." with --format py. Every --interval seconds (0.1) a sampler walks /proc
and sums the memory of every process of the side: the command and its descendants, and any
process in its session (Ray's raylet, GCS, workers and actors included, even once reparented).
Two sums: RSS (resident pages, from /proc/PID/statm: pages shared between processes, such as
Ray's object store in /dev/shm or the same libraries, count once per process) and PSS (from
/proc/PID/smaps_rollup: each shared page split among the processes that map it, so the sum is
the side's real footprint). The peak of each sum is reported; the RSS one is at least the
largest single process's own peak (getrusage of the waited-for children). The sampler also
notes whether a compiler (cc1plus, ninja) ran at any moment, so that the caller can repeat a
disturbed run.

At the end, or at --timeout, every process still left in the session is ended (SIGTERM, then
SIGKILL after 5 s). Prints one line:

  RESULT side=S rep=R status=ok|failed|timeout wall_s= round1_s= round_median_s= rounds=
         peak_rss_mib= peak_pss_mib= peak_procs= accuracy= compiler_seen=0|1

wall_s: start to exit. round1_s: start to the arrival of round 1's line. round_median_s: the
median gap between the arrivals of successive round lines after round 1 (training, aggregation
and evaluation of one round). accuracy: the final test accuracy (fraction), from the side's
final line, else its last round line.

  python sim_throughput_measure.py --side ours --rep 1 --format fl --log run.log -- CMD ARGS...
"""

import argparse
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time

FL_ROUND = re.compile(r"^\s*(\d+)\s+\d+/\d+\s+\S+\s+([0-9.]+)\s+[0-9.]+s")
FL_FINAL = re.compile(r"final test accuracy ([0-9.]+) %")
PY_ROUND = re.compile(r"^ROUND (\d+) ([0-9.]+)")
PY_FINAL = re.compile(r"^FINAL ([0-9.]+)")
COMPILERS = {"cc1plus", "ninja", "cc1"}
PAGE = os.sysconf("SC_PAGE_SIZE")


def read_stat(pid):
    """(ppid, session id, command name) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    # The name is in parentheses and may hold spaces or parentheses itself.
    name = data[data.index("(") + 1:data.rindex(")")]
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[3]), name


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def pss_bytes(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def side_processes(root):
    """The pids of the side: root's descendants and the members of root's session."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = read_stat(int(entry))
            if s is not None:
                stats[int(entry)] = s
    mine = {pid for pid, (_, sid, _) in stats.items() if sid == root}
    if root in stats:
        mine.add(root)
    grew = True
    while grew:  # descendants that left the session (setsid) stay the side's
        grew = False
        for pid, (ppid, _, _) in stats.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    compiler = any(name in COMPILERS for _, _, name in stats.values())
    return mine, compiler


class Sampler(threading.Thread):
    def __init__(self, root, interval):
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak_rss = self.peak_pss = self.peak_procs = 0
        self.compiler_seen = False
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            pids, compiler = side_processes(self.root)
            self.compiler_seen |= compiler
            self.peak_rss = max(self.peak_rss, sum(rss_bytes(p) for p in pids))
            self.peak_pss = max(self.peak_pss, sum(pss_bytes(p) for p in pids))
            self.peak_procs = max(self.peak_procs, len(pids))
            self.stop.wait(self.interval)


def end_session(root):
    """Ends what is left of the side (by pid, its own processes only); returns how many."""
    pids, _ = side_processes(root)
    pids.discard(os.getpid())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in pids if read_stat(p) is not None]
        for p in alive:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(read_stat(p) is not None for p in alive):
            time.sleep(0.1)
    return len(pids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", required=True)
    ap.add_argument("--rep", default="1")
    ap.add_argument("--format", choices=["fl", "py"], required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    round_re, final_re = (FL_ROUND, FL_FINAL) if args.format == "fl" else (PY_ROUND, PY_FINAL)
    scale = 0.01 if args.format == "fl" else 1.0  # fl prints the final accuracy in percent

    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    sampler = Sampler(proc.pid, args.interval)
    sampler.start()
    timer = threading.Timer(args.timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    arrivals = {}  # round -> seconds since start
    accuracy = None
    with open(args.log, "w") as log:
        log.write(f"# {' '.join(cmd)}\n")
        for raw in proc.stdout:
            t = time.monotonic() - start
            line = raw.decode(errors="replace").rstrip("\n")
            log.write(f"{t:9.3f} {line}\n")
            if m := round_re.match(line):
                arrivals.setdefault(int(m.group(1)), t)
                accuracy = float(m.group(2))
            elif m := final_re.search(line):
                accuracy = float(m.group(1)) * scale
    rc = proc.wait()
    wall = time.monotonic() - start
    # The largest peak of any one waited-for descendant, exact where sampling may miss a short
    # peak (a one-process side that runs for a second).
    largest_single = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    timed_out = not timer.is_alive() and rc != 0
    timer.cancel()
    sampler.stop.set()
    sampler.join()
    leftover = end_session(proc.pid)

    rounds = sorted(arrivals)
    gaps = [arrivals[r] - arrivals[r - 1] for r in rounds if r >= 2 and r - 1 in arrivals]
    status = "timeout" if timed_out else ("ok" if rc == 0 and rounds else "failed")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    print(f"RESULT side={args.side} rep={args.rep} status={status} rc={rc} wall_s={wall:.3f} "
          f"round1_s={fmt(arrivals.get(1), '.3f')} "
          f"round_median_s={fmt(statistics.median(gaps) if gaps else None, '.4f')} "
          f"rounds={len(rounds)} "
          f"peak_rss_mib={max(sampler.peak_rss, largest_single) / 2**20:.0f} "
          f"peak_pss_mib={sampler.peak_pss / 2**20:.0f} peak_procs={sampler.peak_procs} "
          f"accuracy={fmt(accuracy, '.4f')} compiler_seen={int(sampler.compiler_seen)} "
          f"leftover_procs={leftover}", flush=True)
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
