"""Scripted upstreams that record what they get (test fixtures standing in
for a model's API): every request's path, headers and body, answered by a
`script` the test gives.

`RecordingUpstream(script)` speaks both protocols, one per path:
- Anthropic's Messages API: `POST .../messages`
  is answered with the content blocks `script(body)` returns (streamed as
  Anthropic streams them when the request asks: text and thinking by
  deltas, a tool's input as JSON deltas), `POST .../messages/count_tokens`
  with `{"input_tokens": COUNTED}`. Blocks: `text`, `tool_use`, `thinking`
  with a `signature`, `redacted_thinking`, or a server tool's blocks, given
  whole; the stop reason is `tool_use` when one is a `tool_use`.
- Chat Completions: `POST .../chat/completions` is
  answered (as one JSON completion, which shellgate reads as well as a
  stream) with the same blocks: `text` the content, `tool_use` a call."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COUNTED = 4242


def text(value):
    return {"type": "text", "text": value}


def last_user_blocks(body):
    """The blocks of the last user message (a string is one text block)."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    if not users:
        return []
    content = users[-1].get("content", [])
    return [text(content)] if isinstance(content, str) else content


def events_of(blocks, stop):
    """Anthropic's stream of a message holding `blocks`."""
    message = {"id": "msg_up", "type": "message", "role": "assistant", "model": "scripted",
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 12, "output_tokens": 0}}
    events = [{"type": "message_start", "message": message}]
    for index, block in enumerate(blocks):
        kind = block["type"]
        deltas = []
        if kind == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        elif kind in ("tool_use", "server_tool_use"):
            start = dict(block, input={})
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block["signature"]}]
        else:
            start = block
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": {"output_tokens": 6}})
    events.append({"type": "message_stop"})
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
                    for e in events)


def chat_completion(blocks):
    """A Chat Completions answer holding `blocks`."""
    message = {"role": "assistant",
               "content": "".join(b["text"] for b in blocks if b["type"] == "text") or None}
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
             for b in blocks if b["type"] == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-up", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?", 1)[0]
        self.server.requests.append({"path": path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                     "body": body})
        if path.endswith("/chat/completions"):
            return self.raw("application/json", json.dumps(chat_completion(self.server.script(body))).encode())
        if path.endswith("/messages/count_tokens"):
            return self.raw("application/json", json.dumps({"input_tokens": COUNTED}).encode())
        blocks = self.server.script(body)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        if body.get("stream"):
            return self.raw("text/event-stream", events_of(blocks, stop))
        message = {"id": "msg_up", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": blocks, "stop_reason": stop, "stop_sequence": None,
                   "usage": {"input_tokens": 12, "output_tokens": 6}}
        self.raw("application/json", json.dumps(message).encode())

    def raw(self, content_type, payload):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class RecordingUpstream:
    def __init__(self, script):
        from conftest import CLUSTER_MODE

        # In cluster mode the nodes, in network namespaces of their own,
        # call it: it listens on every address, named by the bridge's.
        if CLUSTER_MODE:
            from cluster import GATEWAY

            host, self.host = "0.0.0.0", GATEWAY
        else:
            host = self.host = "127.0.0.1"
        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.requests = []
        self.server.script = script
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://{self.host}:{self.server.server_address[1]}/v1"

    @property
    def requests(self):
        return self.server.requests

    def messages(self):
        """The requests for a message or completion (not a count), in order."""
        return [r for r in self.requests if r["path"].endswith(("/messages", "/chat/completions"))]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
