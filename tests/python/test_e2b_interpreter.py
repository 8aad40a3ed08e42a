"""E2B's code interpreter through the unmodified latest
`e2b_code_interpreter` SDK against a real `shellgate serve`: `run_code`
results, state, imports and the working directory across calls, a pandas
DataFrame (html), a matplotlib chart (png), an exception, a timeout that
keeps the context, a bash context, contexts created/listed/removed/restarted, and the
stdout/stderr callbacks."""
import base64

import pytest
import requests

from conftest import debian_server, e2b_environment
from e2b_code_interpreter import Sandbox
from e2b.exceptions import NotFoundException, SandboxException, TimeoutException


# The module's server is its own (a cluster of its own in cluster mode, run
# apart from the session's: one cluster at a time).
pytestmark = pytest.mark.fresh_server


@pytest.fixture(scope="module")
def server(upstream):
    """A server whose default image (E2B's code-interpreter template) is
    debian-12, as a deployment serving E2B's code interpreter would have."""
    with debian_server(upstream) as server:
        yield server


@pytest.fixture
def sandbox(server, monkeypatch):
    for name, value in e2b_environment(server).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    sandbox = Sandbox.create()
    yield sandbox
    sandbox.kill()


def test_run_code_keeps_state_imports_and_cwd_in_its_context(sandbox):
    execution = sandbox.run_code("1+1")
    assert execution.text == "2", execution
    assert execution.error is None
    assert execution.execution_count == 1
    sandbox.run_code("import os, json\nx = 41\nos.chdir('/tmp')")
    execution = sandbox.run_code("json.dumps({'x': x + 1}), os.getcwd()")
    assert execution.text == "('{\"x\": 42}', '/tmp')", execution
    # stdout and stderr, as logs and through the callbacks, in order.
    seen = []
    execution = sandbox.run_code(
        "import sys\nprint('out-1')\nprint('err-1', file=sys.stderr)\nos.system('echo from-shell')",
        on_stdout=lambda m: seen.append(("out", m.line)),
        on_stderr=lambda m: seen.append(("err", m.line)),
    )
    assert "".join(execution.logs.stdout) == "out-1\nfrom-shell\n", execution.logs
    assert execution.logs.stderr == ["err-1\n"], execution.logs
    assert ("err", "err-1\n") in seen and any(kind == "out" for kind, _ in seen), seen


def test_a_dataframe_is_html_a_chart_is_png_an_exception_is_an_error(sandbox):
    execution = sandbox.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    assert execution.error is None, execution.error
    main = [r for r in execution.results if r.is_main_result]
    assert len(main) == 1 and "<table" in main[0].html and "a" in main[0].text, execution

    execution = sandbox.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()"
    )
    assert execution.error is None, execution.error
    charts = [r for r in execution.results if r.png]
    assert len(charts) == 1, execution
    assert base64.b64decode(charts[0].png).startswith(b"\x89PNG\r\n\x1a\n")

    errors = []
    execution = sandbox.run_code("def f():\n    raise ValueError('bad value')\nf()", on_error=errors.append)
    assert execution.error.name == "ValueError"
    assert execution.error.value == "bad value"
    assert "raise ValueError('bad value')" in execution.error.traceback
    assert errors and errors[0].name == "ValueError"


def test_an_indented_cell_runs_and_a_string_result_is_its_text(sandbox):
    # E2B's own tests indent every multi-line cell: IPython dedents it.
    execution = sandbox.run_code(
        """
        def twice(x):
            return x * 2

        twice(21)
        """
    )
    assert execution.error is None and execution.text == "42", execution
    # A str result's text is the string, as E2B's server writes it.
    execution = sandbox.run_code("'bar'")
    assert execution.text == "bar", execution
    assert sandbox.run_code("[1, 'a']").text == "[1, 'a']"


def test_a_timeout_interrupts_and_the_context_keeps_its_variables(sandbox):
    sandbox.run_code("kept = 'still here'")
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time\ntime.sleep(100)", timeout=2)
    # The client leaving interrupts the execution (SIGINT), though it is
    # silent: the next one runs in the same kernel, its variables intact,
    # long before the sleep would have ended.
    execution = sandbox.run_code("kept", timeout=60)
    assert execution.text == "still here", execution


