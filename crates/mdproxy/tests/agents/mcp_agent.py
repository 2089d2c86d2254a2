#!/usr/bin/env python3
"""An AI agent's side of MCP, with the official Python SDK (PyPI `mcp`): connects to
URL with KEY, lists the tools, calls each tool named in CALLS (a JSON file of
{tool: arguments}) and prints one JSON object: the tool names, the protocol
revision, and per call whether it was an error and its structured content.
Run by crates/mdproxy/tests/it/mcp.rs; not written against mdproxy's code."""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main(url, key, calls_path):
    with open(calls_path) as f:
        calls = json.load(f)
    http = create_mcp_http_client(headers={"X-API-Key": key})
    async with http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
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
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
