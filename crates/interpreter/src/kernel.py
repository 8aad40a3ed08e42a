# shellgate's code interpreter kernel: one per context, run by the
# image's python3 as a service process (a Python context runs its cells
# itself; a bash, JavaScript, TypeScript or Java context hosts that
# language's long-lived runtime and feeds it the cells). Protocol, one JSON object per line:
# requests on stdin ({"op": "execute", "code", "env"}), events on a private
# copy of the original stdout (fd 1 and 2 are pipes this kernel reads, so
# print(), os.system() and C-level writes all become stdout/stderr events).
# Events: {"ev": "ready"}, {"ev": "stdout"|"stderr", "text"},
# {"ev": "result", ...formats, "is_main_result"}, {"ev": "error", "name",
# "value", "traceback"}, {"ev": "count", "n"}, {"ev": "done"}; and for the
# client's tools an execution names ("tools"), {"ev": "tool_calls"} and
# {"ev": "tool_answered"}, answered by {"op": "tool_result"} (see below).
# The kernel is the user's own code's host: nothing here is a security
# boundary (the container is); it only has to keep the protocol framed.
import ast
import base64
import builtins
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
# The end of one chunk of output a hosted runtime wrote (Java's: each flush
# is a message of its own there, as in E2B's Java kernel); as long as the
# sync marker, and starting as it does.
_chunk_end = ("\x1e" + secrets.token_hex(16) + "\x1d").encode()


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
                found = [(at, mark) for mark in (_marker, _chunk_end) if (at := pending.find(mark)) >= 0]
                if not found:
                    break
                at, mark = min(found)
                forward(self.stream, pending[:at])
                pending = pending[at + len(mark) :]
                if mark == _marker:
                    self.synced.set()
            # Forward all but a tail that may be the start of a marker, or
            # an incomplete UTF-8 sequence (the next read completes both).
            cut = len(pending)
            start = pending.rfind(b"\x1e", max(0, len(pending) - len(_marker) + 1))
            if start >= 0 and (_marker.startswith(pending[start:]) or _chunk_end.startswith(pending[start:])):
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
    shown = getattr(value, "_shellgate_formats", None)
    if isinstance(value, _Rich) and callable(shown):
        data.update(shown())
        return data
    if isinstance(value, (dict, list)):
        # E2B's kernel gives lists and dicts as JSON too.
        try:
            data["json"] = json.loads(json.dumps(value, default=_json_default))
        except (TypeError, ValueError):
            pass
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(value, pandas.DataFrame):
        # E2B's `data`: the frame's columns as lists.
        try:
            columns = value.to_dict(orient="list")
            data["data"] = json.loads(json.dumps(
                {str(k): [v.isoformat() if isinstance(v, pandas.Timestamp) else v for v in column]
                 for k, column in columns.items()}, default=_json_default))
        except (TypeError, ValueError):
            pass
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None and isinstance(value, pyplot.Figure):
        data.update(_figure_formats(value))
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


def _json_default(value):
    """NumPy's numbers and arrays as JSON's (orjson's OPT_SERIALIZE_NUMPY)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def send_result(data, is_main):
    if _captured_outputs and not is_main:
        _captured_outputs[-1].append(RichOutput(dict(data)))
        return
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


def _figure_formats(figure):
    """A figure's PNG, and its data as E2B's `chart` when it has data."""
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    data = {"png": base64.b64encode(buffer.getvalue()).decode()}
    try:
        chart = chart_of(figure)
    except Exception:  # a figure the reader does not know is still shown
        chart = None
    if chart:
        data["chart"] = chart
    return data


def _matplotlib_figures():
    """Open matplotlib figures as PNG results, then closed (if it is loaded)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        for number in pyplot.get_fignums():
            figure = pyplot.figure(number)
            data = {"text": repr(figure)}
            data.update(_figure_formats(figure))
            send_result(data, False)
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
_BUILTIN_NAMES = frozenset(("display", "get_ipython", "__builtins__", "__name__", "__doc__"))
_count = 0
_executing = False


def _on_sigint(_signum, _frame):
    # SIGINT is the interrupt: it stops the user's code, never the kernel.
    if not _executing:
        return
    if _LANGUAGE in _HOSTED:
        # Forwarded to the runtime, which stops the cell and keeps its state
        # (JShell only once it is ready: before, SIGINT would end the JVM).
        if _runtime is not None and _runtime.ready:
            _runtime.interrupt()
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


_loop = None


def _run_code(code):
    """Runs compiled code in the user's namespace; code with a top-level
    `await` (a coroutine) on the kernel's one event loop, kept across cells."""
    global _loop
    if code.co_flags & CO_COROUTINE:
        import asyncio

        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
        return _loop.run_until_complete(eval(code, _user))
    return eval(code, _user)


def _ends_with_semicolon(code):
    """The cell's last statement ends with `;` (IPython shows no result)."""
    last = None
    try:
        for token in tokenize.generate_tokens(_io.StringIO(code).readline):
            if token.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT,
                                  tokenize.DEDENT, tokenize.ENDMARKER):
                last = token
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    return last is not None and last.type == tokenize.OP and last.string == ";"


def evaluate_cell(code, filename):
    """Runs a cell's code (Jupyter syntax rewritten); returns whether it
    ended with an expression shown as its result, and that value."""
    import linecache

    code = transform_cell(code)
    # Source lines in tracebacks come from linecache.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(code, filename, "exec", ast.PyCF_ONLY_AST | flags)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not _ends_with_semicolon(code):
        last = ast.Expression(tree.body.pop().value)
    _run_code(compile(tree, filename, "exec", flags))
    if last is None:
        return False, None
    return True, _run_code(compile(last, filename, "eval", flags))


def run_cell(code, nested=False):
    """Runs one execution's cell; `nested` (a cell magic's body) runs in the
    same execution and returns its value, its errors raised to the magic."""
    global _count, _executing
    if nested:
        _count_nested[0] += 1
        return evaluate_cell(code, "<cell-%d.%d>" % (_count, _count_nested[0]))[1]
    _count += 1
    _count_nested[0] = 0
    filename = "<cell-%d>" % _count
    try:
        _executing = True
        shown, value = evaluate_cell(code, filename)
        _executing = False
        # What the cell printed comes before what it displays.
        sync_streams()
        _matplotlib_figures()
        if shown and value is not None:
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


_count_nested = [0]
CO_COROUTINE = 0x0080  # inspect.CO_COROUTINE


# --- Jupyter's habits -----------------------------------------------------

# The image has no IPython: what users of a Jupyter kernel type is rewritten
# here as IPython rewrites it (`!cmd` → get_ipython().system('cmd'),
# `%magic args` → get_ipython().run_line_magic('magic', 'args'), `%%magic`
# → get_ipython().run_cell_magic(...)), and the magics E2B's documentation
# and agents use are served by a small shell object. A magic it does not
# know is IPython's UsageError.
import re
import shlex
import subprocess
import tokenize
import io as _io


class UsageError(Exception):
    pass


def _continuation_lines(code):
    """The 1-based numbers of the lines that do not begin a statement: inside
    a string or brackets, or after a backslash (there `%` is an operator)."""
    inside = set()
    try:
        depth = 0
        tokens = tokenize.generate_tokens(_io.StringIO(code).readline)
        for token in tokens:
            kind, text, (start, _), (end, _), line = token
            if kind == tokenize.OP and text in "([{":
                depth += 1
            elif kind == tokenize.OP and text in ")]}":
                depth = max(0, depth - 1)
            if end > start:
                inside.update(range(start + 1, end + 1))
            if depth > 0 and kind in (tokenize.NL, tokenize.NEWLINE):
                inside.add(start + 1)
            if kind not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT) and line.rstrip("\r\n").endswith("\\"):
                inside.add(end + 1)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return inside


_ASSIGNED = re.compile(r"^([ \t]*)([A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*)[ \t]*=[ \t]*([!%])(.*)$")