def test_a_bash_context_keeps_its_shell_state_and_survives_a_timeout(sandbox):
    context = sandbox.create_code_context(language="bash")
    assert context.language == "bash"
    execution = sandbox.run_code("x=41; cd /tmp", context=context)
    assert execution.error is None, execution
    execution = sandbox.run_code("echo $((x + 1)); pwd; whoami", context=context)
    assert "".join(execution.logs.stdout) == "42\n/tmp\nuser\n", execution
    # A failed cell is an error carrying its exit status.
    execution = sandbox.run_code("ls /nonexistent", context=context)
    assert execution.error is not None and execution.error.value == "2", execution
    with pytest.raises(TimeoutException):
        sandbox.run_code("sleep 100", context=context, timeout=2)
    assert "".join(sandbox.run_code("echo $x", context=context, timeout=60).logs.stdout) == "41\n"
    # language="bash" alone runs in the sandbox's default bash context.
    sandbox.run_code("y=7", language="bash")
    assert "".join(sandbox.run_code("echo $y", language="bash").logs.stdout) == "7\n"


def test_contexts_are_created_listed_restarted_and_removed(sandbox):
    context = sandbox.create_code_context(cwd="/tmp")
    assert context.language == "python" and context.cwd == "/tmp"
    sandbox.run_code("y = 5", context=context)
    assert sandbox.run_code("y * 2", context=context).text == "10"
    # Other contexts (the default one) do not share its variables.
    assert sandbox.run_code("'y' in globals()").text == "False"
    # The listing has the sandbox's default contexts (Python's and
    # JavaScript's, as E2B's sandboxes start with) first, then this one.
    listed = sandbox.list_code_contexts()
    assert [c.language for c in listed] == ["python", "javascript", "python"], listed
    assert listed[-1].id == context.id, listed
    sandbox.restart_code_context(context)
    assert sandbox.run_code("'y' in globals()", context=context).text == "False"
    sandbox.remove_code_context(context.id)
    assert context.id not in [c.id for c in sandbox.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=context)


def test_execute_needs_the_sandbox_s_token_and_another_project_sees_nothing(sandbox, server):
    root = f"http://{server.host}:{server.port}"
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49999"}
    refused = requests.post(f"{root}/execute", json={"code": "1"}, headers=headers, timeout=30)
    assert refused.status_code == 401, refused.text
    wrong = requests.post(f"{root}/execute", json={"code": "1"},
                          headers={**headers, "X-Access-Token": "not-it"}, timeout=30)
    assert wrong.status_code == 401, wrong.text
    # A token given on the contexts routes must be right too.
    wrong = requests.get(f"{root}/contexts", headers={**headers, "X-Access-Token": "not-it"}, timeout=30)
    assert wrong.status_code == 401, wrong.text
    unknown = requests.get(f"{root}/contexts", headers={**headers, "E2b-Sandbox-Id": "cntr_" + "0" * 32},
                           timeout=30)
    assert unknown.status_code == 404, unknown.text
    # Bad input is a 400 before anything runs.
    token = {"X-Access-Token": sandbox._envd_access_token}
    bad = requests.post(f"{root}/execute", json={"code": "1", "language": "cobol"},
                        headers={**headers, **token}, timeout=30)
    assert bad.status_code == 400, bad.text
    lines = requests.post(f"{root}/execute", json={"code": "6*7"}, headers={**headers, **token}, timeout=60)
    assert lines.status_code == 200 and lines.headers["content-type"] == "application/x-ndjson"
    assert '{"type":"result","text":"42","is_main_result":true}' in lines.text.splitlines(), lines.text


