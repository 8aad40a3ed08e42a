"""A scripted upstream model speaking OpenAI Chat Completions
(`/v1/chat/completions`), OpenAI Responses (`/v1/responses`) and Anthropic
Messages (`/v1/messages`): a test fixture standing in for a model server, so
the Responses API can be driven end to end without a real model.

Its script, from the conversation it is sent:
- the first user message says "Execute in turns: A ||| B": it calls the shell
  with A, then (after A's result) with B, then answers;
- the last user message says "Run `A` and `B`, ..." (seeds/004's example):
  it calls the shell once with both commands;
- the last user message says "Read /mnt/data/FILE ..." (the seeds' follow-up
  example): it calls the shell with `cat /mnt/data/FILE`;
- the last message is the user's and says "Execute: CMD" (to the end of the
  line): it calls the
  `shell` tool with CMD (or the `bash` tool with CMD, or `local_shell` with
  ["bash", "-lc", CMD], when only that tool is offered);
- `tool_choice: "required"` with a shell: it calls the shell (`echo required`);
- "Call NAME: JSON" calls the user function NAME with those arguments;
- "Freeform NAMESPACE.NAME: INPUT" calls the custom tool NAME of that
  namespace with INPUT (Codex CLI's code-mode `functions.exec`), or, where
  it is offered as the function NAMESPACE__NAME (Chat Completions), that
  function with `{"input": INPUT}`;
- the last user message says "Interpret: CODE ||| CODE ..." with
  `code_interpreter` (or Gemini's, `code_execution`, as shellgate offers it)
  offered: it calls it with each CODE in turn (one call
  per turn, counting the tool results since that message), then answers
  "Done: " and the last result;
- "Search QUERY" with the hosted `web_search` offered (Responses only): a
  `web_search_call` item comes first, as a Responses upstream that ran it;
- asked for `reasoning` (Responses), it reasons first (a `reasoning`
  item, sealed when `include` asks for it); asked for `thinking` (Anthropic,
  `enabled`), it thinks first (a `thinking` block with its `signature`);
- the last message is a tool result: it answers "Done: " and the result;
- the last user message is shellgate's compaction turn ("The conversation to
  summarize:" and a transcript): it answers "Summary: the user said " and
  each `[user]` paragraph's text, joined by "; ";
- otherwise it answers "Hello from the scripted model."
`GET .../models` lists `scripted` and `scripted-500`.
Models named for a failure behave so: `scripted-500` answers HTTP 500,
`scripted-429` is always rate limited, `scripted-garbage` answers what is not JSON, `scripted-slow` never answers,
`scripted-loop` calls the shell for ever, `scripted-caller` calls the first
function offered (its required string parameters given the user's words), `scripted-endless` streams text until
the client hangs up, `scripted-trickle` streams a byte every 50 ms for ever,
`scripted-huge-call` calls the shell with 5 MiB of arguments (Chat
Completions).
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def shell_call(tools, commands):
    """A call running `commands` with the shell tool offered (`shell`, or the
    one-command `bash`)."""
    if "shell" in tools:
        return {"tool": ("shell", {"commands": commands})}
    if "bash" in tools:
        return {"tool": ("bash", {"command": " && ".join(commands)})}
    return None


def decide(body):
    model = body.get("model", "")
    messages = body.get("messages", [])
    tools = [t["function"]["name"] for t in body.get("tools", [])]
    last = messages[-1] if messages else {}
    if model == "scripted-loop" and ("shell" in tools or "bash" in tools):
        return shell_call(tools, ["echo again"])
    # "Execute in turns: A ||| B": one call per turn, A then B, then the answer.
    first = next((m for m in messages if m.get("role") == "user"), {})
    first_text = first.get("content") or ""
    if isinstance(first_text, list):
        first_text = " ".join(p.get("text", "") for p in first_text)
    if "Execute in turns: " in first_text and ("shell" in tools or "bash" in tools):
        steps = first_text.split("Execute in turns: ", 1)[1].split(" ||| ")
        done = len([m for m in messages if m.get("role") == "tool"])
        if done < len(steps):
            return shell_call(tools, [steps[done].strip()])
    # "Interpret: A ||| B": a code_interpreter call per turn, A then B.
    asked = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    interpreter = next((t for t in ("code_interpreter", "code_execution") if t in tools), None)
    if asked is not None and interpreter:
        asked_text = messages[asked].get("content") or ""
        if isinstance(asked_text, list):
            asked_text = " ".join(p.get("text", "") for p in asked_text)
        if asked_text.startswith("Interpret: "):
            steps = asked_text[len("Interpret: "):].split(" ||| ")
            done = len([m for m in messages[asked:] if m.get("role") == "tool"])
            if done < len(steps):
                return {"tool": (interpreter, {"code": steps[done]})}
    if last.get("role") == "tool":
        return {"text": "Done: " + last.get("content", "")}
    text = last.get("content") or ""
    if isinstance(text, list):
        text = " ".join(p.get("text", "") for p in text)
    if text.startswith("The conversation to summarize:"):
        # shellgate's compaction turn: a summary naming what the user said.
        said = [p.split("\n", 1)[1] for p in text.split("\n\n") if p.startswith("[user]\n")]
        return {"text": "Summary: the user said " + "; ".join(said)}
    if text.startswith("Run `") and ("shell" in tools or "bash" in tools):
        return shell_call(tools, text.split("`")[1::2])
    if text.startswith("Read /mnt/data/") and ("shell" in tools or "bash" in tools):
        return shell_call(tools, ["cat " + text.split()[1].rstrip(".,")])
    if "Execute: " in text:
        command = text.split("Execute: ", 1)[1].split("\n", 1)[0].strip()
        if "shell" in tools or "bash" in tools:
            return shell_call(tools, [command])
        if "local_shell" in tools:
            return {"tool": ("local_shell", {"command": ["bash", "-lc", command]})}
    if body.get("tool_choice") == "required" and "shell" in tools:
        return {"tool": ("shell", {"commands": ["echo required"]})}
    if model == "scripted-caller" and body.get("tools") and last.get("role") == "user":
        # A model that chooses a tool by itself (what the Open Responses
        # compliance suite asks of a model): it calls the first function
        # offered, each required string parameter given the user's words.
        function = body["tools"][0]["function"]
        schema = function.get("parameters") or {}
        properties = schema.get("properties") or {}
        arguments = {name: text for name in schema.get("required", [])
                     if properties.get(name, {}).get("type") == "string"}
        return {"tool": (function["name"], arguments)}
    if text.startswith("Call "):
        name, arguments = text[len("Call "):].split(":", 1)
        return {"tool": (name.strip(), json.loads(arguments))}
    if text.startswith("Freeform "):
        # "Freeform NAMESPACE.NAME: INPUT" (Responses only): a call of a
        # custom tool of a namespace, INPUT its raw input.
        name, text_input = text[len("Freeform "):].split(":", 1)
        namespace, name = name.strip().rsplit(".", 1)
        # Offered as a function (a Chat Completions upstream: the namespace
        # flattened, the freeform input its one string), it calls that.
        if f"{namespace}__{name}" in tools:
            return {"tool": (f"{namespace}__{name}", {"input": text_input.strip()})}
        return {"custom": (namespace, name, text_input.strip())}
    return {"text": "Hello from the scripted model."}


def as_chat(path, body):
    """The request of another protocol, as Chat Completions' messages and tools."""
    if path.endswith("/responses"):
        messages = []
        for item in body.get("input", []):
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                output = item.get("output", "")
                if isinstance(output, list):
                    output = "\n".join(part.get("text", "") for part in output)
                messages.append({"role": "tool", "content": output})
            elif item.get("role"):
                messages.append({"role": item["role"], "content": item.get("content", "")})
        # A hosted tool (`web_search`) has no name: it goes by its type.
        tools = [{"function": {"name": t.get("name", t.get("type"))}} for t in body.get("tools", [])]
        return {"model": body.get("model"), "messages": messages, "tools": tools}
    if path.endswith("/messages"):
        messages = []
        for message in body.get("messages", []):
            for block in message.get("content", []):
                if block.get("type") == "tool_result":
                    content = block.get("content", "")
                    if isinstance(content, list):
                        content = "\n".join(b.get("text", "") for b in content)
                    messages.append({"role": "tool", "content": content})
                elif block.get("type") == "text":
                    messages.append({"role": message["role"], "content": block["text"]})
        tools = [{"function": {"name": t["name"]}} for t in body.get("tools", [])]
        return {"model": body.get("model"), "messages": messages, "tools": tools}
    return body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The handler writes a response's head and body in separate sends; with
    # Nagle's algorithm on, the body waits for the head's ACK, which the
    # server's kernel may delay ~40 ms on a keep-alive connection. A real
    # upstream's TLS records don't wait like that, so neither does this one.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.headers.append(dict(self.headers))
        if self.path.endswith("/models"):
            # OpenAI's list shape (Anthropic's has `data[].id` alike).
            return self.reply(200, {"object": "list", "data": [
                {"id": "scripted", "object": "model", "created": 1700000000, "owned_by": "scripted-lab"},
                {"id": "scripted-500", "object": "model", "created": 1700000000, "owned_by": "scripted-lab"},
            ]})
        self.reply(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append(body)
        self.server.headers.append(dict(self.headers))
        model = body.get("model", "")
        if model == "scripted-500":
            return self.reply(500, {"error": {"message": "the model crashed"}})
        if model == "scripted-429":
            self.send_response(429)
            payload = b'{"error": {"message": "slow down"}}'
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if model == "scripted-garbage":
            return self.raw(200, "application/json", b"<html>not json</html>")
        if model == "scripted-slow":
            time.sleep(30)
            return self.reply(200, {})
        if model in ("scripted-endless", "scripted-trickle"):
            return self.without_end(model == "scripted-trickle")
        if model == "scripted-huge-call":
            return self.stream({"tool": ("shell", {"commands": ["echo " + "x" * (5 * 1024 * 1024)]})})
        if self.path.endswith("/responses/input_tokens"):
            # The Responses API's own count: a number no estimate makes.
            return self.reply(200, {"object": "response.input_tokens", "input_tokens": 4242})
        decision = decide(as_chat(self.path, body))
        if self.path.endswith("/responses"):
            return self.openai_responses(decision, body)
        if self.path.endswith("/messages"):
            return self.anthropic(decision, body)
        if body.get("stream"):
            return self.stream(decision)
        message = {"role": "assistant", "content": decision.get("text")}
        if "tool" in decision:
            name, arguments = decision["tool"]
            message["tool_calls"] = [{"id": f"call_{len(self.server.requests)}", "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(arguments)}}]
        self.reply(200, {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if "tool" in decision else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })

    def without_end(self, trickle):
        """An event stream that never ends: a big text event after another,
        or a byte at a time (an SSE comment) — until the client hangs up."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        event = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "y" * 65536}}]}).encode() + b"\n\n"
        try:
            while True:
                if trickle:
                    self.wfile.write(b":")
                    self.wfile.flush()
                    time.sleep(0.05)
                else:
                    self.wfile.write(event)
        except OSError:
            pass
        self.close_connection = True

    def stream(self, decision):
        chunks = []
        if "text" in decision:
            words = decision["text"].split(" ")
            for i, word in enumerate(words):
                piece = word if i == 0 else " " + word
                chunks.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
            finish = "stop"
        else:
            name, arguments = decision["tool"]
            text = json.dumps(arguments)
            half = len(text) // 2
            chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": f"call_{len(self.server.requests)}", "type": "function",
                 "function": {"name": name, "arguments": text[:half]}}]}}]})
            chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": text[half:]}}]}}]})
            finish = "tool_calls"
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
        # Each chunk says what it is, as a real server's do.
        chunks = [dict({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                        "model": "scripted"}, **c) for c in chunks]
        payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        self.raw(200, "text/event-stream", payload)

    def openai_responses(self, decision, body):
        """A Responses answer. Asked for `reasoning`, it reasons first: a
        `reasoning` item (its `encrypted_content` when `include` asks for
        it), and usage with reasoning and cached tokens; asked for
        `text.format` JSON, it answers a JSON object."""
        number = len(self.server.requests)
        output = []
        usage = {"input_tokens": 11, "output_tokens": 4, "total_tokens": 15}
        if body.get("reasoning") is not None:
            reasoning = {"type": "reasoning", "id": f"rs_{number}",
                         "summary": [{"type": "summary_text", "text": f"Thinking {number}."}]}
            if "reasoning.encrypted_content" in (body.get("include") or []):
                reasoning["encrypted_content"] = f"sealed-{number}"
            output.append(reasoning)
            usage = dict(usage, input_tokens_details={"cached_tokens": 3},
                         output_tokens_details={"reasoning_tokens": 2})
        # Offered the hosted web search and asked "Search ...", it searches
        # first (the upstream runs that tool itself).
        last = (as_chat(self.path, body)["messages"] or [{}])[-1]
        asked = last.get("content") or ""
        if isinstance(asked, list):
            asked = " ".join(part.get("text", "") for part in asked)
        if (last.get("role") == "user" and asked.startswith("Search ")
                and any(t.get("type") == "web_search" for t in body.get("tools", []))):
            output.append({"type": "web_search_call", "id": f"ws_{number}", "status": "completed",
                           "action": {"type": "search", "query": asked[len("Search "):]}})
        text_format = ((body.get("text") or {}).get("format") or {}).get("type")
        if "text" in decision and text_format in ("json_schema", "json_object"):
            decision = {"text": json.dumps({"answer": decision["text"]})}
        if "tool" in decision:
            name, arguments = decision["tool"]
            output.append({"type": "function_call", "id": "fc_1", "call_id": f"call_{number}",
                           "name": name, "arguments": json.dumps(arguments), "status": "completed"})
        elif "custom" in decision:
            namespace, name, text_input = decision["custom"]
            output.append({"type": "custom_tool_call", "id": "ctc_1", "call_id": f"call_{number}",
                           "namespace": namespace, "name": name, "input": text_input,
                           "status": "completed"})
        else:
            output.append({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": decision["text"], "annotations": []}]})
        response = {"id": "resp_up", "object": "response", "status": "completed", "output": output,
                    "usage": usage}
        if not body.get("stream"):
            return self.reply(200, response)
        events = [{"type": "response.created", "response": dict(response, status="in_progress", output=[])}]
        for index, item in enumerate(output):
            added = dict(item, status="in_progress")
            if item["type"] == "message":
                added["content"] = []
            if item["type"] == "reasoning":
                added = {"type": "reasoning", "id": item["id"], "summary": []}
            events.append({"type": "response.output_item.added", "output_index": index, "item": added})
            if item["type"] == "reasoning":
                events.append({"type": "response.reasoning_summary_text.delta", "item_id": item["id"],
                               "output_index": index, "summary_index": 0,
                               "delta": item["summary"][0]["text"]})
            if item["type"] == "message":
                events.append({"type": "response.output_text.delta", "item_id": item["id"],
                               "output_index": index, "content_index": 0, "delta": decision["text"]})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append({"type": "response.completed", "response": response})
        payload = b"".join(b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)
        self.raw(200, "text/event-stream", payload)

    def anthropic(self, decision, body):
        """A Messages answer. Asked for `thinking` (enabled), it thinks
        first: a `thinking` block with its `signature`."""
        number = len(self.server.requests)
        content = []
        if (body.get("thinking") or {}).get("type") == "enabled":
            content.append({"type": "thinking", "thinking": f"Thinking {number}.",
                            "signature": f"sig-{number}"})
        if "tool" in decision:
            name, arguments = decision["tool"]
            content.append({"type": "tool_use", "id": f"toolu_{number}", "name": name, "input": arguments})
            stop = "tool_use"
        else:
            content.append({"type": "text", "text": decision["text"]})
            stop = "end_turn"
        message = {"id": "msg_up", "type": "message", "role": "assistant", "content": content,
                   "stop_reason": stop, "usage": {"input_tokens": 12, "output_tokens": 6}}
        if not body.get("stream"):
            return self.reply(200, message)
        events = [{"type": "message_start",
                   "message": dict(message, content=[], usage={"input_tokens": 12, "output_tokens": 0})}]
        for index, block in enumerate(content):
            if block["type"] == "tool_use":
                start = dict(block, input={})
                deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
            elif block["type"] == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                          {"type": "signature_delta", "signature": block["signature"]}]
            else:
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": block["text"]}]
            events.append({"type": "content_block_start", "index": index, "content_block": start})
            events.extend({"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas)
            events.append({"type": "content_block_stop", "index": index})
        events += [
            {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 6}},
            {"type": "message_stop"},
        ]
        payload = b"".join(b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)
        self.raw(200, "text/event-stream", payload)

    def reply(self, status, value):
        self.raw(status, "application/json", json.dumps(value).encode())

    def raw(self, status, content_type, payload):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class ScriptedUpstream:
    def __init__(self, host="127.0.0.1", advertise=None):
        """Listens on `host`; its `url` names `advertise` if given (the
        address clients use when `host` is a wildcard)."""
        self.host = advertise or host
        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.requests = []
        # Each request's headers, in order (GETs too).
        self.server.headers = []
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://{self.host}:{self.server.server_address[1]}/v1"

    @property
    def requests(self):
        return self.server.requests

    @property
    def headers(self):
        return self.server.headers

    def stop(self):
        self.server.shutdown()
