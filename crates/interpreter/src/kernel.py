# shellgate's code interpreter kernel: one per context, run by the
# image's python3 as a service process. Protocol, one JSON object per line:
# requests on stdin ({"op": "execute", "code", "env"}), events on a private
# copy of the original stdout (fd 1 and 2 are pipes this kernel reads, so
# print(), os.system() and C-level writes all become stdout/stderr events).
# Events: {"ev": "ready"}, {"ev": "stdout"|"stderr", "text"},
# {"ev": "result", ...formats, "is_main_result"}, {"ev": "error", "name",
# "value", "traceback"}, {"ev": "count", "n"}, {"ev": "done"}.
# The kernel is the user's own code's host: nothing here is a security
# boundary (the container is); it only has to keep the protocol framed.
import ast
import base64
import json
import os
import queue
import secrets
import signal
import sys
import threading
import time
import traceback

# The interrupt must never end the kernel, even while it starts.
signal.signal(signal.SIGINT, lambda *_: None)

# Bounds per execution (the Rust side relies on them to keep lines small
# beside the engine's 1 MiB output buffer).
MAX_LOG_BYTES = 1 << 20  # stdout + stderr forwarded
MAX_LOG_LINE = 32 * 1024  # one stdout/stderr event
MAX_RESULT_BYTES = 768 * 1024  # one result event, serialized
MAX_RESULTS = 64

# The protocol's channels, private copies of fd 0 and 1 (not inherited by
# the user's children: os.dup makes non-inheritable descriptors); the user
# gets /dev/null as stdin and pipes as stdout and stderr.
_requests = os.fdopen(os.dup(0), "r", encoding="utf-8", errors="replace")
_proto = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="replace", buffering=1)
_proto_lock = threading.Lock()
# The interrupt is SIGINT, whatever mask the kernel's parent left it.
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)


def emit(event):
    line = json.dumps(event, ensure_ascii=True, default=str)
    with _proto_lock:
        _proto.write(line + "\n")
        _proto.flush()


class Turn:
    """What one execution has emitted so far (its bounds)."""

    def __init__(self):
        self.log_bytes = 0
        self.log_dropped = 0
        self.results = 0


_turn = Turn()
_turn_lock = threading.Lock()
_marker = ("\x1e" + secrets.token_hex(16) + "\x1e").encode()


def forward(stream, data):
    if not data:
        return
    with _turn_lock:
        room = MAX_LOG_BYTES - _turn.log_bytes
        if room <= 0:
            _turn.log_dropped += len(data)
            return
        if len(data) > room:
            _turn.log_dropped += len(data) - room
            data = data[:room]
        _turn.log_bytes += len(data)
    for start in range(0, len(data), MAX_LOG_LINE):
        emit({"ev": stream, "text": data[start : start + MAX_LOG_LINE].decode("utf-8", "replace")})


class Reader(threading.Thread):
    """Reads one of the user's streams (a pipe behind fd 1 or 2)."""

    def __init__(self, stream, fd):
        super().__init__(daemon=True)
        self.stream = stream
        self.fd = fd
        self.synced = threading.Event()

    def run(self):
        # A signal must reach the main thread, the one running the code: a
        # SIGINT taken by a reader would not wake it from a sleep.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        pending = b""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                return
            pending += chunk
            while True:
                at = pending.find(_marker)
                if at < 0:
                    break
                forward(self.stream, pending[:at])
                pending = pending[at + len(_marker) :]
                self.synced.set()
            # Forward all but a tail that may be the start of a marker, or
            # an incomplete UTF-8 sequence (the next read completes both).
            cut = len(pending)
            start = pending.rfind(b"\x1e", max(0, len(pending) - len(_marker) + 1))
            if start >= 0 and _marker.startswith(pending[start:]):
                cut = start
            back = cut
            while back > 0 and cut - back < 3 and (pending[back - 1] & 0xC0) == 0x80:
                back -= 1
            if back > 0 and cut - back < 4 and pending[back - 1] >= 0xC0:
                lead = pending[back - 1]
                need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
                if cut - (back - 1) < need:
                    cut = back - 1
            if cut:
                forward(self.stream, pending[:cut])
                pending = pending[cut:]


def _redirect(fd, stream):
    read, write = os.pipe()
    os.dup2(write, fd)
    os.close(write)
    reader = Reader(stream, read)
    reader.start()
    return reader


