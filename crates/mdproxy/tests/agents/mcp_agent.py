#!/usr/bin/env python3
"""An AI agent's side of MCP, with the official Python SDK (PyPI `mcp`): connects to
URL with KEY, lists the tools, calls each tool named in CALLS (a JSON file of
{tool: arguments}), then, given a resource URI as a fourth argument, subscribes to
it and waits (20 s at most) for the server to say it was updated. Prints one JSON
object: the tool names, the protocol revision, per call whether it was an error
and its structured content, and the URI an update came for (or null).
Run by crates/mdproxy/tests/it/mcp.rs; not written against mdproxy's code."""

import asyncio
import json
import sys
import warnings

import anyio
from mcp import types

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main(url, key, calls_path, watch=None):
    with open(calls_path) as f:
        calls = json.load(f)
    updated = anyio.Event()
    updates = []

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification) and message.params.uri == watch:
            updates.append(message.params.uri)
            updated.set()

    http = create_mcp_http_client(headers={"X-API-Key": key})
    async with http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                listed = await session.list_tools()
                out = {
                    "revision": getattr(init, "protocol_version", None) or getattr(init, "protocolVersion", None),
                    "tools": [t.name for t in listed.tools],
                    "calls": {},
                }
                for name, arguments in calls.items():
                    result = await session.call_tool(name, arguments)
                    structured = getattr(result, "structured_content", None)
                    if structured is None:
                        structured = getattr(result, "structuredContent", None)
                    is_error = getattr(result, "is_error", None)
                    if is_error is None:
                        is_error = getattr(result, "isError", None)
                    out["calls"][name] = {"isError": bool(is_error), "structured": structured}
                out["updated"] = None
                if watch:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # deprecated as of 2026-07-28 only
                        await session.subscribe_resource(watch)
                    with anyio.move_on_after(20):
                        await updated.wait()
                    out["updated"] = updates[0] if updates else None
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
