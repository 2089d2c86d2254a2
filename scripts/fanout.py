#!/usr/bin/env python3
"""Quote-stream fan-out at scale (issue 11, goal 3), driven by scripts/fanout.sh.

`run` opens N raw-socket SSE subscribers against one server (mdproxy's quote stream,
or nchan's EventSource location), waits until every one has its first event, then
for WINDOW seconds records when each subscriber received each tick, and the server's
resident memory. `table` prints the results file as one table.

Arrival times are the kernel's receive timestamps (SO_TIMESTAMPNS on every socket):
the moment the server's bytes reached the subscriber's socket, not the moment this
driver got round to reading them, so the driver's own pace does not enter the
spread (it still shares the CPU with the server; its CPU time and how late it read
are reported). A read that carries two ticks at once has one timestamp, the later
packet's, given to both: right when the server wrote them together (a late
subscriber), late for the first one when the driver fell behind; such reads are
counted ("coalesced").

The driver runs at the lowest priority (`--driver-nice 19` from scripts/fanout.sh):
real subscribers are on other machines and take none of the server's CPU, while
this one shares two cores with it. At nice 19 it reads with the CPU the server
leaves, so the server is not slowed by its own audience (the bytes' arrival times
are the kernel's, and do not depend on when the driver reads them). Nice 0 gives
the old, equal-priority rig.

That holds while the bytes fit the receiver's window. An HTTP/2 connection carries
its streams' events, about 200 KB a tick for 100 subscribers, and the kernel sizes
its window by how fast the driver has been reading, which at nice 19 is late: the
rest of a tick waited in the server's socket until the driver read, and the spread
counted the driver's pace. So each HTTP/2 connection gets a receive buffer of its
own (`--rcvbuf`, 4 MiB: room for several ticks), as a subscriber that reads
promptly on a machine of its own has by autotuning. An HTTP/1.1 subscriber's 2 KB a
tick never fills the default window, so its socket keeps the kernel's autotuning.

Arrivals are recorded from LEAD seconds before the window, and a tick counts only
when its first arrival is inside it: a tick whose fan-out straddles the window's start
is left out. (Before, such a tick looked as if the subscribers that got it before
the window had got it only with the next tick, a spread of about one second.)

A subscriber "has" tick k when it has received k or any later tick: mdproxy
collapses pending updates, so a late subscriber may skip straight to k+1, which
carries k's news. The spread of tick k is the time from its first arrival anywhere
to the moment the last subscriber has it.

Standard library only. Not part of `cargo test`."""

import argparse
import array
import bisect
import errno
import http.client
import json
import re
import multiprocessing
import os
import random
import resource
import select
import socket
import struct
import threading
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
SOURCES = 4  # loopback source addresses, 127.0.0.1 to 127.0.0.4
CMSG_TS = socket.CMSG_SPACE(16)
READ_SIZE = 65536
LEAD = 2.0  # seconds of arrivals kept before the window (more than one tick)


# --------------------------------------------------------------------------- memory


