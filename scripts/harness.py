"""What the load scripts (load-compare.py, hit-cost.py, disk-compare.py) share: a
free loopback port, a bounded wait for a server they started to listen, and the top
of an nginx config. Standard library only."""

import os
import pwd
import socket
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