_readers = [_redirect(1, "stdout"), _redirect(2, "stderr")]
sys.stdout = open(1, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
sys.stderr = open(2, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
sys.stdin = open(0, "r", closefd=False)


def sync_streams():
    """Waits until everything written to fd 1 and 2 so far was forwarded."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    for fd, reader in zip((1, 2), _readers):
        reader.synced.clear()
        os.write(fd, _marker)
    for reader in _readers:
        while not reader.synced.wait(1.0):
            if not reader.is_alive():
                break


# --- display data -------------------------------------------------------

FORMATS = [
    ("html", "_repr_html_"),
    ("markdown", "_repr_markdown_"),
    ("svg", "_repr_svg_"),
    ("png", "_repr_png_"),
    ("jpeg", "_repr_jpeg_"),
    ("pdf", "_repr_pdf_"),
    ("latex", "_repr_latex_"),
    ("json", "_repr_json_"),
    ("javascript", "_repr_javascript_"),
]


def _call_repr(method):
    value = method()
    if isinstance(value, tuple) and value:
        value = value[0]  # (data, metadata)
    return value


def formats_of(value):
    data = {}
    try:
        data["text"] = repr(value)
    except Exception as error:  # a broken __repr__ is the user's
        data["text"] = "<repr failed: %r>" % (error,)
    if isinstance(value, type):
        return data
    for name, attribute in FORMATS:
        method = getattr(value, attribute, None)
        if not callable(method):
            continue
        try:
            rendered = _call_repr(method)
        except Exception:
            continue
        if rendered is None:
            continue
        if name in ("png", "jpeg", "pdf") and isinstance(rendered, (bytes, bytearray)):
            rendered = base64.b64encode(bytes(rendered)).decode()
        if name == "json":
            if not isinstance(rendered, (dict, list)):
                continue
        elif not isinstance(rendered, str):
            rendered = str(rendered)
        data[name] = rendered
    return data


def send_result(data, is_main):
    with _turn_lock:
        if _turn.results >= MAX_RESULTS:
            return
        _turn.results += 1
    event = dict(data)
    event["ev"] = "result"
    event["is_main_result"] = bool(is_main)
    line = json.dumps(event, default=str)
    if len(line) > MAX_RESULT_BYTES:
        kept = {"ev": "result", "is_main_result": bool(is_main), "text": str(data.get("text", ""))[:MAX_LOG_LINE]}
        dropped = sorted(k for k in data if k != "text")
        forward(
            "stderr",
            ("[shellgate: a result of %d bytes is over the %d-byte bound; its %s formats were left out]\n"
             % (len(line), MAX_RESULT_BYTES, ", ".join(dropped) or "text")).encode(),
        )
        event = kept
    emit(event)


def display(*values, **_options):
    """IPython's display(): each value as a result (not the main one)."""
    for value in values:
        if isinstance(value, dict) and _options.get("raw"):
            send_result({k.split("/")[-1].replace("plain", "text"): v for k, v in value.items()}, False)
        else:
            send_result(formats_of(value), False)


def _matplotlib_figures():
    """Open matplotlib figures as PNG results, then closed (if it is loaded)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        import io

        for number in pyplot.get_fignums():
            figure = pyplot.figure(number)
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", bbox_inches="tight")
            text = repr(figure)
            send_result({"text": text, "png": base64.b64encode(buffer.getvalue()).decode()}, False)
        pyplot.close("all")
    except Exception as error:
        forward("stderr", ("[shellgate: a figure could not be rendered: %r]\n" % (error,)).encode())


# --- execution ----------------------------------------------------------

# The user's namespace is a fresh `__main__` (pickle and dataclasses look
# classes up there); the kernel's own names stay in the module it ran in.
import types

_kernel_module = sys.modules["__main__"]
_main = types.ModuleType("__main__")
_main.__dict__["display"] = display
sys.modules["__main__"] = _main
_user = _main.__dict__
_count = 0
_executing = False


def _on_sigint(_signum, _frame):
    # SIGINT is the interrupt: it stops the user's code, never the kernel.
    if not _executing:
        return
    if _LANGUAGE == "bash":
        # Forwarded to the cell's bash, never raised here: this thread only
        # waits for bash, and an exception at any point of that wait (even
        # before bash started the cell) would end the execution unreported.
        if _bash is not None:
            _bash.interrupt()
        return
    raise KeyboardInterrupt


def _user_traceback(error):
    frames = traceback.extract_tb(error.__traceback__)
    frames = [f for f in frames if f.filename.startswith("<cell")]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    return "".join(lines)


def _leading_indent_removed(code):
    """IPython's cleanup of a cell: its leading blank lines dropped, and the
    first line's indentation taken off every line that has it (a cell
    pasted from indented source, as E2B's own tests send every one)."""
    lines = code.splitlines(True)
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""
    first = lines[0]
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if not indent:
        return "".join(lines)
    return "".join(line[len(indent) :] if line.startswith(indent) else line for line in lines)


def run_cell(code):
    global _count, _executing
    _count += 1
    code = _leading_indent_removed(code)
    filename = "<cell-%d>" % _count
    # Source lines in tracebacks come from linecache.
    import linecache

    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        _executing = True
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), _user)
        value = None
        if last is not None:
            value = eval(compile(last, filename, "eval"), _user)
        _executing = False
        # What the cell printed comes before what it displays.
        sync_streams()
        _matplotlib_figures()
        if value is not None:
            _user["_"] = value
            send_result(formats_of(value), True)
    except BaseException as error:  # noqa: B036 (SystemExit and ^C are the cell's)
        _executing = False
        sync_streams()
        try:
            _matplotlib_figures()
        except BaseException:
            pass
        emit({
            "ev": "error",
            "name": type(error).__name__,
            "value": str(error),
            "traceback": _user_traceback(error),
        })
    finally:
        _executing = False