def test_jupyter_habits_shell_escapes_magics_and_top_level_await(sandbox):
    # smolagents' CodeAgent(executor_type="e2b") first cell: pip runs and
    # answers for itself (installed already, or its own error offline).
    execution = sandbox.run_code("!pip install pillow numpy")
    assert execution.error is None, execution
    assert "".join(execution.logs.stdout + execution.logs.stderr).strip(), execution.logs
    execution = sandbox.run_code("name = 'shellgate'\n!echo hello {name} $name\nfiles = !ls /\n'etc' in files")
    assert execution.error is None, execution
    assert "".join(execution.logs.stdout) == "hello shellgate shellgate\n", execution.logs
    assert execution.text == "True", execution
    execution = sandbox.run_code("%pip --version")
    assert execution.error is None and "pip" in "".join(execution.logs.stdout), execution
    execution = sandbox.run_code("%%bash\nx=4\necho $((x * 10))\n")
    assert "".join(execution.logs.stdout) == "40\n", execution
    execution = sandbox.run_code("%%writefile /tmp/habit.txt\nwritten by a cell\n")
    assert execution.error is None and "Writing /tmp/habit.txt" in "".join(execution.logs.stdout), execution
    assert sandbox.files.read("/tmp/habit.txt") == "written by a cell\n"
    execution = sandbox.run_code("%cd /tmp\n%pwd")
    assert execution.text == "/tmp", execution
    execution = sandbox.run_code("%matplotlib inline\n%time total = sum(range(10))\ntotal")
    assert execution.text == "45" and "Wall time" in "".join(execution.logs.stdout), execution
    # A magic IPython does not have either is IPython's UsageError.
    execution = sandbox.run_code("%nosuchmagic")
    assert execution.error is not None and execution.error.name == "UsageError", execution
    # `%` inside brackets is still Python's modulo; `;` hides the result.
    assert sandbox.run_code("(7\n %\n 4)").text == "3"
    assert sandbox.run_code("1 + 1;").text is None
    # Top-level await, on an event loop kept across cells.
    execution = sandbox.run_code(
        """
        import asyncio
        async def later(value):
            await asyncio.sleep(0.01)
            return value
        await later(7)
        """
    )
    assert execution.error is None and execution.text == "7", execution


def test_display_formats_and_matplotlib_charts(sandbox):
    execution = sandbox.run_code(
        "from IPython.display import display, HTML, Markdown, SVG, JSON, Latex\n"
        "display(HTML('<b>bold</b>'))\n"
        "display(Markdown('# title'))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>'))\n"
        "display(Latex(r'$x^2$'))\n"
        "JSON({'a': 1})"
    )
    assert execution.error is None, execution
    results = execution.results
    assert results[0].html == "<b>bold</b>" and results[1].markdown == "# title", results
    assert results[2].svg.startswith("<svg") and results[3].latex == "$x^2$", results
    assert results[4].is_main_result and results[4].json == {"a": 1}, results
    execution = sandbox.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    assert execution.results[0].data == {"a": [1, 2], "b": ["x", "y"]}, execution.results

    execution = sandbox.run_code(
        """
        import matplotlib.pyplot as plt
        plt.plot([1, 2, 3], [1, 4, 9], label='squares')
        plt.title('growth')
        plt.xlabel('Time (s)')
        plt.show()
        """
    )
    chart = execution.results[0].chart
    assert chart is not None and chart.type == "line", execution.results
    assert chart.title == "growth" and chart.x_unit == "s", chart.to_dict()
    assert chart.elements[0].label == "squares", chart.to_dict()
    assert chart.elements[0].points == [(1, 1), (2, 4), (3, 9)], chart.to_dict()
    # A number axis's ticks are floats, as E2B's are.
    assert chart.x_ticks and all(isinstance(tick, float) for tick in chart.x_ticks + chart.y_ticks), \
        chart.to_dict()
    cells = {
        "bar": "plt.bar(['a', 'b'], [3, 5], label='sales')",
        "scatter": "plt.scatter([1, 2], [3, 4])",
        "pie": "plt.pie([1, 3], labels=['small', 'big'])",
        "box_and_whisker": "plt.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4, 5, 6]], labels=['A', 'B'])",
    }
    for kind, code in cells.items():
        execution = sandbox.run_code(code + "\nplt.show()")
        chart = execution.results[0].chart if execution.results else None
        assert chart is not None and chart.type == kind, (kind, execution)
        if kind == "bar":
            assert [(e.label, e.group, e.value) for e in chart.elements] == [("a", "sales", 3), ("b", "sales", 5)]
        if kind == "pie":
            assert [(e.label, round(e.angle)) for e in chart.elements] == [("small", 90), ("big", 270)]
            # Rounded as E2B rounds them (matplotlib's float32 wedges are 323.999991...).
            shares = sandbox.run_code("plt.pie([9, 1], labels=['most', 'rest'])\nplt.show()").results[0].chart
            assert [e.angle for e in shares.elements] == [324, 36], shares.to_dict()
        if kind == "box_and_whisker":
            first = chart.elements[0]
            assert (first.label, first.min, first.median, first.max, first.outliers) == ("A", 1, 3.5, 5, [20]), \
                chart.to_dict()
    execution = sandbox.run_code(
        "fig, axes = plt.subplots(1, 2)\naxes[0].plot([1, 2], [3, 4])\naxes[1].bar(['a'], [1])\n"
        "fig.suptitle('both')\nplt.show()"
    )
    chart = execution.results[0].chart
    assert chart.type == "superchart" and chart.title == "both", execution.results
    assert [c.type for c in chart.elements] == ["line", "bar"], chart.to_dict()