def _escape_line(indent, escape, rest, target=None):
    rest = rest.rstrip("\r\n")
    if escape == "!":
        if rest.startswith("!"):
            call = "get_ipython().getoutput(%r)" % rest[1:].strip()
        else:
            call = ("get_ipython().getoutput(%r)" if target else "get_ipython().system(%r)") % rest.strip()
    else:
        name, _, arguments = rest.strip().partition(" ")
        call = "get_ipython().run_line_magic(%r, %r)" % (name, arguments.strip())
    if target:
        return "%s%s = %s\n" % (indent, target, call)
    return "%s%s\n" % (indent, call)


def transform_cell(code):
    """A cell's Jupyter syntax as the Python IPython would run."""
    code = _leading_indent_removed(code)
    first, _, body = code.partition("\n")
    if first.startswith("%%"):
        name, _, arguments = first[2:].strip().partition(" ")
        return "get_ipython().run_cell_magic(%r, %r, %r)\n" % (name, arguments.strip(), body)
    if "!" not in code and "%" not in code:
        return code
    continuations = _continuation_lines(code)
    lines = code.splitlines(True)
    for number, line in enumerate(lines, 1):
        if number in continuations:
            continue
        stripped = line.lstrip(" \t")
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("!") or (stripped.startswith("%") and not stripped.startswith("%=")):
            lines[number - 1] = _escape_line(indent, stripped[0], stripped[1:])
            continue
        assigned = _ASSIGNED.match(line)
        if assigned:
            indent, target, escape, rest = assigned.groups()
            lines[number - 1] = _escape_line(indent, escape, rest, target)
    return "".join(lines)