# --- bash contexts ------------------------------------------------------

# A bash context's kernel (SHELLGATE_KERNEL_LANGUAGE=bash, popped at start)
# keeps one bash alive: each cell is sourced by it, so variables, functions
# and `cd` carry to the next, as in E2B's bash contexts.
_LANGUAGE = os.environ.pop("SHELLGATE_KERNEL_LANGUAGE", "python")


class Bash:
    """One long-lived bash fed cells: each is a file it sources with its
    stdin on /dev/null (the kernel's requests are never the cell's input),
    then writes the cell's exit status on a pipe of its own. An interrupt
    (SIGINT to bash's process group) stops the foreground command, and the
    INT trap returns from the sourced cell, so bash and its state live on.

    The trap can only return from a cell bash is inside: a SIGINT that
    reached bash before it began sourcing the cell would be spent at the
    top level and the cell would run whole. So the cell's first command
    says `started` on the status pipe, and an interrupt is sent to bash
    only once that line was read (one asked for earlier waits for it), and
    never after the status line: bash gets SIGINT only inside the cell."""

    STARTED = b"started\n"

    def __init__(self):
        import subprocess
        import tempfile

        self.cells = tempfile.mkdtemp(prefix="shellgate-bash-")
        status_read, status_write = os.pipe()
        self.status_fd = status_write
        self.status = os.fdopen(status_read, "rb", buffering=0)
        self.commands_read, commands_write = os.pipe()
        self.commands = os.fdopen(commands_write, "wb", buffering=0)
        self.process = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            stdin=self.commands_read,
            pass_fds=(status_write,),
            start_new_session=True,
        )
        os.close(self.commands_read)
        os.close(status_write)
        self.send("trap 'return 130 2>/dev/null' INT\n")
        # The running cell's interrupt state; changed only on the main
        # thread (by `run` and by the SIGINT handler, which runs there).
        self.inside = False
        self.interrupt_wanted = False
        self.interrupt_sent = False

    def send(self, text):
        self.commands.write(text.encode())

    def interrupt(self):
        """The running cell is to stop (called by the SIGINT handler)."""
        self.interrupt_wanted = True
        if self.inside:
            self._forward()

    def _forward(self):
        if self.interrupt_sent:
            return
        self.interrupt_sent = True
        try:
            os.killpg(self.process.pid, signal.SIGINT)
        except OSError:
            pass  # bash already ended: the status read says so

    def _entered(self):
        # With SIGINT held, the handler cannot run between the two lines
        # below: the interrupt is sent exactly once, by one of them.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.inside = True
            if self.interrupt_wanted:
                self._forward()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def run(self, code, env):
        import shlex

        self.inside = False
        self.interrupt_wanted = False
        self.interrupt_sent = False
        path = os.path.join(self.cells, "cell-%d.sh" % _count)
        with open(path, "w", encoding="utf-8") as cell:
            # On the cell's first line, so its line numbers stay the user's.
            cell.write("printf 'started\\n' >&%d; %s\n" % (self.status_fd, code))
        assignments = " ".join(
            "%s=%s" % (name, shlex.quote(str(value)))
            for name, value in env.items()
            if str(name).isidentifier()
        )
        self.send(
            "%s . %s </dev/null; printf '%%d\\n' \"$?\" >&%d\n"
            % (assignments, shlex.quote(path), self.status_fd)
        )
        try:
            line = self.status.readline()
            if line == self.STARTED:
                self._entered()
                line = self.status.readline()
        finally:
            self.inside = False
            try:
                os.unlink(path)
            except OSError:
                pass
        if not line:
            return None  # bash ended (the cell ran `exit`)
        return int(line.strip() or b"1")


