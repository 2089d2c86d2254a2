"""What the load scripts (load-compare.py, hit-cost.py, miss-cost.py,
disk-compare.py) share: a free loopback port, the children they start and stop, a
bounded wait for a server to listen, callgrind's controls, and the top of an nginx
config. Standard library only."""

import glob
import os
import pwd
import socket
import subprocess
import time


def free_port():
    """A loopback port nothing listens on (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(name, port, p, log_path, wait):
    """Returns once `port` accepts a connection; exits with the tail of `log_path`
    if process `p` ends first, or after `wait` seconds."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if p.poll() is not None:
            tail = open(log_path, errors="replace").read()[-2000:]
            raise SystemExit(f"{name} exited with {p.returncode}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{name} did not listen on {port} within {wait:.0f} s")


class Children:
    """The processes a script starts, each logging to `<work>/<name>.log`; all
    killed by `stop` (registered with atexit by the script)."""

    def __init__(self, work):
        self.work = work
        self.started = []

    def start(self, name, argv):
        out = open(os.path.join(self.work, f"{name}.log"), "wb")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started.append(p)
        return p

    def stop(self):
        for p in self.started:
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass


def callgrind_control(pid, flag):
    """`callgrind_control -z` (zero the counters) or `-d` (dump) on process `pid`."""
    subprocess.run(["callgrind_control", flag, str(pid)], capture_output=True, timeout=120, check=True)


def callgrind_total(out):
    """The instructions of the newest dump of callgrind's `out` file."""
    parts = sorted(glob.glob(out + ".*"), key=lambda f: int(f.rsplit(".", 1)[1]))
    for line in open(parts[-1]):
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"{parts[-1]}: no summary line")


def nginx_head(d):
    """The top of an nginx config for a benchmark: two workers, in the foreground,
    as this user, its pid and error log in `d`; the caller's `http` block follows."""
    return f"""worker_processes 2;
daemon off;
user {pwd.getpwuid(os.getuid()).pw_name};
pid {d}/nginx.pid;
error_log {d}/nginx-error.log warn;
events {{ worker_connections 4096; }}
"""