def _expanded(command, depth=2):
    """`{expression}` and `$name` in a shell line, from the caller's and the
    user's names (IPython's expansion: what cannot be evaluated stays as
    written, for the shell to see)."""
    frame = sys._getframe(depth)
    names = dict(_user)
    names.update(frame.f_locals)

    def brace(match):
        try:
            return str(eval(match.group(1), _user, names))
        except Exception:
            return match.group(0)

    def dollar(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return str(names[name]) if name in names else match.group(0)

    command = re.sub(r"(?<!\{)\{([^{}]+)\}(?!\})", brace, command)
    return re.sub(r"\$\$|\$([A-Za-z_]\w*)", dollar, command)


class SList(list):
    """IPython's getoutput() answer: the lines, with `.s`, `.n`, `.l`."""

    @property
    def s(self):
        return " ".join(self)

    @property
    def n(self):
        return "\n".join(self)

    @property
    def l(self):  # noqa: E743 (IPython's name)
        return list(self)

    nlstr = n
    spstr = s


class Shell:
    """What `get_ipython()` gives: the system calls and the magics."""

    def __init__(self):
        self.user_ns = _user
        self.user_module = _main
        self.events = _Events()
        self.config = {}
        self._previous_dir = None
        self.line_magics = {
            "pip": self._pip,
            "conda": self._conda,
            "cd": self._cd,
            "pwd": lambda _: os.getcwd(),
            "ls": lambda arguments: self.system("ls -F --color=never " + arguments),
            "env": self._env,
            "set_env": self._set_env,
            "time": self._time,
            "timeit": self._timeit,
            "matplotlib": self._matplotlib,
            "config": lambda _: None,
            "load_ext": self._load_ext,
            "reload_ext": self._load_ext,
            "autoreload": lambda _: None,
            "sx": self.getoutput,
            "system": self.getoutput,
            "who": self._who,
            "whos": self._who,
            "reset": self._reset,
            "run": self._run,
            "cat": lambda arguments: self.system("cat " + arguments),
            "mkdir": lambda arguments: self.system("mkdir " + arguments),
            "rm": lambda arguments: self.system("rm " + arguments),
            "cp": lambda arguments: self.system("cp " + arguments),
            "mv": lambda arguments: self.system("mv " + arguments),
        }
        self.cell_magics = {
            "bash": lambda arguments, cell: self._script("bash", arguments, cell),
            "sh": lambda arguments, cell: self._script("sh", arguments, cell),
            "script": self._script_named,
            "writefile": self._writefile,
            "time": self._time_cell,
            "timeit": self._timeit_cell,
            "capture": self._capture,
            "html": lambda _, cell: display(_Rich(html=cell)),
            "HTML": lambda _, cell: display(_Rich(html=cell)),
            "markdown": lambda _, cell: display(_Rich(markdown=cell)),
            "latex": lambda _, cell: display(_Rich(latex=cell)),
            "svg": lambda _, cell: display(_Rich(svg=cell)),
            "javascript": lambda _, cell: display(_Rich(javascript=cell)),
            "js": lambda _, cell: display(_Rich(javascript=cell)),
            "python": lambda arguments, cell: self._script(sys.executable, arguments, cell),
            "python3": lambda arguments, cell: self._script(sys.executable, arguments, cell),
        }

    # -- the shell
    def system(self, command):
        command = _expanded(command)
        sys.stdout.flush()
        sys.stderr.flush()
        if sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__:
            status = subprocess.call(["/bin/bash", "-c", command])
        else:
            # Python's streams are redirected (`%%capture`, contextlib's
            # redirect_stdout): the command's output goes where they do, as
            # ipykernel's pipes send it.
            ran = subprocess.run(["/bin/bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            sys.stdout.write(ran.stdout.decode("utf-8", "replace"))
            sys.stderr.write(ran.stderr.decode("utf-8", "replace"))
            status = ran.returncode
        self.user_ns["_exit_code"] = status

    def getoutput(self, command):
        command = _expanded(command)
        ran = subprocess.run(["/bin/bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.user_ns["_exit_code"] = ran.returncode
        return SList(ran.stdout.decode("utf-8", "replace").splitlines())

    def run_line_magic(self, name, arguments):
        magic = self.line_magics.get(name)
        if magic is None:
            raise UsageError("Line magic function `%%%s` not found." % name)
        return magic(_expanded(arguments))

    def run_cell_magic(self, name, arguments, cell):
        magic = self.cell_magics.get(name)
        if magic is None:
            raise UsageError("Cell magic `%%%%%s` not found." % name)
        return magic(arguments, cell)

    def run_cell(self, code):
        run_cell(code, nested=True)

    def enable_gui(self, gui=None):
        pass

    def ev(self, expression):
        return eval(expression, self.user_ns)

    def ex(self, statement):
        exec(statement, self.user_ns)

    # -- line magics
    def _pip(self, arguments):
        self.system("%s -m pip %s" % (shlex.quote(sys.executable), arguments))
        if arguments.split()[:1] in (["install"], ["uninstall"]):
            print("Note: you may need to restart the kernel to use updated packages.")

    def _conda(self, arguments):
        raise UsageError("conda is not installed in this sandbox: use %pip")

    def _cd(self, arguments):
        target = arguments.strip().strip("'\"")
        if target in ("", "~"):
            target = os.path.expanduser("~")
        elif target == "-":
            if self._previous_dir is None:
                raise UsageError("cd -: no previous directory")
            target = self._previous_dir
        here = os.getcwd()
        try:
            os.chdir(os.path.expanduser(target))
        except OSError as error:
            print("[Errno %s] %s: %r" % (error.errno, error.strerror, target))
            return None
        self._previous_dir = here
        print(os.getcwd())
        return None

    def _env(self, arguments):
        arguments = arguments.strip()
        if not arguments:
            return dict(os.environ)
        if "=" in arguments or " " in arguments:
            return self._set_env(arguments)
        return os.environ.get(arguments)

    def _set_env(self, arguments):
        name, separator, value = arguments.strip().partition("=")
        if not separator:
            name, _, value = arguments.strip().partition(" ")
        os.environ[name.strip()] = value.strip()
        print("env: %s=%s" % (name.strip(), value.strip()))

    def _time(self, statement):
        try:
            code = compile(statement, "<timed exec>", "eval")
            mode = "eval"
        except SyntaxError:
            code = compile(statement, "<timed exec>", "exec")
            mode = "exec"
        started, cpu = time.perf_counter(), time.process_time()
        try:
            if mode == "eval":
                return eval(code, self.user_ns)
            exec(code, self.user_ns)
            return None
        finally:
            wall = time.perf_counter() - started
            used = time.process_time() - cpu
            print("CPU times: user %s, sys: 0 ns, total: %s\nWall time: %s"
                  % (_duration(used), _duration(used), _duration(wall)))

    def _time_cell(self, arguments, cell):
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return run_cell(cell, nested=True)
        finally:
            wall = time.perf_counter() - started
            used = time.process_time() - cpu
            print("CPU times: user %s, sys: 0 ns, total: %s\nWall time: %s"
                  % (_duration(used), _duration(used), _duration(wall)))

    def _timeit(self, statement, setup="pass"):
        import timeit

        words = statement.split()
        number = None
        while words and words[0].startswith("-"):
            flag = words.pop(0)
            if flag.startswith("-n") and (flag[2:] or words):
                number = int(flag[2:] or words.pop(0))
            elif flag.startswith("-r") and not flag[2:] and words:
                words.pop(0)
        statement = " ".join(words)
        timer = timeit.Timer(statement, setup, globals=self.user_ns)
        if number is None:
            number, _ = timer.autorange()
        runs = [timer.timeit(number) / number for _ in range(7)]
        mean = sum(runs) / len(runs)
        deviation = (sum((r - mean) ** 2 for r in runs) / len(runs)) ** 0.5
        print("%s ± %s per loop (mean ± std. dev. of 7 runs, %d loops each)"
              % (_duration(mean), _duration(deviation), number))

    def _timeit_cell(self, arguments, cell):
        import timeit

        timer = timeit.Timer(cell, arguments or "pass", globals=self.user_ns)
        number, _ = timer.autorange()
        runs = [timer.timeit(number) / number for _ in range(7)]
        mean = sum(runs) / len(runs)
        print("%s per loop (mean of 7 runs, %d loops each)" % (_duration(mean), number))

    def _matplotlib(self, arguments):
        # Figures are always rendered inline (as PNG results, with their
        # chart) after the cell: `inline` and the others change nothing.
        return None

    def _load_ext(self, arguments):
        name = arguments.strip()
        if name in ("autoreload", "dotenv"):
            if name == "dotenv":
                raise UsageError("The dotenv module is not an IPython extension here.")
            return None
        module = __import__(name)
        load = getattr(module, "load_ipython_extension", None)
        if load is None:
            raise UsageError("The %s module is not an IPython extension." % name)
        load(self)

    def _who(self, arguments):
        names = sorted(n for n, v in self.user_ns.items()
                       if not n.startswith("_") and not isinstance(v, types.ModuleType) and n not in _BUILTIN_NAMES)
        print("\t".join(names) if names else "Interactive namespace is empty.")

    def _reset(self, arguments):
        for name in [n for n in self.user_ns if not n.startswith("__") and n not in _BUILTIN_NAMES]:
            del self.user_ns[name]

    def _run(self, arguments):
        words = shlex.split(arguments)
        if not words:
            raise UsageError("%run: a file to run is needed")
        path = words[0]
        saved = sys.argv
        sys.argv = words
        try:
            with open(path, encoding="utf-8") as source:
                code = source.read()
            namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
            exec(compile(code, path, "exec"), namespace)
            self.user_ns.update({k: v for k, v in namespace.items() if not k.startswith("__")})
        finally:
            sys.argv = saved

    # -- cell magics
    def _script(self, program, arguments, cell):
        sys.stdout.flush()
        sys.stderr.flush()
        ran = subprocess.run([program] + shlex.split(arguments), input=cell.encode())
        if ran.returncode:
            raise subprocess.CalledProcessError(ran.returncode, program)

    def _script_named(self, arguments, cell):
        words = shlex.split(arguments)
        if not words:
            raise UsageError("%%script: a program to run the cell is needed")
        return self._script(words[0], " ".join(shlex.quote(w) for w in words[1:]), cell)

    def _writefile(self, arguments, cell):
        words = shlex.split(_expanded(arguments))
        append = "-a" in words or "--append" in words
        paths = [w for w in words if w not in ("-a", "--append")]
        if len(paths) != 1:
            raise UsageError("%%writefile: one file name is needed")
        path = os.path.expanduser(paths[0])
        existed = os.path.exists(path)
        with open(path, "a" if append else "w", encoding="utf-8") as target:
            target.write(cell)
        if append:
            print("Appending to %s" % paths[0])
        elif existed:
            print("Overwriting %s" % paths[0])
        else:
            print("Writing %s" % paths[0])

    def _capture(self, arguments, cell):
        """IPython's `%%capture [--no-stdout] [--no-stderr] [--no-display] [name]`:
        the body's prints and displays are kept (in `name`, a CapturedIO) instead
        of shown; the body's last value is not shown either."""
        words = shlex.split(arguments)
        flags = {w for w in words if w.startswith("--")}
        unknown = flags - {"--no-stdout", "--no-stderr", "--no-display"}
        names = [w for w in words if not w.startswith("--")]
        if unknown or len(names) > 1 or (names and not names[0].isidentifier()):
            raise UsageError("%%capture [--no-stdout] [--no-stderr] [--no-display] [output]")
        captured = CapturedIO(
            None if "--no-stdout" in flags else _io.StringIO(),
            None if "--no-stderr" in flags else _io.StringIO(),
            None if "--no-display" in flags else [],
        )
        streams = sys.stdout, sys.stderr
        sys.stdout.flush()
        sys.stderr.flush()
        if captured._stdout is not None:
            sys.stdout = captured._stdout
        if captured._stderr is not None:
            sys.stderr = captured._stderr
        if captured.outputs is not None:
            _captured_outputs.append(captured.outputs)
        try:
            run_cell(cell, nested=True)
        finally:
            sys.stdout, sys.stderr = streams
            if captured.outputs is not None:
                _captured_outputs.pop()
            if names:
                self.user_ns[names[0]] = captured


# The displays of the `%%capture` cells running (innermost last).
_captured_outputs = []


class RichOutput:
    """One display kept by `%%capture` (IPython.utils.capture.RichOutput)."""

    def __init__(self, data):
        self.data = data

    def display(self):
        send_result(self.data, False)

    def __repr__(self):
        return "<RichOutput %s>" % ", ".join(sorted(self.data))


class CapturedIO:
    """What a `%%capture` cell printed and displayed (IPython.utils.capture.CapturedIO):
    `stdout`, `stderr`, `outputs`, and `show()` (also calling it) to show them."""

    def __init__(self, stdout, stderr, outputs):
        self._stdout = stdout
        self._stderr = stderr
        self.outputs = outputs

    @property
    def stdout(self):
        return self._stdout.getvalue() if self._stdout is not None else ""

    @property
    def stderr(self):
        return self._stderr.getvalue() if self._stderr is not None else ""

    def show(self):
        sys.stdout.write(self.stdout)
        sys.stderr.write(self.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        for output in self.outputs or ():
            output.display()

    __call__ = show

    def __str__(self):
        return self.stdout


def _duration(seconds):
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            return "%.3g %s" % (seconds / scale, unit)


class _Rich:
    """A value shown in given formats (IPython.display's HTML, Markdown...)."""

    def __init__(self, text=None, **formats):
        self._formats = {k: v for k, v in formats.items() if v is not None}
        self._text = text

    def __repr__(self):
        if self._text is not None:
            return self._text
        return "<IPython.core.display.%s object>" % type(self).__name__

    def _shellgate_formats(self):
        return dict(self._formats)


class _Display(_Rich):
    kind = "text"

    def __init__(self, data=None, url=None, filename=None, metadata=None, **_):
        if data is None and filename is not None:
            with open(filename, "rb" if self.binary else "r") as source:
                data = source.read()
        elif data is None and url is not None:
            data = url
        self.data = data
        formats = {self.kind: self._encoded(data)} if data is not None else {}
        super().__init__(**formats)

    binary = False

    def _encoded(self, data):
        return data


class HTML(_Display):
    kind = "html"


class Markdown(_Display):
    kind = "markdown"


class Latex(_Display):
    kind = "latex"


class Math(_Display):
    kind = "latex"

    def _encoded(self, data):
        return "$\\displaystyle %s$" % data.strip("$")


class SVG(_Display):
    kind = "svg"


class Javascript(_Display):
    kind = "javascript"


class JSON(_Display):
    kind = "json"

    def _encoded(self, data):
        return json.loads(data) if isinstance(data, str) else data


class Pretty(_Display):
    def __repr__(self):
        return str(self.data)


class Image(_Display):
    binary = True

    def __init__(self, data=None, url=None, filename=None, format=None, **options):
        if isinstance(data, str) and data.startswith(("http://", "https://")):
            url, data = data, None
        elif isinstance(data, str) and os.path.exists(data):
            filename, data = data, None
        name = (filename or url or "").lower()
        self.kind = "jpeg" if (format or "").lower() in ("jpeg", "jpg") or name.endswith((".jpg", ".jpeg")) else "png"
        if data is None and url is not None and filename is None:
            _Rich.__init__(self, html='<img src="%s"/>' % url)
            self.data = None
            return
        super().__init__(data=data, filename=filename, **options)

    def _encoded(self, data):
        return base64.b64encode(data).decode() if isinstance(data, (bytes, bytearray)) else data


def clear_output(wait=False):
    """Nothing is shown live: there is nothing to clear."""


class _Events:
    """`get_ipython().events`: callbacks are accepted (matplotlib and
    others register some); figures are shown after each cell anyway."""

    def register(self, *_):
        pass

    def unregister(self, *_):
        pass


def _shim_module(name):
    """The module `name` of the IPython stand-in."""
    module = types.ModuleType(name)
    if name in ("IPython", "IPython.core"):
        module.__path__ = []
    if name == "IPython":
        module.get_ipython = get_ipython
        module.version_info = (0, 0, 0, "shellgate")
        module.__version__ = "0.0.0+shellgate"
    elif name in ("IPython.display", "IPython.core.display", "IPython.core.display_functions"):
        for attribute, value in (("display", display), ("HTML", HTML), ("Markdown", Markdown),
                                 ("Latex", Latex), ("Math", Math), ("SVG", SVG), ("Javascript", Javascript),
                                 ("JSON", JSON), ("Image", Image), ("Pretty", Pretty),
                                 ("clear_output", clear_output)):
            setattr(module, attribute, value)
    elif name == "IPython.core.pylabtools":
        module.backend2gui = {}
    elif name == "IPython.core.getipython":
        module.get_ipython = get_ipython
    return module


_SHIM_NAMES = ("IPython", "IPython.display", "IPython.core", "IPython.core.display",
               "IPython.core.display_functions", "IPython.core.pylabtools", "IPython.core.getipython")


class _ShimFinder:
    """Finds the IPython stand-in when no IPython is installed (last on
    sys.meta_path: an IPython pip-installed later is found first)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in _SHIM_NAMES:
            return None
        import importlib.machinery

        return importlib.machinery.ModuleSpec(name, _ShimFinder, is_package=name in ("IPython", "IPython.core"))

    @staticmethod
    def create_module(spec):
        return _shim_module(spec.name)

    @staticmethod
    def exec_module(module):
        pass


def _install_ipython_module():
    """`get_ipython()` in the user's names, and `from IPython.display import
    display, HTML...` working though the image has no IPython; an IPython
    that is installed gets this kernel's display() (its own prints outside
    its shell)."""
    import importlib.util

    _main.__dict__["get_ipython"] = get_ipython
    if importlib.util.find_spec("IPython") is None:
        sys.meta_path.append(_ShimFinder)
        return
    try:
        import IPython.display

        IPython.display.display = display
        IPython.display.clear_output = clear_output
    except Exception:
        pass


def _pil_image_shown_on_show_and_save(module):
    """What E2B's template does to PIL (its startup script 0003_images.py):
    `image.show()` and `image.save(path)` display the image, so a cell that
    shows or saves one gets it as a PNG result."""
    image_class = module.Image
    original_save = image_class.save

    def save(image, fp, format=None, **options):
        if isinstance(fp, (str, os.PathLike)):
            display(image)
        return original_save(image, fp, format, **options)

    def show(image, title=None):
        display(image)

    image_class.save = save
    image_class.show = show


class _AfterImport:
    """Patches a module right after its first import (first on sys.meta_path;
    the module itself is found and loaded by the finders after it)."""

    patches = {"PIL.Image": _pil_image_shown_on_show_and_save}

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        patch = cls.patches.pop(name, None)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is cls or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


class _PatchingLoader:
    def __init__(self, loader, patch):
        self.loader = loader
        self.patch = patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            self.patch(module)
        except Exception:  # a patch that does not fit this version leaves the module as it is
            pass

    def __getattr__(self, name):
        return getattr(self.loader, name)


_shell = None


def get_ipython():
    global _shell
    if _shell is None:
        _shell = Shell()
    return _shell


# --- charts ---------------------------------------------------------------

# A matplotlib figure's data as E2B's `chart` (what e2b-code-interpreter's
# Chart models read): one axes is a line, scatter, bar, pie or
# box-and-whisker chart by what it holds; several make a superchart.


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if number != number or number in (float("inf"), float("-inf")):
        return None
    # matplotlib keeps some coordinates as float32: 60.0000017 is 60.
    number = round(number, 6)
    return int(number) if number.is_integer() and abs(number) < 2 ** 53 else number


def _tick(value):
    number = _number(value)
    return float(number) if isinstance(number, int) else number


def _significant(number):
    """E2B's `dynamic_round`: 8 digits less the number's magnitude (324 keeps 6
    significant digits, so 323.999991 is 324.0)."""
    from decimal import Decimal, localcontext

    exact = Decimal(str(number))
    with localcontext() as context:
        context.prec = max(1, 8 - exact.adjusted())
        return float(+exact)


def _datum(value):
    """A plotted value as the data holds it (E2B's points are the data's own
    values): an integer stays one, a float stays a float (0.0, not 0)."""
    import numbers

    if isinstance(value, numbers.Integral):
        return int(value)
    return _tick(value)


def _point(value, converter):
    """A data coordinate: a date as ISO text on a date axis, else a number."""
    if converter is not None:
        try:
            from matplotlib import dates

            if isinstance(converter, dates.DateConverter) or type(converter).__name__.endswith("DateConverter"):
                return dates.num2date(float(value)).isoformat()
        except Exception:
            pass
    return _datum(value)


def _axis_scale(ax, which):
    axis = ax.xaxis if which == "x" else ax.yaxis
    scale = axis.get_scale()
    if scale == "linear":
        try:
            from matplotlib import dates, category

            converter = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
            if isinstance(converter, category.StrCategoryConverter):
                return "categorical"
            if converter is not None and "Date" in type(converter).__name__:
                return "datetime"
        except Exception:
            pass
    return scale


def _unit(label):
    if not label:
        return None
    found = re.search(r"\s\(([^)]*)\)|\[([^\]]*)\]", label)
    return (found.group(1) or found.group(2)) if found else None


def _base_2d(ax, kind):
    x_label = ax.get_xlabel() or None
    y_label = ax.get_ylabel() or None
    return {
        "type": kind,
        "title": ax.get_title() or None,
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": _unit(x_label),
        "y_unit": _unit(y_label),
        "elements": [],
    }


def _ticks(ax, chart):
    for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        scale = _axis_scale(ax, which)
        converter = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
        ticks = axis.get_ticklocs()
        labels = [t.get_text() for t in axis.get_ticklabels()]
        chart[which + "_scale"] = scale
        if scale == "categorical":
            chart[which + "_ticks"] = labels
        elif scale == "datetime":
            chart[which + "_ticks"] = [_point(t, converter) for t in ticks]
        else:
            # Numbers, each a float (E2B's `[float(tick) ...]`: 0.0, not 0).
            chart[which + "_ticks"] = [_tick(t) for t in ticks]
        chart[which + "_tick_labels"] = labels


def _is_grid_line(line):
    x, y = line.get_xdata(), line.get_ydata()
    return len(x) == 2 and len(y) == 2 and (x[0] == x[1] or y[0] == y[1]) and not line.get_label().strip("_")


def _label(artist, fallback):
    label = artist.get_label() or ""
    return fallback if not label or label.startswith("_") else label


def _line_chart(ax):
    chart = _base_2d(ax, "line")
    _ticks(ax, chart)
    x_converter = ax.xaxis.get_converter() if hasattr(ax.xaxis, "get_converter") else ax.xaxis.converter
    for index, line in enumerate([l for l in ax.get_lines() if not _is_grid_line(l)], 1):
        xs, ys = line.get_xdata(), line.get_ydata()
        chart["elements"].append({
            "label": _label(line, "Line %d" % index),
            "points": [[_point(x, x_converter), _datum(y)] for x, y in zip(xs, ys)],
        })
    return chart


def _scatter_chart(ax):
    chart = _base_2d(ax, "scatter")
    _ticks(ax, chart)
    x_converter = ax.xaxis.get_converter() if hasattr(ax.xaxis, "get_converter") else ax.xaxis.converter
    for index, collection in enumerate(ax.collections, 1):
        chart["elements"].append({
            "label": _label(collection, "Scatter %d" % index),
            "points": [[_point(x, x_converter), _datum(y)] for x, y in collection.get_offsets()],
        })
    return chart


def _bar_chart(ax):
    from matplotlib.container import BarContainer

    chart = _base_2d(ax, "bar")
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    horizontal = bool(containers) and all(getattr(c, "orientation", "vertical") == "horizontal" for c in containers)
    if horizontal:
        chart["x_label"], chart["y_label"] = chart["y_label"], chart["x_label"]
        chart["x_unit"], chart["y_unit"] = chart["y_unit"], chart["x_unit"]
    category_axis = ax.yaxis if horizontal else ax.xaxis
    ticks = {}
    for location, label in zip(category_axis.get_ticklocs(), category_axis.get_ticklabels()):
        ticks[round(float(location), 6)] = label.get_text()
    for index, container in enumerate(containers, 1):
        group = _label(container, "Group %d" % index)
        for rect in container:
            if horizontal:
                at, value = rect.get_y() + rect.get_height() / 2, rect.get_width()
            else:
                at, value = rect.get_x() + rect.get_width() / 2, rect.get_height()
            label = ticks.get(round(at, 6))
            if label is None:
                label = str(_number(at))
            chart["elements"].append({"label": label, "group": group, "value": _number(value)})
    return chart


def _pie_chart(ax):
    from matplotlib.patches import Wedge

    chart = {"type": "pie", "title": ax.get_title() or None, "elements": []}
    for index, wedge in enumerate([p for p in ax.patches if isinstance(p, Wedge)], 1):
        chart["elements"].append({
            "label": _label(wedge, "Wedge %d" % index),
            "angle": abs(_significant(float(wedge.theta2) - float(wedge.theta1))),
            "radius": _number(wedge.r),
        })
    return chart


def _box_chart(ax):
    """boxplot()'s artists read back: each box (a patch, or a closed line)
    spans the quartiles; inside it a flat line is the median; a vertical
    line from its edge is a whisker, whose far end is the min or max; lone
    markers over it are outliers. Vertical boxes (matplotlib's default)."""
    chart = _base_2d(ax, "box_and_whisker")
    boxes = []
    shapes = list(ax.patches) + [l for l in ax.get_lines() if len(l.get_xdata()) >= 5]
    for shape in shapes:
        try:
            if hasattr(shape, "get_path") and not hasattr(shape, "get_xdata"):
                vertices = shape.get_path().vertices
                xs, ys = list(vertices[:, 0]), list(vertices[:, 1])
            else:
                xs, ys = list(shape.get_xdata()), list(shape.get_ydata())
        except Exception:
            continue
        boxes.append({"left": min(xs), "right": max(xs), "q1": min(ys), "q3": max(ys),
                      "median": None, "min": min(ys), "max": max(ys), "outliers": []})
    boxes.sort(key=lambda b: b["left"])
    for line in ax.get_lines():
        xs, ys = [float(v) for v in line.get_xdata()], [float(v) for v in line.get_ydata()]
        if len(xs) >= 5 or not xs:
            continue
        for box in boxes:
            if not all(box["left"] - 1e-9 <= x <= box["right"] + 1e-9 for x in xs):
                continue
            if line.get_linestyle() in ("None", "none", "", " "):
                box["outliers"].extend(_number(y) for y in ys)
            elif len(ys) == 2 and ys[0] == ys[1] and box["q1"] < ys[0] < box["q3"] and xs[0] != xs[1]:
                box["median"] = ys[0]
            elif len(xs) == 2 and xs[0] == xs[1]:
                box["min"] = min(box["min"], *ys)
                box["max"] = max(box["max"], *ys)
            break
    labels = {round(float(at), 6): label.get_text() for at, label in zip(ax.xaxis.get_ticklocs(), ax.xaxis.get_ticklabels())}
    for index, box in enumerate(boxes, 1):
        middle = round((box["left"] + box["right"]) / 2, 6)
        median = box["median"] if box["median"] is not None else (box["q1"] + box["q3"]) / 2
        chart["elements"].append({
            "label": labels.get(middle) or str(index),
            "min": _number(box["min"]),
            "first_quartile": _number(box["q1"]),
            "median": _number(median),
            "third_quartile": _number(box["q3"]),
            "max": _number(box["max"]),
            "outliers": box["outliers"],
        })
    return chart


def _axes_chart(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text

    drawn = [a for a in ax.lines] + list(ax.collections) + list(ax.patches)
    drawn = [a for a in drawn if not isinstance(a, Text)]
    lines = [a for a in drawn if isinstance(a, Line2D)]
    if drawn and all(isinstance(a, Line2D) for a in drawn):
        # boxplot()'s default artists: per box a closed 5-point outline and
        # six more lines (two whiskers, two caps, the median, the fliers).
        outlines = [l for l in lines if len(l.get_xdata()) == 5
                    and l.get_xdata()[0] == l.get_xdata()[-1] and l.get_ydata()[0] == l.get_ydata()[-1]]
        if outlines and len(lines) == 7 * len(outlines):
            return _box_chart(ax)
        return _line_chart(ax)
    if drawn and all(isinstance(a, (PathPatch, Line2D)) for a in drawn) and any(isinstance(a, PathPatch) for a in drawn):
        return _box_chart(ax)
    drawn = [a for a in drawn if not (isinstance(a, Line2D) and _is_grid_line(a))]
    if drawn and all(isinstance(a, PathCollection) for a in drawn):
        return _scatter_chart(ax)
    if drawn and all(isinstance(a, Wedge) for a in drawn):
        return _pie_chart(ax)
    if drawn and all(isinstance(a, Rectangle) for a in drawn):
        return _bar_chart(ax)
    return {"type": "unknown", "title": ax.get_title() or None, "elements": []}


def chart_of(figure):
    """The figure's chart, or None for a figure with no data."""
    axes = figure.get_axes()
    if not axes or not any(ax.has_data() for ax in axes):
        return None
    if len(axes) > 1:
        title = figure._suptitle.get_text() if getattr(figure, "_suptitle", None) is not None else None
        return {"type": "superchart", "title": title or None, "elements": [_axes_chart(ax) for ax in axes]}
    return _axes_chart(axes[0])


# --- bash contexts ------------------------------------------------------

# A bash context's kernel (SHELLGATE_KERNEL_LANGUAGE=bash, popped at start)
# keeps one bash alive: each cell is sourced by it, so variables, functions
# and `cd` carry to the next, as in E2B's bash contexts.
_LANGUAGE = os.environ.pop("SHELLGATE_KERNEL_LANGUAGE", "python")
# The languages whose cells a runtime hosted by this kernel runs.
_HOSTED = ("javascript", "typescript", "java")


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
    # A SIGINT that lands in a command's child between its fork and its
    # exec is taken by the handler bash's child still has and lost with
    # the exec; bash, seeing the command not die of it, assumes it was
    # handled and runs no trap. So an interrupt the cell outlives is sent
    # again, a few times, within the engine's grace (three seconds).
    RESEND_AFTER = 0.5
    RESENDS = 4

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
        self.sent_at = 0.0

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
        self.sent_at = time.monotonic()
        self._send_interrupt()

    def _send_interrupt(self):
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

    def _status_line(self):
        """The cell's status line (empty if bash ended), sending an
        interrupt again while the cell outlives it."""
        import select

        resends = 0
        while True:
            # Never an unbounded wait: a signal handler's interrupt does not
            # end one (the wait resumes), and this loop must look again.
            ready, _, _ = select.select([self.status], [], [], self.RESEND_AFTER)
            if ready:
                return self.status.readline()
            late = self.interrupt_sent and time.monotonic() - self.sent_at >= self.RESEND_AFTER
            if late and resends < self.RESENDS:
                resends += 1
                self.sent_at = time.monotonic()
                self._send_interrupt()

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
                line = self._status_line()
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


# --- JavaScript, TypeScript and Java contexts -----------------------------

# Their kernel hosts one long-lived runtime fed cells on a pipe of its own,
# answering each with a JSON line ({"result": {...} | null} or {"error":
# {name, value, traceback}}) on another; its stdout and stderr are the
# kernel's (forwarded as events). A JavaScript or TypeScript context runs a
# Node REPL (declarations, require() and top-level await carry from cell to
# cell, as in `node`'s REPL; TypeScript has its types stripped by Node's
# own stripTypeScriptTypes first); a Java context runs JShell (snippets
# carry over, as in `jshell`; an execution's variables are system
# properties, as E2B's Java kernel gives them). An interrupt is SIGINT to
# the runtime, which stops the cell and keeps its state.
_JS_RUNNER = '// shellgate\'s JavaScript/TypeScript context: one Node REPL evaluating each\n// cell (declarations, top-level await and require() as in `node`\'s REPL);\n// cells come as JSON lines on one pipe, each answer is a JSON line on\n// another (their descriptors in SHELLGATE_JS_CELLS and SHELLGATE_JS_ANSWERS).\n(function shellgateRunner() {\n\'use strict\';\nconst fs = require(\'fs\');\nconst repl = require(\'repl\');\nconst util = require(\'util\');\nconst { PassThrough } = require(\'stream\');\nconst Module = require(\'module\');\nconst path = require(\'path\');\n\nconst typescript = process.env.SHELLGATE_JS_TYPESCRIPT === \'1\';\ndelete process.env.SHELLGATE_JS_TYPESCRIPT;\nconst cellsFd = Number(process.env.SHELLGATE_JS_CELLS);\nconst answers = fs.createWriteStream(null, { fd: Number(process.env.SHELLGATE_JS_ANSWERS) });\ndelete process.env.SHELLGATE_JS_CELLS;\ndelete process.env.SHELLGATE_JS_ANSWERS;\nconst server = repl.start({\n  input: new PassThrough(),\n  output: new PassThrough(),\n  terminal: false,\n  useGlobal: true,\n  prompt: \'\',\n  breakEvalOnSigint: true,\n});\n// Modules resolve from the working directory, as a script there would.\nglobalThis.require = Module.createRequire(path.join(process.cwd(), \'[cell]\'));\nlet pending = null;\n// The REPL\'s domain takes what a cell throws (and what its callbacks throw\n// later): it is the running cell\'s error.\nserver._domain.removeAllListeners(\'error\');\nserver._domain.on(\'error\', (error) => settle(error, undefined));\nprocess.on(\'SIGINT\', () => {\n  const interrupted = new Error(\'interrupted\');\n  interrupted.name = \'KeyboardInterrupt\';\n  settle(interrupted, undefined);\n});\n\nfunction settle(error, value) {\n  const done = pending;\n  pending = null;\n  if (done) done(error, value);\n}\n\nfunction answer(object) {\n  answers.write(JSON.stringify(object) + \'\\n\');\n}\n\nfunction described(error) {\n  // An incomplete cell (`1 +`) is the REPL\'s Recoverable, around the\n  // parser\'s SyntaxError.\n  if (error && error.constructor && error.constructor.name === \'Recoverable\') {\n    error = error.err instanceof Error ? error.err : new SyntaxError(\'Unexpected end of input\');\n  }\n  if (error instanceof Error || (error && typeof error.stack === \'string\')) {\n    const stack = String(error.stack || \'\')\n      .split(\'\\n\')\n      .filter((line) => !/^\\s+at /.test(line) || /\\[cell\\]/.test(line))\n      .join(\'\\n\');\n    return { name: error.name || \'Error\', value: String(error.message), traceback: stack };\n  }\n  return { name: \'Error\', value: util.inspect(error), traceback: \'\' };\n}\n\n// A static `import` is not allowed in the REPL: each one on a line of its\n// own becomes the require() Node would resolve it to (`var`, so running\n// the cell again declares it again).\nconst IMPORT = /^(\\s*)import\\s+(?:([\\w$]+)\\s*,?\\s*)?(?:\\*\\s+as\\s+([\\w$]+)|\\{([^}]*)\\})?\\s*(?:from\\s*)?([\'"][^\'"]+[\'"])\\s*;?\\s*$/;\n\nfunction required(code) {\n  return code\n    .split(\'\\n\')\n    .map((line) => {\n      const found = IMPORT.exec(line);\n      if (!found) return line;\n      const [, indent, fallback, namespace, names, source] = found;\n      const module = `require(${source})`;\n      const parts = [];\n      if (fallback) parts.push(`var ${fallback} = ((m) => (m && m.__esModule && \'default\' in m ? m.default : m))(${module});`);\n      if (namespace) parts.push(`var ${namespace} = ${module};`);\n      if (names !== undefined) {\n        const bound = names\n          .split(\',\')\n          .map((name) => name.trim())\n          .filter(Boolean)\n          .map((name) => name.replace(/\\s+as\\s+/, \': \'));\n        parts.push(`var { ${bound.join(\', \')} } = ${module};`);\n      }\n      if (parts.length === 0) parts.push(`${module};`);\n      return indent + parts.join(\' \');\n    })\n    .join(\'\\n\');\n}\n\nfunction stripped(code) {\n  code = required(code);\n  if (!typescript) return code;\n  if (typeof Module.stripTypeScriptTypes !== \'function\') {\n    throw new Error(\'this Node has no TypeScript support (module.stripTypeScriptTypes)\');\n  }\n  try {\n    return Module.stripTypeScriptTypes(code, { mode: \'transform\' });\n  } catch (error) {\n    if (error && error.code === \'ERR_INVALID_TYPESCRIPT_SYNTAX\') throw error;\n    return Module.stripTypeScriptTypes(code);\n  }\n}\n\nfunction result(value) {\n  if (value === undefined) return null;\n  const shown = { text: util.inspect(value, { depth: 4, maxArrayLength: 200 }) };\n  if (value !== null && typeof value === \'object\') {\n    try {\n      const json = JSON.parse(JSON.stringify(value));\n      if (json !== null && typeof json === \'object\') shown.json = json;\n    } catch (_) {\n      // Not JSON (a cycle, a BigInt): its text is enough.\n    }\n  }\n  return shown;\n}\n\nfunction run(cell) {\n  return new Promise((resolve) => {\n    pending = (error, value) => resolve([error, value]);\n    let code;\n    try {\n      code = stripped(cell.code);\n    } catch (error) {\n      settle(error, undefined);\n      return;\n    }\n    for (const [name, value] of Object.entries(cell.env || {})) process.env[name] = String(value);\n    server.eval(code, server.context, \'[cell]\', (error, value) => settle(error, value));\n  });\n}\n\nconst lines = require(\'readline\').createInterface({ input: fs.createReadStream(null, { fd: cellsFd }) });\nconst queue = [];\nlet busy = false;\nlines.on(\'line\', (line) => {\n  queue.push(JSON.parse(line));\n  next();\n});\nlines.on(\'close\', () => process.exit(0));\n\nasync function next() {\n  if (busy || queue.length === 0) return;\n  busy = true;\n  const cell = queue.shift();\n  const saved = {};\n  for (const name of Object.keys(cell.env || {})) saved[name] = process.env[name];\n  const [error, value] = await run(cell);\n  for (const [name, value] of Object.entries(saved)) {\n    if (value === undefined) delete process.env[name];\n    else process.env[name] = value;\n  }\n  if (error) answer({ error: described(error) });\n  else answer({ result: result(value) });\n  busy = false;\n  next();\n}\n})();\n'

_JAVA_RUNNER = '// shellgate\'s Java context: one JShell evaluating each cell\'s snippets\n// (declarations carry from cell to cell, as in `jshell`). Cells come as\n// base64 lines on one pipe, answers go as JSON lines on another (their\n// descriptors in SHELLGATE_JAVA_CELLS and SHELLGATE_JAVA_ANSWERS).\nimport java.io.BufferedReader;\nimport java.io.FileInputStream;\nimport java.io.FileOutputStream;\nimport java.io.InputStreamReader;\nimport java.io.PrintStream;\nimport java.nio.charset.StandardCharsets;\nimport java.util.Base64;\nimport java.util.List;\nimport java.util.stream.Collectors;\n\nimport jdk.jshell.Diag;\nimport jdk.jshell.EvalException;\nimport jdk.jshell.JShell;\nimport jdk.jshell.JShellException;\nimport jdk.jshell.Snippet;\nimport jdk.jshell.SnippetEvent;\nimport jdk.jshell.SourceCodeAnalysis;\n\npublic class ShellgateJava {\n    public static void main(String[] arguments) throws Exception {\n        BufferedReader cells = new BufferedReader(new InputStreamReader(\n                new FileInputStream("/proc/self/fd/" + System.getenv("SHELLGATE_JAVA_CELLS")),\n                StandardCharsets.UTF_8));\n        PrintStream answers = new PrintStream(\n                new FileOutputStream("/proc/self/fd/" + System.getenv("SHELLGATE_JAVA_ANSWERS")),\n                true, StandardCharsets.UTF_8);\n        JShell shell = JShell.builder().out(System.out).err(System.err).build();\n        // E2B\'s Java kernel (IJava, on Java 11) sends each flush of System.out\n        // and System.err as its own message, and println flushes its text and\n        // then the line end. The snippets\' streams do the same here: each\n        // flush ends with the kernel\'s chunk mark (it forwards each chunk as\n        // one message), and the streams are PrintStream subclasses, whose\n        // println writes the text and the line end apart on any Java.\n        String chunkEnd = quoted(System.getenv("SHELLGATE_CHUNK_END"));\n        for (String stream : new String[] {"Out", "Err"}) {\n            shell.eval("System.set" + stream + "(new java.io.PrintStream(new java.io.OutputStream() {"\n                    + " final java.io.PrintStream target = System." + stream.toLowerCase() + ";"\n                    + " final byte[] end = " + chunkEnd + ".getBytes(java.nio.charset.StandardCharsets.ISO_8859_1);"\n                    + " public void write(int b) { write(new byte[] {(byte) b}, 0, 1); }"\n                    + " public void write(byte[] b, int off, int len) { synchronized (target) {"\n                    + " target.write(b, off, len); target.write(end, 0, end.length); target.flush(); } }"\n                    + " }, true) {});");\n        }\n        // The interrupt stops the running snippet; JShell and its state stay.\n        sun.misc.Signal.handle(new sun.misc.Signal("INT"), signal -> shell.stop());\n        answers.println("{\\"ready\\":true}");\n        // E2B\'s Java kernel gives an execution\'s variables as system\n        // properties: set in the JShell\'s JVM for the cell, restored after.\n        shell.eval("class ShellgateProperties {"\n                + " static java.util.Map<String, String> saved = new java.util.HashMap<>();"\n                + " static void set(String name, String value) {"\n                + " saved.putIfAbsent(name, System.getProperty(name)); System.setProperty(name, value); }"\n                + " static void restore() { saved.forEach((name, value) -> {"\n                + " if (value == null) System.clearProperty(name); else System.setProperty(name, value); });"\n                + " saved.clear(); } }");\n        String line;\n        while ((line = cells.readLine()) != null) {\n            // The cell, then its variables as name:value pairs, all base64.\n            String[] fields = line.trim().split(" ");\n            String code = decoded(fields[0]);\n            for (int i = 1; i < fields.length; i++) {\n                String[] pair = fields[i].split(":", 2);\n                if (pair.length == 2) {\n                    shell.eval("ShellgateProperties.set(" + quoted(decoded(pair[0])) + ", "\n                            + quoted(decoded(pair[1])) + ");");\n                }\n            }\n            String answer = run(shell, code);\n            if (fields.length > 1) {\n                shell.eval("ShellgateProperties.restore();");\n            }\n            answers.println(answer);\n        }\n        shell.close();\n    }\n\n    static String run(JShell shell, String code) {\n        SourceCodeAnalysis analysis = shell.sourceCodeAnalysis();\n        String remaining = code;\n        String value = null;\n        while (!remaining.isBlank()) {\n            SourceCodeAnalysis.CompletionInfo info = analysis.analyzeCompletion(remaining);\n            String source = info.source();\n            if (info.completeness() == SourceCodeAnalysis.Completeness.EMPTY) {\n                break;\n            }\n            if (source == null || !info.completeness().isComplete()) {\n                return error("CompilationError", "incomplete code: " + remaining.strip(), "");\n            }\n            remaining = info.remaining();\n            value = null;\n            for (SnippetEvent event : shell.eval(source)) {\n                if (event.causeSnippet() != null) {\n                    continue;\n                }\n                JShellException thrown = event.exception();\n                if (thrown != null) {\n                    String name = thrown instanceof EvalException\n                            ? ((EvalException) thrown).getExceptionClassName()\n                            : thrown.getClass().getName();\n                    java.io.StringWriter trace = new java.io.StringWriter();\n                    thrown.printStackTrace(new java.io.PrintWriter(trace));\n                    return error(name, String.valueOf(thrown.getMessage()), trace.toString());\n                }\n                if (event.status() == Snippet.Status.REJECTED) {\n                    List<Diag> diagnostics = shell.diagnostics(event.snippet()).collect(Collectors.toList());\n                    String message = diagnostics.stream()\n                            .map(d -> d.getMessage(null))\n                            .collect(Collectors.joining("\\n"));\n                    return error("CompilationError", message, source);\n                }\n                if (event.snippet().kind() == Snippet.Kind.EXPRESSION\n                        || (event.snippet().kind() == Snippet.Kind.VAR\n                            && event.snippet().subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND)) {\n                    value = event.value();\n                }\n            }\n        }\n        if (value == null) {\n            return "{\\"result\\":null}";\n        }\n        return "{\\"result\\":{\\"text\\":" + quoted(value) + "}}";\n    }\n\n    static String decoded(String field) {\n        return new String(Base64.getDecoder().decode(field), StandardCharsets.UTF_8);\n    }\n\n    static String error(String name, String value, String traceback) {\n        return "{\\"error\\":{\\"name\\":" + quoted(name) + ",\\"value\\":" + quoted(value)\n                + ",\\"traceback\\":" + quoted(traceback) + "}}";\n    }\n\n    static String quoted(String text) {\n        StringBuilder out = new StringBuilder("\\"");\n        for (char c : text.toCharArray()) {\n            switch (c) {\n                case \'"\': out.append("\\\\\\""); break;\n                case \'\\\\\': out.append("\\\\\\\\"); break;\n                case \'\\n\': out.append("\\\\n"); break;\n                case \'\\r\': out.append("\\\\r"); break;\n                case \'\\t\': out.append("\\\\t"); break;\n                default:\n                    if (c < 0x20) {\n                        out.append(String.format("\\\\u%04x", (int) c));\n                    } else {\n                        out.append(c);\n                    }\n            }\n        }\n        return out.append(\'"\').toString();\n    }\n}\n'


class Runtime:
    def __init__(self, language):
        cells_read, cells_write = os.pipe()
        answers_read, answers_write = os.pipe()
        env = dict(os.environ)
        self.language = language
        if language == "java":
            import tempfile

            source = os.path.join(tempfile.mkdtemp(prefix="shellgate-java-"), "ShellgateJava.java")
            with open(source, "w", encoding="utf-8") as out:
                out.write(_JAVA_RUNNER)
            # Quick to start: the cells are small, the JIT's top tier is not
            # worth its start-up.
            argv = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", source]
            env["SHELLGATE_JAVA_CELLS"] = str(cells_read)
            env["SHELLGATE_JAVA_ANSWERS"] = str(answers_write)
            env["SHELLGATE_CHUNK_END"] = _chunk_end.decode("latin-1")
        else:
            argv = ["node", "--disable-warning=ExperimentalWarning", "-e", _JS_RUNNER]
            env["SHELLGATE_JS_CELLS"] = str(cells_read)
            env["SHELLGATE_JS_ANSWERS"] = str(answers_write)
            if language == "typescript":
                env["SHELLGATE_JS_TYPESCRIPT"] = "1"
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(cells_read, answers_write), env=env)
        os.close(cells_read)
        os.close(answers_write)
        self.cells = os.fdopen(cells_write, "wb", buffering=0)
        self.answers = os.fdopen(answers_read, "rb", buffering=0)
        self.ready = language != "java"

    def interrupt(self):
        try:
            os.kill(self.process.pid, signal.SIGINT)
        except OSError:
            pass

    def _answer(self):
        line = b""
        while not line.endswith(b"\n"):
            try:
                chunk = self.answers.readline()
            except InterruptedError:
                continue
            if not chunk:
                return None
            line += chunk
        return json.loads(line)

    def run(self, code, env):
        """The cell's answer, None if the runtime ended."""
        if not self.ready:
            # JShell says it is ready once it started (an interrupt before
            # that would end the JVM: none is sent until then).
            if self._answer() is None:
                return None
            self.ready = True
        if self.language == "java":
            # The cell, then its variables (JShell sets them as system
            # properties for the cell, as E2B's Java kernel does).
            fields = [base64.b64encode(code.encode())]
            for name, value in env.items():
                fields.append(base64.b64encode(str(name).encode()) + b":" + base64.b64encode(str(value).encode()))
            request = b" ".join(fields) + b"\n"
        else:
            request = (json.dumps({"code": code, "env": {str(k): str(v) for k, v in env.items()}}) + "\n").encode()
        try:
            self.cells.write(request)
        except OSError:
            return None
        return self._answer()


_runtime = None


def run_hosted_cell(code, env):
    global _runtime, _count, _executing
    _count += 1
    if _runtime is None or _runtime.process.poll() is not None:
        try:
            _runtime = Runtime(_LANGUAGE)
        except OSError as error:
            _runtime = None
            emit({"ev": "error", "name": "RuntimeNotFound",
                  "value": "this sandbox's image cannot run %s: %s" % (_LANGUAGE, error), "traceback": ""})
            return
    _executing = True
    try:
        answer = _runtime.run(code, env)
    finally:
        _executing = False
    sync_streams()
    if answer is None:
        _runtime = None
        emit({"ev": "error", "name": "Error", "value": "%s exited (the next cell starts it again)" % _LANGUAGE,
              "traceback": ""})
    elif answer.get("error"):
        error = answer["error"]
        emit({"ev": "error", "name": str(error.get("name", "Error")), "value": str(error.get("value", "")),
              "traceback": str(error.get("traceback", ""))})
    elif answer.get("result"):
        send_result(answer["result"], True)


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
    if _LANGUAGE in _HOSTED:
        try:
            run_hosted_cell(request.get("code", ""), env)
        finally:
            sync_streams()
        return
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({str(k): str(v) for k, v in env.items()})
    installed = _install_tools(request.get("tools") or [])
    try:
        run_cell(request.get("code", ""))
    finally:
        _remove_tools(installed)
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


# --- the client's tools, called from code ----------------------------------

# An execution may name tools of the client's (Anthropic's programmatic tool
# calling): each becomes a function of the cell's namespace for that
# execution. A call sends {"ev": "tool_calls", "calls": [{"id", "name",
# "input"}]} and waits for {"op": "tool_result", "id", "content", "error"}
# (read by the request reader), whose `content` is the call's return value
# (a string, as the client's tool_result gave it); `error` "tool" raises
# ToolError with it, "timeout" TimeoutError. Called outside an event loop
# the function blocks until its result comes; called on one (a cell with a
# top-level `await`, or code under asyncio.run) it returns a future to
# await, and the calls made before the loop next runs are sent together,
# so `asyncio.gather` waits on them all at once. The kernel says
# {"ev": "tool_answered", "id"} as each result arrives (the caller's clock
# does not run while the code waits on the client).


class ToolError(RuntimeError):
    """The client's tool answered with an error (`is_error`)."""


builtins.ToolError = ToolError
_tool_lock = threading.Lock()
_tool_waits = {}  # call id -> _ToolWait
_tool_batch = []  # calls made on an event loop, not yet sent


class _ToolWait:
    def __init__(self, loop=None, future=None):
        self.event = threading.Event()
        self.outcome = None
        self.loop = loop
        self.future = future


def _tool_outcome(request):
    content = request.get("content")
    if not isinstance(content, str):
        content = json.dumps(content)
    error = request.get("error")
    if error == "timeout":
        return TimeoutError(content)
    if error:
        return ToolError(content)
    return content


def _settle(future, outcome):
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _answer_tool(request):
    """A client's result for a call (on the request reader's thread)."""
    with _tool_lock:
        wait = _tool_waits.pop(request.get("id"), None)
    if wait is None:
        return
    emit({"ev": "tool_answered", "id": request.get("id")})
    outcome = _tool_outcome(request)
    if wait.future is not None:
        wait.loop.call_soon_threadsafe(_settle, wait.future, outcome)
    else:
        wait.outcome = outcome
        wait.event.set()


def _send_tool_batch():
    with _tool_lock:
        calls = list(_tool_batch)
        del _tool_batch[:]
    if calls:
        emit({"ev": "tool_calls", "calls": calls})


def _tool_function(spec):
    name = spec["name"]
    params = [p for p in spec.get("params") or [] if isinstance(p, str)]
    refused = spec.get("refused")

    def call(*args, **kwargs):
        if refused:
            raise PermissionError(refused)
        if len(args) > len(params):
            raise TypeError("%s() takes at most %d positional arguments (%s)"
                            % (name, len(params), ", ".join(params) or "none"))
        tool_input = dict(zip(params, args))
        for key, value in kwargs.items():
            if key in tool_input:
                raise TypeError("%s() got multiple values for argument %r" % (name, key))
            tool_input[key] = value
        call_id = "toolu_" + secrets.token_hex(12)
        entry = {"id": call_id, "name": name, "input": tool_input}
        try:
            import asyncio

            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            future = loop.create_future()
            with _tool_lock:
                _tool_waits[call_id] = _ToolWait(loop, future)
                _tool_batch.append(entry)
                first = len(_tool_batch) == 1
            if first:
                loop.call_soon(_send_tool_batch)
            return future
        wait = _ToolWait()
        with _tool_lock:
            _tool_waits[call_id] = wait
        try:
            sync_streams()
            emit({"ev": "tool_calls", "calls": [entry]})
            wait.event.wait()
        finally:
            with _tool_lock:
                _tool_waits.pop(call_id, None)
        if isinstance(wait.outcome, BaseException):
            raise wait.outcome
        return wait.outcome

    call.__name__ = call.__qualname__ = name
    call.__doc__ = spec.get("description") or None
    return call


def _install_tools(specs):
    """Defines the execution's tools in the cell's namespace; returns what
    they shadowed, to put back after."""
    import keyword

    installed = {}
    for spec in specs:
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            continue
        function = _tool_function(spec)
        installed[name] = (function, _user.get(name, _MISSING))
        _user[name] = function
    return installed


def _remove_tools(installed):
    for name, (function, before) in installed.items():
        if _user.get(name) is function:
            if before is _MISSING:
                _user.pop(name, None)
            else:
                _user[name] = before
    with _tool_lock:
        _tool_waits.clear()
        del _tool_batch[:]


_MISSING = object()


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
            elif isinstance(request, dict) and request.get("op") == "tool_result":
                _answer_tool(request)
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
    if _LANGUAGE == "python":
        _install_ipython_module()
        sys.meta_path.insert(0, _AfterImport)
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