def _status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_secs(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def _steal():
    """(steal, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return fields[7] if len(fields) > 7 else 0, sum(fields[:8])


def server_pids(pid, kind):
    """The processes holding the subscribers: mdproxy itself, or nginx's workers."""
    if kind != "nchan":
        return [pid]
    workers = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            workers.append(int(entry))
    return sorted(workers)


def memory(servers, kind):
    """(RSS, PSS, CPU seconds) summed over the server's processes (nginx: workers; the
    master holds no subscriber; mdproxy: each node of the fleet)."""
    pids = [p for pid in servers for p in server_pids(pid, kind)]
    return (
        sum(_status_kib(p, "VmRSS:") for p in pids),
        sum(_pss_kib(p) for p in pids),
        sum(_cpu_secs(p) for p in pids),
    )


class Busy(threading.Thread):
    """The server's CPU time (every thread of its processes, from schedstat, in ns)
    every millisecond from `start` to `end` (CLOCK_REALTIME): when in each tick the
    server last worked, so a spread can be split into the server's part and what
    came after its last work (bytes in its socket queues, waiting for the
    receiving side)."""

    SLOT = 0.001
    BUSY_NS = 300_000  # a slot in which the server ran 0.3 ms or more is busy

    def __init__(self, servers, kind, start, end):
        super().__init__(daemon=True)
        self.start_at, self.end_at = start, end
        self.pids = [p for pid in servers for p in server_pids(pid, kind)]
        self.slots = []  # (end of the slot, CPU ns in it)

    def _now_ns(self):
        total = 0
        for pid in self.pids:
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        total += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass
        return total

    def run(self):
        while time.time() < self.start_at:
            time.sleep(0.01)
        before = self._now_ns()
        while time.time() < self.end_at:
            time.sleep(self.SLOT)
            now = self._now_ns()
            self.slots.append((time.time(), now - before))
            before = now

    def last_busy(self, lo, hi):
        """The end of the last busy slot in [lo, hi], or None."""
        busy = [t for t, ns in self.slots if lo <= t <= hi and ns >= self.BUSY_NS]
        return busy[-1] if busy else None


# --------------------------------------------------------------------------- HTTP/2

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_WINDOW = 2**31 - 1  # granted once: a run's events stay far below it


def h2_frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_str(text):
    raw = text.encode()
    return hpack_int(len(raw), 7) + raw


def h2_request(head):
    """An HTTP/1.1 request head (the driver's template, filled in) as an HPACK header
    block: GET and http from the static table, the rest literal, never indexed."""
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    assert method == "GET", method
    block = bytes([0x82, 0x86]) + b"\x04" + hpack_str(path)  # :method GET, :scheme http, :path
    for line in lines[1:]:
        if not line:
            continue
        name, value = line.split(":", 1)
        name, value = name.strip().lower(), value.strip()
        if name == "host":
            block += b"\x01" + hpack_str(value)  # :authority
        else:
            block += b"\x00" + hpack_str(name) + hpack_str(value)
    return block


class Conn:
    """One HTTP/2 connection carrying several subscribers, one stream each."""
    __slots__ = ("sock", "state", "inbuf", "streams", "hello")

    def __init__(self, sock):
        self.sock = sock
        self.state = "connecting"
        self.inbuf = b""
        self.streams = {}  # stream id -> Sub
        self.hello = b""  # preface, settings and every stream's HEADERS, until sent


# --------------------------------------------------------------------------- driver


class Sub:
    __slots__ = ("sock", "node", "state", "tail", "last_id", "status", "keys", "times")

    def __init__(self, sock, node=0):
        self.sock = sock
        # The fleet's node it streams from: each node numbers its own ticks, so a
        # tick is (node, id) and its spread is over that node's subscribers.
        self.node = node
        self.state = "connecting"  # -> sent -> streaming (first event) | failed | closed
        self.tail = b""
        self.last_id = None
        self.status = None
        self.keys = []  # tick ids received in the window, as sortable tuples
        self.times = array.array("d")  # and when


def driver(conn, args, first, count):
    """One driver process: subscribers first..first+count-1. Talks to the parent over
    `conn`: sends ("ready", ...) once every subscriber streams (or the deadline
    passes), gets ("window", t0, t1), sends ("result", ...) after t1 + grace, gets
    ("close",)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.driver_nice:
        os.nice(args.driver_nice)
    codes = []
    if args.codes_file:
        with open(args.codes_file) as f:
            codes = [line.strip() for line in f if line.strip()]
    ep = select.epoll()
    ep.register(conn.fileno(), select.EPOLLIN)
    subs = {}  # fd -> Sub, or Conn over HTTP/2
    h2subs = []  # every subscriber of every Conn
    if args.h2:
        pending = [(i, min(args.h2, first + count - i)) for i in range(first, first + count, args.h2)]
    else:
        pending = list(range(first, first + count))
    pending.reverse()
    rate = args.connect_rate / max(1, args.processes)
    started = time.monotonic()
    opened = 0
    deadline = None
    ready_sent = False
    window = None  # (t0, t1) in CLOCK_REALTIME seconds
    coalesced = 0
    window_bytes = 0
    window_events = 0
    cpu0 = None
    statuses = {}
    failed = 0
    lags = array.array("d")  # wall-clock read time minus kernel arrival, in the window

    def request_for(i):
        if codes:
            rnd = random.Random(i)
            mine = ",".join(rnd.sample(codes, args.codes))
        else:
            mine = ""
        return args.request.replace("{codes}", mine).replace("\\r\\n", "\r\n").encode()

    def connect(i, subscribers):
        """A socket connecting for subscriber i (and the next ones on an HTTP/2
        connection), and its node; None when the connect failed at once."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.setblocking(False)
        # Subscriber i goes to node i mod nodes (one port unless a fleet is measured),
        # from one of several loopback addresses: one source address has fewer
        # ephemeral ports (about 28,000) than 30,000 subscribers of one port need.
        # (Over HTTP/2, connection i / streams a connection goes to that node mod nodes.)
        node = (i // max(1, args.h2)) % len(args.ports)
        if subscribers > 1 and args.rcvbuf:
            # Before the connect, so the window scale offered can carry it.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
        s.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        s.bind((f"127.0.0.{1 + i % SOURCES}", 0))
        err = s.connect_ex((args.host, args.ports[node]))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            for _ in range(subscribers):
                note(f"connect {errno.errorcode.get(err, err)}")
            return None, node
        return s, node

    def open_conn(first_sub, n_subs):
        """HTTP/2: one connection for subscribers first_sub .. first_sub + n_subs - 1."""
        s, node = connect(first_sub, n_subs)
        if s is None:
            return
        c = Conn(s)
        # No push; every stream's window, and the connection's, as large as allowed.
        hello = H2_PREFACE + h2_frame(4, 0, 0, struct.pack(">HI", 2, 0) + struct.pack(">HI", 4, H2_WINDOW))
        hello += h2_frame(8, 0, 0, struct.pack(">I", H2_WINDOW - 65535))
        for k in range(n_subs):
            sub = Sub(s, node)
            stream = 1 + 2 * k
            c.streams[stream] = sub
            h2subs.append(sub)
            # HEADERS with END_STREAM | END_HEADERS.
            hello += h2_frame(1, 0x5, stream, h2_request(request_for(first_sub + k)))
        c.hello = hello
        subs[s.fileno()] = c
        ep.register(s.fileno(), select.EPOLLOUT)

    def conn_failed(fd, c, why):
        """An HTTP/2 connection failed: so did each of its streams not failed yet."""
        for sub in c.streams.values():
            if sub.state not in ("failed", "closed"):
                note(why)
                sub.state = "failed"
        drop(fd, c.sock)

    def on_frames(fd, c, data, ts):
        """Parses the frames read; each DATA frame's bytes go to its stream's subscriber."""
        c.inbuf += data
        buf, pos, replies = c.inbuf, 0, b""
        while len(buf) - pos >= 9:
            length = int.from_bytes(buf[pos:pos + 3], "big")
            if len(buf) - pos < 9 + length:
                break
            kind, flags = buf[pos + 3], buf[pos + 4]
            stream = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            payload = buf[pos + 9:pos + 9 + length]
            pos += 9 + length
            sub = c.streams.get(stream)
            if kind in (0, 1) and flags & 0x8:  # PADDED
                payload = payload[1:len(payload) - payload[0]]
            if kind == 0 and sub is not None and sub.state not in ("failed", "closed"):
                why = on_data(sub, payload, ts)
                if why:
                    note(why)
                    sub.state = "failed"
            elif kind == 1 and sub is not None:
                if flags & 0x20:  # PRIORITY
                    payload = payload[5:]
                # hyper answers 200 as the static table's entry 8.
                if payload[:1] != b"\x88":
                    note("status other than 200")
                    sub.state = "failed"
                else:
                    sub.state = "headers"
            elif kind == 3 and sub is not None and sub.state not in ("failed", "closed"):
                note("stream reset")
                sub.state = "failed"
            elif kind == 4 and not flags & 0x1:
                replies += h2_frame(4, 0x1, 0)
            elif kind == 6 and not flags & 0x1:
                replies += h2_frame(6, 0x1, 0, payload)
            elif kind == 7:
                conn_failed(fd, c, "goaway")
                return
        c.inbuf = buf[pos:]
        if replies:
            try:
                c.sock.send(replies)
            except OSError as e:
                conn_failed(fd, c, f"send {type(e).__name__}")

    def open_one(i):
        s, node = connect(i, 1)
        if s is None:
            return
        sub = Sub(s, node)
        sub.tail = request_for(i)  # the request, until sent
        subs[s.fileno()] = sub
        ep.register(s.fileno(), select.EPOLLOUT)

    def note(why):
        nonlocal failed
        statuses[why] = statuses.get(why, 0) + 1
        failed += 1

    def fail(fd, sub, why):
        note(why)
        sub.state = "failed"
        drop(fd, sub.sock)

    def drop(fd, sock):
        del subs[fd]
        try:
            ep.unregister(fd)
        except OSError:
            pass
        sock.close()

    def on_data(sub, data, ts):
        nonlocal coalesced, window_bytes, window_events
        buf = sub.tail + data if sub.tail else data
        if sub.state == "sent":
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                sub.tail = buf[-4096:]
                return
            line = buf[: buf.find(b"\r\n")]
            parts = line.split(b" ", 2)
            sub.status = parts[1].decode() if len(parts) > 1 else "?"
            if sub.status != "200":
                return "status " + sub.status
            sub.state = "headers"
            buf = buf[head_end:]
        in_window = window is not None and window[0] <= ts <= window[1] + args.grace
        # Arrivals are kept from a lead before the window: a tick whose delivery
        # straddles the window's start must be seen to have begun before it (and be
        # left out), not be taken for a tick that most subscribers got a tick late.
        recorded = window is not None and window[0] - LEAD <= ts <= window[1] + args.grace
        if in_window:
            window_bytes += len(data)
        pos = 0
        found = []
        incomplete = None
        while True:
            i = buf.find(b"\nid: ", pos)
            if i < 0:
                break
            j = buf.find(b"\n", i + 5)
            if j < 0:
                incomplete = i
                break
            found.append(buf[i + 5 : j].strip())
            pos = j
        if incomplete is not None:
            sub.tail = buf[incomplete:]
        else:
            sub.tail = buf[max(pos, len(buf) - 4) :]
        if not found:
            return None
        sub.state = "streaming"
        new = []
        prev = sub.last_id
        for t in found:
            if t != prev:  # several events of one tick (more changes than pz) count once
                new.append(t)
                prev = t
        sub.last_id = found[-1]
        if not new or not recorded:
            return None
        if len(new) > 1 and in_window:
            coalesced += len(new) - 1
        for tick in new:
            sub.keys.append((sub.node,) + id_key(tick))
            sub.times.append(ts)
        if in_window:
            window_events += len(new)
        return None

    def every_sub():
        return h2subs if args.h2 else subs.values()

    def receive(sock, failed):
        """(bytes, kernel arrival time) of one read; None when nothing was there or
        the socket failed (then `failed(why)` was called)."""
        try:
            data, anc, _flags, _addr = sock.recvmsg(READ_SIZE, CMSG_TS)
        except BlockingIOError:
            return None
        except OSError as e:
            failed(f"recv {type(e).__name__}")
            return None
        if not data:
            failed("closed by server")
            return None
        ts = None
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                sec, ns = struct.unpack("qq", raw[:16])
                ts = sec + ns / 1e9
        if ts is None:
            ts = time.time()
        elif window is not None and window[0] <= ts <= window[1]:
            lags.append(time.time() - ts)
        return data, ts

    def on_conn_event(fd, c):
        if c.state == "connecting":
            err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                conn_failed(fd, c, f"connect {errno.errorcode.get(err, err)}")
                return
            try:
                c.sock.setblocking(True)  # every stream's HEADERS at once
                c.sock.sendall(c.hello)
                c.sock.setblocking(False)
            except OSError as e:
                conn_failed(fd, c, f"send {type(e).__name__}")
                return
            c.hello = b""
            c.state = "open"
            for sub in c.streams.values():
                sub.state = "sent"
            ep.modify(fd, select.EPOLLIN)
            return
        got = receive(c.sock, lambda why: conn_failed(fd, c, why))
        if got is not None:
            on_frames(fd, c, *got)

    while True:
        now = time.monotonic()
        # Open sockets at the connect rate.
        if pending:
            due = int((now - started) * rate) + 1 - opened
            while due > 0 and pending:
                if args.h2:
                    first_sub, n_subs = pending.pop()
                    open_conn(first_sub, n_subs)
                    opened += n_subs
                    due -= n_subs
                else:
                    open_one(pending.pop())
                    opened += 1
                    due -= 1
            if not pending:
                deadline = now + args.ready_timeout
        timeout = 0.01 if pending else 0.2
        events = ep.poll(timeout)
        for fd, ev in events:
            if fd == conn.fileno():
                msg = conn.recv()
                if msg[0] == "window":
                    window = (msg[1], msg[2])
                    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
                elif msg[0] == "close":
                    for sub in subs.values():
                        if isinstance(sub, Conn) or sub.state not in ("failed", "closed"):
                            sub.sock.close()
                    conn.close()
                    return
                continue
            sub = subs.get(fd)
            if isinstance(sub, Conn):
                on_conn_event(fd, sub)
                continue
            if sub is None or sub.state in ("failed", "closed"):
                continue
            if sub.state == "connecting":
                err = sub.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    fail(fd, sub, f"connect {errno.errorcode.get(err, err)}")
                    continue
                try:
                    sub.sock.send(sub.tail)  # a few hundred bytes: one send
                except OSError as e:
                    fail(fd, sub, f"send {type(e).__name__}")
                    continue
                sub.tail = b""
                sub.state = "sent"
                ep.modify(fd, select.EPOLLIN)
                continue
            got = receive(sub.sock, lambda why: fail(fd, sub, why))  # noqa: B023
            if got is None:
                continue
            why = on_data(sub, *got)
            if why:
                fail(fd, sub, why)
        if args.lazy_ms:
            time.sleep(args.lazy_ms / 1000)
        now = time.monotonic()
        if not ready_sent and not pending:
            streaming = sum(1 for s in every_sub() if s.state == "streaming")
            if streaming + failed >= count or now > deadline:
                conn.send(("ready", streaming, dict(statuses), now - started))
                ready_sent = True
        if window is not None and time.time() > window[1] + args.grace and cpu0 is not None:
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            alive = [s for s in every_sub() if s.state == "streaming"]
            conn.send(
                (
                    "result",
                    None,
                    [(s.node, s.keys, s.times.tolist()) for s in alive],
                    count - len(alive),
                    dict(statuses),
                    coalesced,
                    window_bytes,
                    window_events,
                    (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
                    lags.tolist(),
                )
            )
            cpu0 = None  # sent once; keep the sockets open until told to close


def id_key(raw):
    """A tick id as a sortable tuple: mdproxy's `id: 42`, nchan's `id: 1732291234:0`."""
    return tuple(int(n) for n in re.findall(rb"\d+", raw))


# --------------------------------------------------------------------------- publisher


def publisher(args, stop, sent):
    """nchan's publisher: once a second, the quotes of `--publish-codes` fresh from the
    simulator (the same rows mdproxy's stream carries), POSTed to nchan as one message."""
    sim_host, sim_port, sim_path = _split(args.publish_source)
    pub_host, pub_port, pub_path = _split(args.publish_url)
    sim = http.client.HTTPConnection(sim_host, sim_port, timeout=5)
    pub = http.client.HTTPConnection(pub_host, pub_port, timeout=5)
    nxt = time.monotonic()
    while not stop.is_set():
        try:
            sim.request("GET", sim_path, headers={"Authorization": f"Bearer {args.publish_token}"})
            body = json.loads(sim.getresponse().read())
            rows = body["data"]["diff"] if isinstance(body.get("data"), dict) else body["data"]
            message = json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode()
            pub.request("POST", pub_path, body=message, headers={"Content-Type": "application/json"})
            pub.getresponse().read()
            sent.append(len(message))
        except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
            print(f"publisher: {type(e).__name__}: {e}", flush=True)
            sim.close()
            pub.close()
        nxt += 1.0
        stop.wait(max(0.0, nxt - time.monotonic()))


def _split(url):
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    return host, int(port or 80), "/" + path


# --------------------------------------------------------------------------- run


def pct(sorted_values, p):
    if not sorted_values:
        return None
    i = round((len(sorted_values) - 1) * p)
    return sorted_values[min(i, len(sorted_values) - 1)]


def run(args):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    procs = max(1, -(-args.n // args.per_process))
    args.processes = procs
    time.sleep(1)
    base_rss, base_pss, _ = memory(args.pids, args.server)
    shares = [args.n // procs + (1 if k < args.n % procs else 0) for k in range(procs)]
    ctx = multiprocessing.get_context("fork")
    workers = []
    first = 0
    stop_pub = threading.Event()
    sent = []
    pub_thread = None
    if args.publish_url:
        pub_thread = threading.Thread(target=publisher, args=(args, stop_pub, sent), daemon=True)
        pub_thread.start()
    t_start = time.monotonic()
    for share in shares:
        parent, child = ctx.Pipe()
        p = ctx.Process(target=driver, args=(child, args, first, share), daemon=True)
        p.start()
        workers.append((p, parent))
        first += share
    streaming = 0
    statuses = {}
    for _, parent in workers:
        msg = parent.recv()
        streaming += msg[1]
        for k, v in msg[2].items():
            statuses[k] = statuses.get(k, 0) + v
    connected_secs = time.monotonic() - t_start
    print(f"  {streaming}/{args.n} subscribers streaming after {connected_secs:.1f} s"
          + (f"; failures {statuses}" if statuses else ""), flush=True)
    time.sleep(args.settle)
    t0 = time.time() + LEAD + 0.5  # the drivers record from LEAD before it
    t1 = t0 + args.window
    for _, parent in workers:
        parent.send(("window", t0, t1))
    busy = None
    if args.server_busy:
        busy = Busy(args.pids, args.server, t0 - 0.5, t1 + args.grace)
        busy.start()
    # Memory and CPU while the subscribers stream.
    samples = []
    while time.time() < t0:
        time.sleep(0.05)
    _, _, cpu_start = memory(args.pids, args.server)
    steal0 = _steal()
    sampled_at = []
    while time.time() < t1:
        sampled_at.append(time.time())
        rss, pss, _ = memory(args.pids, args.server)
        samples.append((rss, pss))
        time.sleep(1)
    _, _, cpu_end = memory(args.pids, args.server)
    steal1 = _steal()
    per_sub = []
    not_streaming = 0
    coalesced = 0
    window_bytes = 0
    window_events = 0
    driver_cpu = 0.0
    lags = []
    for _, parent in workers:
        msg = parent.recv()
        per_sub.extend(msg[2])
        not_streaming += msg[3]
        for k, v in msg[4].items():
            statuses[k] = statuses.get(k, 0) + v
        coalesced += msg[5]
        window_bytes += msg[6]
        window_events += msg[7]
        driver_cpu += msg[8]
        lags.extend(msg[9])
    for _, parent in workers:
        parent.send(("close",))
    for p, _ in workers:
        p.join(10)
    if busy is not None:
        busy.join()
    stop_pub.set()
    time.sleep(args.after)
    after_rss, after_pss, _ = memory(args.pids, args.server)

    # Ticks whose first arrival falls in the window; for each, when every subscriber
    # had it (or a later one). One not reached by the end of the grace period
    # counts as missed, and the spread is at least the time to that end.
    first_arrival = {}
    for _, keys, times in per_sub:
        for k, t in zip(keys, times):
            if t < first_arrival.get(k, float("inf")):
                first_arrival[k] = t
    ticks = sorted(k for k, t in first_arrival.items() if t0 <= t <= t1)
    spreads = []
    lateness = []
    deliveries = []
    missed = 0
    complete = 0  # ticks every subscriber of their node had
    end = t1 + args.grace
    outliers = []  # ticks with a spread over 0.5 s: which, and how many subscribers were late
    server_parts = []  # per tick: first arrival to the server's last busy slot, at most the spread
    timeline = []  # every tick in order: when it began (s into the window) and its spread
    for k in ticks:
        first_at = first_arrival[k]
        last = first_at
        reached = 0
        late = 0
        ours = [(keys, times) for node, keys, times in per_sub if node == k[0]]
        for keys, times in ours:
            i = bisect.bisect_left(keys, k)
            if i < len(keys) and times[i] <= end:
                last = max(last, times[i])
                lateness.append(times[i] - first_at)
                reached += 1
                late += times[i] - first_at > 0.5
            else:
                last = end
        missed += len(ours) - reached
        complete += reached >= len(ours) > 0
        spreads.append(last - first_at)
        if busy is not None:
            done = busy.last_busy(first_at - 0.2, last + 0.2)
            server_parts.append(min(max(0.0, (done or first_at) - first_at), last - first_at))
        timeline.append([round(first_at - t0, 3), round((last - first_at) * 1000, 1)])
        deliveries.append(reached)
        if last - first_at > 0.5:
            outliers.append({"tick": list(k), "at_s": round(first_at - t0, 2),
                             "spread_ms": round((last - first_at) * 1000, 1), "late_subscribers": late})
    spreads_in_order = list(spreads)
    spreads.sort()
    lateness.sort()
    lags.sort()
    held_rss = sum(s[0] for s in samples) / max(1, len(samples))
    held_pss = sum(s[1] for s in samples) / max(1, len(samples))
    starved = sum(1 for _, _, times in per_sub if not any(t0 <= t <= t1 for t in times)) + (args.n - len(per_sub))
    ms = lambda v: None if v is None else round(v * 1000, 1)  # noqa: E731
    result = {
        "server": args.server,
        "n": args.n,
        # Nodes of one fleet the subscribers were spread over (their memory summed).
        "nodes": len(args.ports),
        # HTTP/2: subscribers' streams a connection (0: HTTP/1.1, one each).
        "h2_streams_per_connection": args.h2,
        "codes_per_subscriber": args.codes if args.server == "mdproxy" else None,
        "window_secs": args.window,
        "window_start_unix": t0,
        "driver_processes": procs,
        "streaming": streaming,
        "connect_secs": round(connected_secs, 1),
        "failures": statuses,
        "ticks": len(spreads),
        "ticks_by_node": [sum(1 for k in ticks if k[0] == node) for node in range(len(args.ports))],
        "spread_ms": {"p50": ms(pct(spreads, 0.5)), "p99": ms(pct(spreads, 0.99)), "max": ms(spreads[-1] if spreads else None)},
        "spreads_ms": [ms(v) for v in spreads],  # every tick's, sorted
        "outlier_ticks": outliers,
        "timeline": timeline,
        "memory_sampled_at_s": [round(t - t0, 3) for t in sampled_at],
        # CPU time the hypervisor gave to other guests, as a share of the window:
        # ticks delayed by it say nothing about the server.
        "steal_pct": round(100 * (steal1[0] - steal0[0]) / max(1, steal1[1] - steal0[1]), 1),
        "delivery_after_first_ms": {"p50": ms(pct(lateness, 0.5)), "p99": ms(pct(lateness, 0.99))},
        "deliveries_per_tick_mean": round(sum(deliveries) / max(1, len(deliveries)), 1),
        "complete_ticks": complete,
        "missed_deliveries": missed,
        "starved": starved,
        "not_streaming_at_end": not_streaming,
        "coalesced_reads": coalesced,
        "event_bytes_mean": round(window_bytes / max(1, window_events)),
        "published_message_bytes": round(sum(sent) / len(sent)) if sent else None,
        "rss_kib": {"baseline": base_rss, "held_mean": round(held_rss), "after_close": after_rss},
        "pss_kib": {"baseline": base_pss, "held_mean": round(held_pss), "after_close": after_pss},
        "kib_per_subscriber_rss": round((held_rss - base_rss) / args.n, 2),
        "kib_per_subscriber_pss": round((held_pss - base_pss) / args.n, 2),
        "server_cpu_per_sec": round((cpu_end - cpu_start) / args.window, 3),
        # The drivers count their CPU from the window message, LEAD + 0.5 s before t0.
        "driver_cpu_per_sec": round(driver_cpu / (LEAD + 0.5 + args.window + args.grace), 3),
        # How long after the kernel received the bytes the driver read them: what a
        # driver timing its own reads would have added to each arrival.
        "driver_read_lag_ms": {"p50": ms(pct(lags, 0.5)), "p99": ms(pct(lags, 0.99))},
        # With --server-busy: per tick, the first arrival to the server's last busy
        # millisecond (its part of the spread), and the rest of the spread, when the
        # server no longer ran and its bytes waited in socket queues for the receiving
        # side (one driver on this machine, not subscribers on machines of their own).
        "server_part_ms": None if busy is None else {
            "p50": ms(pct(sorted(server_parts), 0.5)), "p99": ms(pct(sorted(server_parts), 0.99)),
            "max": ms(max(server_parts, default=None))},
        "after_server_ms": None if busy is None else {
            "p50": ms(pct(sorted(sp - pp for sp, pp in zip(spreads_in_order, server_parts)), 0.5)),
            "max": ms(max((sp - pp for sp, pp in zip(spreads_in_order, server_parts)), default=None))},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg": open("/proc/loadavg").read().split()[:3],
    }
    print("  " + json.dumps(result), flush=True)
    results = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
    results.append(result)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


# --------------------------------------------------------------------------- table


def table(args):
    with open(args.results) as f:
        results = json.load(f)
    fmt = lambda v: "-" if v is None else f"{v:g}"  # noqa: E731
    head = ("server", "N", "spread p50 ms", "p99 ms", "max ms", "starved", "KiB/sub RSS", "KiB/sub PSS",
            "ticks", "deliv/tick", "event B", "server CPU", "driver CPU")
    rows = [head]
    for r in results:
        nodes = r.get("nodes", 1)
        rows.append((
            r["server"] + (f" ({nodes} nodes)" if nodes > 1 else "")
            + (f" (h2, {r['h2_streams_per_connection']} a conn)" if r.get("h2_streams_per_connection") else ""),
            str(r["n"]), fmt(r["spread_ms"]["p50"]), fmt(r["spread_ms"]["p99"]), fmt(r["spread_ms"]["max"]),
            str(r["starved"]), fmt(r["kib_per_subscriber_rss"]), fmt(r["kib_per_subscriber_pss"]),
            str(r["ticks"]), fmt(r["deliveries_per_tick_mean"]), str(r["event_bytes_mean"]),
            f"{r['server_cpu_per_sec']:.2f}", f"{r['driver_cpu_per_sec']:.2f}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for k, row in enumerate(rows):
        print("| " + " | ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


# --------------------------------------------------------------------------- heaptrack

UNITS = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9}
BORING = ("alloc::", "bytes::", "core::", "std::", "0x", "_RNv", "__rust", "<alloc::", "<core::",
          "hashbrown::", "tokio::runtime::", "<tokio::", "<futures_util::", "futures_util::", "<hyper_util::")


def _size(text):
    text = text.strip()
    unit = text[-1] if text[-1] in UNITS else "B"
    return float(text.rstrip("BKMG")) * UNITS[unit]


def _demangle(name):
    for a, b in (("$LT$", "<"), ("$GT$", ">"), ("$C$", ","), ("$u20$", " "), ("$RF$", "&"), ("$u7b$", "{"),
                 ("$u7d$", "}"), ("$BP$", "*"), ("..", "::")):
        name = name.replace(a, b)
    return re.sub(r"::h[0-9a-f]{16}$", "", name)


def heap(args):
    """The biggest live allocation sites at mdproxy's heap peak (heaptrack_print's
    peak consumers), each with its size per subscriber and the first frames that
    name who asked for it."""
    import subprocess

    out = subprocess.run(
        ["heaptrack_print", "-f", args.file, "--print-peaks", "1", "--print-allocators", "0",
         "--print-temporary", "0", "--print-leaks", "0", "--peak-limit", "30", "--sub-peak-limit", "30"],
        capture_output=True, text=True, check=True,
    ).stdout
    sites = []
    current = None
    allocator = None  # the function that called the allocator, above each group of stacks
    expect_allocator = False
    for line in out.splitlines():
        if re.match(r"^\S+ peak memory consumed over \d+ calls from$", line):
            expect_allocator = True
            current = None
            continue
        if expect_allocator:
            allocator = _demangle(line.strip())
            expect_allocator = False
            continue
        m = re.match(r"^\s{0,4}(\S+) consumed over (\d+) calls from:$", line)
        if m:
            current = [_size(m.group(1)), int(m.group(2)), [allocator]]
            sites.append(current)
            continue
        if re.match(r"^\S", line):
            current = None
            continue
        if current is not None and re.match(r"^    \S", line) and not line.strip().startswith(("in ", "at ")):
            current[2].append(_demangle(line.strip()))
    peak = re.search(r"peak heap memory consumption: (\S+)", out)
    print(f"heaptrack {args.file}: peak heap {peak.group(1) if peak else '?'} with {args.n} subscribers; biggest sites:")
    seen = set()
    shown = 0
    for size, calls, frames in sorted(sites, key=lambda s: -s[0]):
        if shown >= args.top:
            break
        named = [f for f in frames if not f.startswith(BORING)][:3]
        key = (tuple(named), calls)
        if key in seen or size < args.min_bytes:
            continue
        seen.add(key)
        shown += 1
        print(f"  {size / 1024 / args.n:6.2f} KiB/subscriber  {size / 2**20:7.2f} MiB in {calls:6d} blocks of {size / max(1, calls):8.0f} B  "
              + " <- ".join(named))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--server", choices=["mdproxy", "nchan"], required=True)
    r.add_argument("--pid", required=True,
                   help="mdproxy's pid (comma-separated: the nodes of a fleet), or nginx's master")
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", required=True,
                   help="comma-separated: the nodes of a fleet, subscriber i on node i mod nodes")
    r.add_argument("--request", required=True, help="request head; {codes} is replaced, \\r\\n literal")
    r.add_argument("--n", type=int, required=True)
    r.add_argument("--codes-file")
    r.add_argument("--codes", type=int, default=5)
    r.add_argument("--window", type=float, default=30)
    r.add_argument("--grace", type=float, default=5, help="seconds after the window for its last ticks")
    r.add_argument("--settle", type=float, default=3, help="seconds between all streaming and the window")
    r.add_argument("--after", type=float, default=12, help="seconds after closing before the last RSS reading")
    r.add_argument("--connect-rate", type=float, default=3000, help="new connections per second, in all")
    r.add_argument("--ready-timeout", type=float, default=60)
    r.add_argument("--per-process", type=int, default=10000, help="subscribers per driver process")
    r.add_argument("--h2", type=int, default=0,
                   help="HTTP/2 (prior knowledge): this many subscribers' streams on each connection; 0: HTTP/1.1")
    r.add_argument("--driver-nice", type=int, default=0,
                   help="niceness of the driver processes (scripts/fanout.sh gives 19)")
    r.add_argument("--server-busy", action="store_true",
                   help="sample the server's CPU every millisecond: its part of each tick's spread")
    r.add_argument("--rcvbuf", type=int, default=4 << 20,
                   help="SO_RCVBUF of each HTTP/2 connection (0: the kernel's autotuning)")
    r.add_argument("--lazy-ms", type=float, default=5, help="pause between epoll rounds (batches reads)")
    r.add_argument("--publish-url")
    r.add_argument("--publish-source")
    r.add_argument("--publish-token", default="")
    r.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("results")
    h = sub.add_parser("heap")
    h.add_argument("file")
    h.add_argument("--n", type=int, required=True)
    h.add_argument("--min-bytes", type=float, default=100_000)
    h.add_argument("--top", type=int, default=8)
    args = p.parse_args()
    if args.cmd == "run":
        args.pids = [int(x) for x in args.pid.split(",")]
        args.ports = [int(x) for x in args.port.split(",")]
    {"run": run, "table": table, "heap": heap}[args.cmd](args)


if __name__ == "__main__":
    main()