_bash = None


def run_bash_cell(code, env):
    global _bash, _count, _executing
    _count += 1
    if _bash is None or _bash.process.poll() is not None:
        _bash = Bash()
    _executing = True
    try:
        status = _bash.run(code, env)
    finally:
        _executing = False
    sync_streams()
    if status is None:
        _bash = None
        emit({"ev": "error", "name": "", "value": "bash exited (the next cell starts a new one)", "traceback": ""})
    elif status == 130:
        emit({"ev": "error", "name": "KeyboardInterrupt", "value": "interrupted", "traceback": ""})
    elif status:
        # As Jupyter's bash kernel says a failed cell: its exit status.
        emit({"ev": "error", "name": "", "value": str(status), "traceback": ""})


def execute(request):
    global _current
    with _current_lock:
        _current = request.get("id")
    try:
        _run(request)
    finally:
        # No interrupt for this execution is taken past here: the one the
        # request reader is sending (under the lock) lands before this.
        with _current_lock:
            _current = None
    if _turn.log_dropped:
        emit({"ev": "stderr", "text": "[shellgate: %d bytes of output past this execution's %d-byte bound were dropped]\n"
              % (_turn.log_dropped, MAX_LOG_BYTES)})
    emit({"ev": "count", "n": _count})
    emit({"ev": "done"})


def _run(request):
    global _turn
    with _turn_lock:
        _turn = Turn()
    env = request.get("env") or {}
    if _LANGUAGE == "bash":
        try:
            run_bash_cell(request.get("code", ""), env)
        finally:
            sync_streams()
        return
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({str(k): str(v) for k, v in env.items()})
    try:
        run_cell(request.get("code", ""))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        while True:
            try:
                sync_streams()
                break
            except KeyboardInterrupt:
                continue


# --- requests -------------------------------------------------------------

# Requests are read by a thread of their own, so an interrupt is taken while
# the main thread runs code. {"op": "interrupt", "id"} stops the execution
# with that id and no other: one that comes late, its execution ended, is
# dropped, where a bare SIGINT sent then would land in the next execution.
_pending = queue.Queue()
_current_lock = threading.Lock()
_current = None  # the id of the execution running, if any


def _interrupt(execution):
    with _current_lock:
        if _current is None or _current != execution:
            return
        group = os.getpgrp()
        if group == os.getpid():
            # The code's children (os.system's) are interrupted too.
            os.killpg(group, signal.SIGINT)
        else:
            os.kill(os.getpid(), signal.SIGINT)


class RequestReader(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)

    def run(self):
        # The SIGINT it sends is the main thread's to take.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        for line in _requests:
            try:
                request = json.loads(line)
            except ValueError:
                request = _NOT_JSON
            if isinstance(request, dict) and request.get("op") == "interrupt":
                _interrupt(request.get("id"))
            else:
                _pending.put(request)
        _pending.put(_ENDED)


_NOT_JSON = object()
_ENDED = object()


def main():
    # No display: figures are rendered to PNG after each execution (show()
    # has nothing to do, and says nothing).
    os.environ["MPLBACKEND"] = "Agg"
    import warnings

    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    signal.signal(signal.SIGINT, _on_sigint)
    RequestReader().start()
    emit({"ev": "ready", "pid": os.getpid()})
    while True:
        try:
            request = _pending.get()
        except KeyboardInterrupt:
            continue
        if request is _ENDED:
            return
        if not isinstance(request, dict):
            emit({"ev": "error", "name": "ProtocolError", "value": "not a JSON object", "traceback": ""})
            emit({"ev": "done"})
            continue
        if request.get("op") == "execute":
            try:
                execute(request)
            except KeyboardInterrupt:
                emit({"ev": "done"})


main()
