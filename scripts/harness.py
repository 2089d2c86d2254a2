"""What the load scripts (load-compare.py, hit-cost.py, miss-cost.py,
disk-compare.py, pgo-train.py) share: a free loopback port, the children they start
and stop, a bounded wait for a server to listen, callgrind's controls, and the top
of an nginx config. Standard library only."""

import atexit
import glob
import os
import pwd
import signal
import socket
import subprocess
import sys
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

    def start(self, name, argv, env=None):
        out = open(os.path.join(self.work, f"{name}.log"), "wb")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=None if env is None else {**os.environ, **env})
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


def script_children(work):
    """The `Children` of a script working in `work`: stopped when it exits, and on
    SIGINT or SIGTERM (then the script exits with 128 + the signal)."""
    children = Children(work)
    atexit.register(children.stop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _f: (children.stop(), sys.exit(128 + s)))
    return children


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


def nginx_head(d, single=False):
    """The top of an nginx config for a benchmark: two workers (`single`: one
    process, no master), in the foreground, as this user, its pid and error log in
    `d`; the caller's `http` block follows."""
    workers = "master_process off;\nworker_processes 1;" if single else "worker_processes 2;"
    return f"""{workers}
daemon off;
user {pwd.getpwuid(os.getuid()).pw_name};
pid {d}/nginx.pid;
error_log {d}/nginx-error.log warn;
events {{ worker_connections 4096; }}
"""


def nginx_proxy_cache(path, port, sim_port, cache_dir, upstream_token, cache_404=False, single=False):
    """nginx at its best for this load: the cache on tmpfs (`cache_dir`), sendfile,
    no access log, keep-alive to the upstream and from the clients with no cap on
    the requests per connection (its default of 1,000 makes wrk reconnect). It
    caches the 200s only, so a 404 passes through; `cache_404` keeps the 404s 30 s
    as mdproxy does (`freshness.negative_secs`), the line of nginx's own example
    for `proxy_cache_valid`: the same job, for a like-for-like 404 row. `single`:
    one process, no master (as callgrind counts it). The load scripts' nginx in
    front of the simulator, authorised with `upstream_token`."""
    d = os.path.dirname(path)
    keep_404 = "\n      proxy_cache_valid 404 30s;" if cache_404 else ""
    with open(path, "w") as f:
        f.write(
            nginx_head(d, single)
            + f"""http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  proxy_cache_path {cache_dir} levels=1:2 keys_zone=md:16m max_size=256m inactive=1h use_temp_path=off;
  upstream sim {{ server 127.0.0.1:{sim_port}; keepalive 64; keepalive_requests 10000000; keepalive_timeout 300s; }}
  # Stock gzip: compressed per response (nginx's proxy_cache stores the identity
  # body), level 1 (the default); same minimum length as mdproxy's.
  gzip on;
  gzip_types application/json;
  gzip_min_length 1024;
  gzip_vary on;
  server {{
    listen 127.0.0.1:{port};
    location /api/v1/ {{
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "Bearer {upstream_token}";
      proxy_set_header Accept-Encoding "";
      proxy_cache md;
      proxy_cache_key $uri$is_args$args;
      proxy_cache_valid 200 1h;{keep_404}
      proxy_ignore_headers Cache-Control Expires Set-Cookie X-Accel-Expires;
      proxy_cache_lock on;
      add_header X-Cache $upstream_cache_status;
    }}
  }}
}}
"""
        )
