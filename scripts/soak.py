#!/usr/bin/env python3
"""Flood measurements of a running mdproxy (started by scripts/soak.sh): RSS under a
flood of distinct cold keys against cache.max_bytes, RSS cost of non-reading stream
subscribers, RSS under a flood of large K-lines asked in several codings, and a
normal client's latency during a slow-loris flood. Standard
library only; prints one line per figure. Not part of `cargo test`."""

import argparse
import asyncio
import resource
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def read_response(reader):
    """Reads one HTTP/1.1 response with Content-Length; returns the status."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def key_worker(host, port, token, keys, counts):
    reader, writer = await asyncio.open_connection(host, port)
    for key in keys:
        writer.write(
            f"GET /api/v1/news/headlines?keyword={key} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {token}\r\n\r\n".encode()
        )
        await writer.drain()
        status = await read_response(reader)
        counts[status] = counts.get(status, 0) + 1
    writer.close()


async def key_flood(args):
    keys = [f"soak{i}" for i in range(args.keys)]
    per = [keys[i :: args.connections] for i in range(args.connections)]
    counts = {}
    before = rss_kib(args.pid)
    started = time.monotonic()
    await asyncio.gather(
        *(key_worker(args.host, args.port, args.token, k, counts) for k in per)
    )
    elapsed = time.monotonic() - started
    after = rss_kib(args.pid)
    await asyncio.sleep(10)
    settled = rss_kib(args.pid)
    goal = 1.25 * args.max_bytes / 1024 + 64 * 1024
    print(f"key flood: {args.keys} distinct keys in {elapsed:.1f} s ({args.keys / elapsed:.0f} req/s), statuses {counts}")
    print(f"key flood: RSS before {before / 1024:.0f} MiB, after {after / 1024:.0f} MiB, 10 s later {settled / 1024:.0f} MiB")
    print(f"key flood: cache.max_bytes {args.max_bytes / 2**20:.0f} MiB; goal RSS <= {goal / 1024:.0f} MiB: {'met' if after <= goal else 'NOT met'} (ratio {after / goal:.2f})")


async def read_any_response(reader):
    """Reads one HTTP/1.1 response, sized or chunked; returns (status, body bytes)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lines = [l.lower() for l in head.split(b"\r\n")]
    if b"transfer-encoding: chunked" in lines:
        size = 0
        while True:
            chunk = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(chunk + 2)
            size += chunk
            if chunk == 0:
                return status, size
    length = next((int(l.split(b":", 1)[1]) for l in lines if l.startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    return status, length


async def coding_worker(host, port, token, asks, counts):
    reader, writer = await asyncio.open_connection(host, port)
    for code, coding in asks:
        writer.write(
            f"GET /api/v1/stock/kline?code={code}&period=day&from=1990-01-01 HTTP/1.1\r\nHost: x\r\n"
            f"Accept-Encoding: {coding}\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
        )
        await writer.drain()
        status, size = await read_any_response(reader)
        counts[status] = counts.get(status, 0) + 1
        if status == 200:
            counts["bytes"] = counts.get("bytes", 0) + size
    writer.close()


async def coding_flood(args):
    """Large K-lines (every trading day since 1990) of `--keys` candidate codes (those
    not listed answer a small 404), each asked in
    identity, gzip, br and zstd by `--connections` clients, twice over; RSS sampled
    every 0.2 s against 1.25 x max_bytes + 64 MiB."""
    half = args.keys // 2
    codes = [f"{c:06d}" for c in list(range(600000, 600000 + half)) + list(range(1, 1 + args.keys - half))]
    asks = [(code, coding) for _ in range(2) for code in codes for coding in ("identity", "gzip", "br", "zstd")]
    per = [asks[i :: args.connections] for i in range(args.connections)]
    counts = {}
    before = rss_kib(args.pid)
    samples = []
    done = asyncio.Event()

    async def sample():
        while not done.is_set():
            samples.append(rss_kib(args.pid))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    started = time.monotonic()
    await asyncio.gather(*(coding_worker(args.host, args.port, args.token, a, counts) for a in per))
    elapsed = time.monotonic() - started
    done.set()
    await sampler
    await asyncio.sleep(10)
    settled = rss_kib(args.pid)
    peak = max(samples + [before])
    goal = 1.25 * args.max_bytes / 1024 + 64 * 1024
    body = counts.pop("bytes", 0)
    print(f"codings: {len(asks)} K-lines of {len(codes)} codes in 4 codings by {args.connections} clients in {elapsed:.1f} s, statuses {counts}, {body / max(1, counts.get(200, 0)) / 1024:.0f} KiB an answer (200) on average, as sent")
    print(f"codings: RSS before {before / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, last sample {samples[-1] / 1024:.0f} MiB, 10 s later {settled / 1024:.0f} MiB")
    print(f"codings: cache.max_bytes {args.max_bytes / 2**20:.0f} MiB; goal RSS <= {goal / 1024:.0f} MiB: {'met' if peak <= goal else 'NOT met'} (ratio {peak / goal:.2f})")


async def silent_subscriber(host, port, token, source, codes):
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    writer.write(
        f"GET /api/v1/stock/indicator/realtime/sse?codes={codes} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    await writer.drain()
    return writer  # never read


async def subscribers(args):
    half = args.codes // 2
    codes = ",".join(
        f"{c:06d}" for c in list(range(600000, 600000 + half)) + list(range(1, 1 + args.codes - half))
    )
    # The baseline is the proxy with its quote hub in use: one subscriber reads its
    # snapshot and leaves first, so that what the hub keeps once (the board of these
    # codes, the upstream connection, the stream path's code pages) is not counted
    # as what the silent subscribers left behind.
    reader, writer = await asyncio.open_connection(args.host, args.port)
    writer.write(
        f"GET /api/v1/stock/indicator/realtime/sse?codes={codes} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {args.token}\r\n\r\n".encode()
    )
    await asyncio.wait_for(reader.readuntil(b"event: quote"), 10)
    writer.transport.abort()
    await asyncio.sleep(2)
    baseline = rss_kib(args.pid)
    writers = []
    for i in range(args.subscribers):
        source = f"127.0.{1 + i // 250}.{1 + i % 250}"
        writers.append(await silent_subscriber(args.host, args.port, args.token, source, codes))
    await asyncio.sleep(args.hold)
    held = rss_kib(args.pid)
    for w in writers:
        w.transport.abort()
    trajectory = []
    for _ in range(6):
        await asyncio.sleep(5)
        trajectory.append(rss_kib(args.pid))
    after = trajectory[-1]
    each = (held - baseline) / max(1, args.subscribers)
    print(f"subscribers: {args.subscribers} non-reading streams of {args.codes} codes, held {args.hold} s")
    print(f"subscribers: RSS baseline {baseline / 1024:.1f} MiB, held {held / 1024:.1f} MiB ({each:.1f} KiB each), 30 s after they left {after / 1024:.1f} MiB ({100 * (after - baseline) / baseline:+.0f} % of baseline)")
    print("subscribers: RSS every 5 s after they left: " + ", ".join(f"{r / 1024:.1f}" for r in trajectory) + " MiB")


async def slow_client(host, port, source, stop):
    try:
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    except OSError:
        return
    request = b"GET /api/v1/market/indices HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    i = 0
    try:
        while not stop.is_set() and i < len(request):
            writer.write(request[i : i + 1])
            await writer.drain()
            i += 1
            await asyncio.sleep(1)
    except (ConnectionError, OSError):
        pass
    writer.transport.abort()


async def timed_get(host, port, token, source):
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, local_addr=(source, 0)), 30
        )
        writer.write(
            f"GET /api/v1/market/indices HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
        )
        status = await asyncio.wait_for(read_response(reader), 30)
        writer.close()
    except Exception as e:  # noqa: BLE001 (a figure, whatever went wrong)
        status = type(e).__name__
    return status, time.monotonic() - started


async def slowloris(args):
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(slow_client(args.host, args.port, "127.0.0.1", stop))
        for _ in range(args.slow)
    ]
    await asyncio.sleep(3)
    samples = []
    for _ in range(10):
        samples.append(await timed_get(args.host, args.port, args.token, "127.0.0.2"))
        await asyncio.sleep(1)
    stop.set()
    await asyncio.gather(*tasks)
    worst = max(s[1] for s in samples)
    print(f"slowloris: {args.slow} slow connections from one address; a client from another: statuses {[s[0] for s in samples]}, worst {worst * 1000:.0f} ms")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["keys", "codings", "subscribers", "slowloris"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--max-bytes", type=int, default=64 * 2**20)
    p.add_argument("--subscribers", type=int, default=5_000)
    p.add_argument("--hold", type=int, default=20)
    p.add_argument("--codes", type=int, default=200)
    p.add_argument("--slow", type=int, default=2_000)
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    phase = {"keys": key_flood, "codings": coding_flood, "subscribers": subscribers, "slowloris": slowloris}[args.phase]
    asyncio.run(phase(args))


if __name__ == "__main__":
    main()