def test_capture_and_pil_images_shown_or_saved(sandbox):
    execution = sandbox.run_code("%%capture kept\nprint('quiet')\n!echo from-shell\n'not shown'")
    assert execution.error is None and not execution.results, execution
    assert execution.logs.stdout == [] and execution.logs.stderr == [], execution.logs
    kept = sandbox.run_code("kept.stdout")
    assert kept.text == repr("quiet\nfrom-shell\n")[1:-1], kept
    assert "".join(sandbox.run_code("kept.show()").logs.stdout) == "quiet\nfrom-shell\n"
    # PIL's show() and save(path) display the image, as E2B's template has them.
    for last in ("image.show()", "image.save('/tmp/pil.png')"):
        execution = sandbox.run_code(
            "from PIL import Image\nimage = Image.new('RGB', (4, 4), 'red')\n" + last + "\nprint('done')"
        )
        assert execution.error is None and execution.results and execution.results[0].png, (last, execution)
        assert execution.logs.stdout == ["done\n"], (last, execution.logs)
    assert sandbox.files.read("/tmp/pil.png", format="bytes")[:4] == b"\x89PNG"


def test_javascript_typescript_and_java_contexts_keep_their_state(sandbox):
    context = sandbox.create_code_context(language="js")
    assert context.language == "javascript", context
    execution = sandbox.run_code("const base = 40\nlet step = 2\nconsole.log('adding')\nbase + step", context=context)
    assert execution.error is None and execution.text == "42", execution
    assert execution.logs.stdout == ["adding\n"], execution.logs
    execution = sandbox.run_code("const later = await Promise.resolve(base + 1)\nlater", context=context)
    assert execution.text == "41", execution
    execution = sandbox.run_code("({ sum: base + step, items: [1, 2] })", context=context)
    assert execution.results[0].json == {"sum": 42, "items": [1, 2]}, execution.results
    execution = sandbox.run_code("throw new TypeError('not a number')", context=context)
    assert execution.error.name == "TypeError" and execution.error.value == "not a number", execution
    assert sandbox.run_code("base * 2", context=context).text == "80"
    # language= alone runs in the sandbox's default context of that language.
    sandbox.run_code("var shared = 'js default'", language="javascript")
    assert sandbox.run_code("shared", language="js").text == "js default"

    context = sandbox.create_code_context(language="ts")
    assert context.language == "typescript", context
    execution = sandbox.run_code(
        "interface Point { x: number; y: number }\nconst p: Point = { x: 3, y: 4 }\nMath.hypot(p.x, p.y)",
        context=context,
    )
    assert execution.error is None and execution.text == "5", execution
    assert sandbox.run_code("enum Color { Red, Green }\nColor.Green + p.x", context=context).text == "4"

    context = sandbox.create_code_context(language="java")
    assert context.language == "java", context
    execution = sandbox.run_code("int x = 40;\nSystem.out.println(\"java\");\nx + 2", context=context, timeout=120)
    assert execution.error is None and execution.text == "42", execution
    # Each flush is a chunk of its own, and println flushes its text and then
    # the line end, as E2B's Java kernel (IJava on Java 11) sends them.
    assert execution.logs.stdout == ["java", "\n"], execution.logs
    execution = sandbox.run_code("String greeting = \"hi\";\ngreeting + \" \" + x", context=context, timeout=120)
    assert execution.text == "hi 40", execution
    # An execution's variables are system properties, as E2B's Java kernel gives them.
    execution = sandbox.run_code('System.getProperty("SG_PROP")', context=context, envs={"SG_PROP": "set"},
                                 timeout=120)
    assert execution.text == "set", execution
    execution = sandbox.run_code('System.getProperty("SG_PROP", "gone")', context=context, timeout=120)
    assert execution.text == "gone", execution
    execution = sandbox.run_code("int y = \"no\";", context=context, timeout=120)
    assert execution.error is not None and execution.error.name == "CompilationError", execution


def test_a_language_without_a_kernel_is_refused_in_e2b_s_words(sandbox):
    for language in ("r", "deno", "cobol"):
        with pytest.raises(SandboxException) as refused:
            sandbox.create_code_context(language=language)
        assert f"The '{language}' kernel is not available" in str(refused.value), refused.value
    with pytest.raises(SandboxException) as refused:
        sandbox.run_code("1", language="r")
    assert "The 'r' kernel is not available" in str(refused.value), refused.value
