"""`shellgate local`: the client-side loop against shellgate's Responses
API with a scripted upstream model, run as a user runs it (the real
binary, in a scratch working directory)."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import BINARY, KEY_A

# `shellgate local`'s exit status off a terminal when its policy rejected a
# command the model asked for (the model still answered).
REJECTED = 3


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory(prefix="shellgate-local-") as tmp:
        yield Path(tmp)


def local(server, workdir, task, *options, input=None, timeout=120, env=None):
    audit = workdir / "audit.jsonl"
    command = [str(BINARY), "local", "--base-url", server.base_url, "--model", "scripted",
               "--api-key", KEY_A, "--audit", str(audit), *options, task]
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=timeout,
                          input=input, env={**os.environ, "SHELLGATE_LOG": "error", **(env or {})})
    records = [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []
    return done, records


def test_never_ask_runs_the_command_here_and_the_model_answers(server, workdir):
    done, records = local(server, workdir, "Execute: echo made here > out.txt && cat out.txt && pwd",
                          "--approve", "never-ask")
    assert done.returncode == 0, done.stderr
    assert (workdir / "out.txt").read_text() == "made here\n"
    # The model's answer on stdout; the command and its live output on stderr.
    assert done.stdout.startswith("Done: ") and "made here" in done.stdout, done.stdout
    assert "$ echo made here" in done.stderr and str(workdir) in done.stderr
    # The decision is written before the command runs, its outcome after.
    decided, record = records
    assert decided["stage"] == "decided" and "outcome" not in decided
    assert decided["decision"] == "approved" and decided["command"] == record["command"]
    assert record["stage"] == "done"
    assert record["decision"] == "approved" and record["by"] == "never-ask"
    assert record["outcome"] == {"type": "exit", "exit_code": 0}
    assert record["command"].startswith("echo made here") and record["cwd"] == str(workdir)
    assert record["response_id"].startswith("resp_") and record["call_id"]


def test_a_command_is_on_record_before_it_runs(server, workdir):
    """A command that ends `shellgate local` itself (here it kills its
    parent; `kill -9 -1` or a reboot do as much) still has its audit line:
    the decision is written before the command starts."""
    done, records = local(server, workdir, "Execute: kill -KILL $PPID", "--approve", "never-ask")
    assert done.returncode == -9, (done.returncode, done.stderr)
    [record] = records
    assert record["stage"] == "decided" and record["decision"] == "approved"
    assert record["command"].startswith("kill -KILL $PPID") and record["by"] == "never-ask"


def test_auto_runs_what_the_policy_allows_and_rejects_the_rest(server, workdir):
    policy = workdir / "policy.toml"
    policy.write_text('allow = [{ prefix = "echo" }, { regex = "^ls( |$)" }]\n'
                      'deny = [{ prefix = "echo secret" }]\n')
    done, records = local(server, workdir, "Execute: echo allowed", "--approve", "auto", "--policy", str(policy))
    assert done.returncode == 0 and "allowed" in done.stdout, done.stderr
    assert records[-1]["by"] == "policy allow prefix:echo"
    # Not allowed: rejected with a clear stderr and a non-zero exit to the
    # model; off a terminal, shellgate local itself then exits 3.
    done, records = local(server, workdir, "Execute: touch should-not-exist", "--approve", "auto",
                          "--policy", str(policy))
    assert done.returncode == REJECTED, done.stderr
    assert "the policy rejected 1 command" in done.stderr, done.stderr
    assert not (workdir / "should-not-exist").exists()
    assert "rejected" in done.stdout and "exit_code" in done.stdout and "1" in done.stdout, done.stdout
    assert records[-1]["decision"] == "denied"
    assert records[-1]["by"] == "auto: no rule allows `touch should-not-exist`"
    assert records[-1]["outcome"] == {"type": "not_run"}
    # Deny wins over allow.
    done, records = local(server, workdir, "Execute: echo secret stuff", "--approve", "auto", "--policy", str(policy))
    assert records[-1]["decision"] == "denied" and records[-1]["by"] == "policy deny prefix:echo secret"


def test_destructive_commands_are_denied_even_when_everything_else_runs(server, workdir):
    # Harmless if it ran (it writes nothing), but it matches `dd ... of=/dev/`.
    done, records = local(server, workdir, "Execute: dd if=/dev/zero of=/dev/null count=0",
                          "--approve", "never-ask")
    assert done.returncode == REJECTED, done.stderr
    assert records[-1]["decision"] == "denied" and records[-1]["by"] == "policy deny builtin:dd-to-device"
    assert "rejected" in done.stdout


# The example policy of docs/guide/local.md.
README_POLICY = ('allow = [{ prefix = "ls" }, { prefix = "git status" }, { regex = "^cat [^;&|]+$" }]\n'
                 'deny = [{ prefix = "git push" }]\n')


@pytest.mark.parametrize("task", [
    "Execute: git status >/dev/null || touch X",
    "Execute: cat $(touch X)",
    "Run `cat a\ntouch X`",
], ids=["or-after-an-allowed-prefix", "substitution-in-an-allowed-regex", "newline-after-an-allowed-regex"])
def test_auto_runs_a_line_only_if_every_command_in_it_is_allowed(server, workdir, task):
    """Each line would pass the example policy if it were matched as a
    whole string, and `touch X` would run unasked."""
    policy = workdir / "policy.toml"
    policy.write_text(README_POLICY)
    done, records = local(server, workdir, task, "--approve", "auto", "--policy", str(policy))
    assert done.returncode == REJECTED, done.stderr
    assert not (workdir / "X").exists()
    [record] = records
    assert record["decision"] == "denied" and record["outcome"] == {"type": "not_run"}
    assert record["by"].startswith("auto: "), record
    # What the model is told names the part no rule vouches for.
    assert "touch X" in record["by"] or "substitution" in record["by"], record


def test_auto_does_not_let_a_loop_variable_choose_the_config_an_allowed_command_reads(server, workdir):
    """Adversarial: `for HOME in ./evil` assigns HOME as `HOME=`
    does, so the example policy's `git status` rule would run git with a config from the
    working directory, whose core.fsmonitor git runs (`touch X`)."""
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    (workdir / "evil").mkdir()
    (workdir / "evil" / ".gitconfig").write_text('[core]\n\tfsmonitor = "touch X; false"\n')
    policy = workdir / "policy.toml"
    policy.write_text(README_POLICY)
    done, records = local(server, workdir, "Execute: for HOME in ./evil; do git status; done",
                          "--approve", "auto", "--policy", str(policy))
    assert done.returncode == REJECTED, done.stderr
    assert not (workdir / "X").exists()
    [record] = records
    assert record["decision"] == "denied" and record["outcome"] == {"type": "not_run"}, record
    assert record["by"] == "auto: it sets the shell variable HOME", record


def test_auto_runs_a_compound_line_whose_every_command_is_allowed(server, workdir):
    policy = workdir / "policy.toml"
    policy.write_text(README_POLICY)
    (workdir / "notes.txt").write_text("a note\n")
    done, records = local(server, workdir, "Execute: git status >/dev/null 2>&1; cat notes.txt | cat - && ls",
                          "--approve", "auto", "--policy", str(policy))
    assert done.returncode == 0, done.stderr
    decided, record = records
    assert decided["stage"] == "decided" and record["stage"] == "done"
    assert record["decision"] == "approved", record
    assert record["by"] == "policy allow prefix:git status, regex:^cat [^;&|]+$, prefix:ls"
    assert "a note" in done.stdout and "notes.txt" in done.stdout


def test_the_deny_list_sees_through_quotes_long_options_and_functions(server, workdir):
    """Spellings of always-denied commands (quotes, long options, a fork
    bomb in a function). Made harmless should they run (`--help`, `-V`, a fork bomb that is never called)
    and run in --sandbox besides; they must not run at all."""
    data_dir = workdir / "sg-data"
    data_dir.mkdir()
    os.chmod(workdir, 0o755)
    commands = ['rm -rf "/" --help', "rm --recursive --force / --help", "f(){ f|f& };true", 'mk""fs -V']
    done, records = local(server, workdir, "Execute in turns: " + " ||| ".join(commands),
                          "--approve", "never-ask", "--sandbox", "--data-dir", str(data_dir),
                          env={"SHELLGATE_ONESHOT_DIR": str(data_dir / "oneshot")})
    assert done.returncode == REJECTED, done.stderr
    assert [r["command"] for r in records] == commands
    assert [(r["decision"], r["by"]) for r in records] == [
        ("denied", "policy deny builtin:rm-recursive-system-path"),
        ("denied", "policy deny builtin:rm-recursive-system-path"),
        ("denied", "policy deny builtin:fork-bomb"),
        ("denied", "policy deny builtin:mkfs"),
    ], records
    assert "Usage" not in done.stdout and "util-linux" not in done.stdout, done.stdout


def test_never_ask_refuses_what_it_cannot_parse(server, workdir):
    """`\\ ` between words is skipped by tree-sitter but is an argument to
    bash: a line read two ways cannot be shown not to be denied."""
    done, records = local(server, workdir, "Execute: touch unparsed \\ b", "--approve", "never-ask")
    assert done.returncode == REJECTED, done.stderr
    assert not (workdir / "unparsed").exists()
    [record] = records
    assert record["decision"] == "denied" and record["by"].startswith("never-ask: the command parses differently")


def test_timeouts_and_non_zero_exits_go_back_to_the_model(server, workdir):
    done, records = local(server, workdir, "Execute: echo before; sleep 30 & sleep 30", "--approve", "never-ask",
                          "--timeout-ms", "500")
    assert done.returncode == 0, done.stderr
    assert records[-1]["outcome"] == {"type": "timeout"}
    assert "timeout" in done.stdout and "before" in done.stdout
    done, records = local(server, workdir, "Execute: echo failing >&2; exit 3", "--approve", "never-ask")
    assert records[-1]["outcome"] == {"type": "exit", "exit_code": 3}
    assert "failing" in done.stdout and "3" in done.stdout


def test_the_legacy_local_shell_loop(server, workdir):
    """seeds/002's loop: local_shell_call with an argv, local_shell_call_output
    sent back with previous_response_id, until the model answers."""
    done, records = local(server, workdir, "Execute: echo legacy > legacy.txt; cat legacy.txt",
                          "--approve", "never-ask", "--legacy")
    assert done.returncode == 0, done.stderr
    assert (workdir / "legacy.txt").read_text() == "legacy\n"
    assert done.stdout.startswith("Done: ") and "legacy" in done.stdout
    assert records[-1]["command"].startswith("bash -lc ")


def test_json_prints_the_final_response(server, workdir):
    done, _ = local(server, workdir, "Execute: echo for scripts", "--approve", "never-ask", "--json")
    assert done.returncode == 0, done.stderr
    response = json.loads(done.stdout)
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["output"][-1]["type"] == "message"
    assert "for scripts" in response["output"][-1]["content"][0]["text"]


def test_ask_shows_the_command_and_takes_the_users_answer(server, workdir):
    """On a terminal (here a pseudo-terminal made by `script`), each command
    is shown and waits for y/n."""
    cmd = " ".join([str(BINARY), "local", "--base-url", server.base_url, "--model", "scripted",
                    "--api-key", KEY_A, "--audit", str(workdir / "audit.jsonl"),
                    "'Execute: touch asked-and-approved'"])
    done = subprocess.run(["script", "-qec", cmd, "/dev/null"], cwd=workdir, input="maybe\ny\n",
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
    assert "$ touch asked-and-approved" in done.stdout and "[y/n]" in done.stdout
    assert (workdir / "asked-and-approved").exists()
    records = [json.loads(line) for line in (workdir / "audit.jsonl").read_text().splitlines()]
    assert records[-1]["by"] == "user" and records[-1]["decision"] == "approved"
    cmd = cmd.replace("asked-and-approved", "asked-and-refused")
    done = subprocess.run(["script", "-qec", cmd, "/dev/null"], cwd=workdir, input="n\n",
                          capture_output=True, text=True, timeout=120)
    assert not (workdir / "asked-and-refused").exists()
    records = [json.loads(line) for line in (workdir / "audit.jsonl").read_text().splitlines()]
    assert records[-1]["by"] == "user" and records[-1]["decision"] == "denied"


def test_a_local_skill_is_declared_to_the_model(server, upstream, workdir):
    skill = workdir / "greeter"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: greeter\ndescription: Greets people.\n---\nRun greet.sh\n")
    done, _ = local(server, workdir, "Execute: echo skills", "--approve", "never-ask", "--skill", str(skill))
    assert done.returncode == 0, done.stderr
    sent = [r for r in upstream.requests if "Execute: echo skills" in json.dumps(r.get("messages", []))]
    description = next(t["function"]["description"] for t in sent[0]["tools"] if t["function"]["name"] == "shell")
    assert f"greeter ({skill}/SKILL.md): Greets people." in description


def test_a_bad_policy_or_an_unreachable_server_fails_clearly(server, workdir):
    policy = workdir / "bad.toml"
    policy.write_text('allow = [{ regex = "(" }]\n')
    done, _ = local(server, workdir, "Execute: true", "--approve", "auto", "--policy", str(policy))
    assert done.returncode == 1 and "regex" in done.stderr
    done = subprocess.run([str(BINARY), "local", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                           "--approve", "never-ask", "--audit", str(workdir / "a.jsonl"), "hi"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot reach" in done.stderr


def test_sandbox_keeps_the_host_read_only_but_the_working_directory(server, workdir):
    outside = Path(tempfile.mkdtemp(prefix="shellgate-outside-", dir="/var/tmp"))
    try:
        data_dir = workdir / "sg-data"
        data_dir.mkdir()
        os.chmod(workdir, 0o755)
        task = ("Execute in turns: echo inside > inside.txt && cat inside.txt && "
                f"(echo escaped > {outside}/f) 2>&1; ls {outside}; echo net; "
                "(exec 3>/dev/tcp/1.1.1.1/80) 2>&1 | head -1; (sleep 300 &) ; echo started"
                " ||| pgrep -c sleep; id -un; cat inside.txt; ls " + str(data_dir) + " | wc -l")
        done, records = local(server, workdir, task, "--approve", "never-ask", "--sandbox",
                              "--data-dir", str(data_dir),
                              env={"SHELLGATE_ONESHOT_DIR": str(data_dir / "oneshot")})
        assert done.returncode == 0, done.stderr
        # The working directory is written, as the user, on the host.
        assert (workdir / "inside.txt").read_text() == "inside\n"
        assert (workdir / "inside.txt").stat().st_uid == os.getuid()
        # Nothing outside it: a read-only file system.
        assert not (outside / "f").exists()
        # The first command's output, echoed live on stderr.
        first = done.stderr
        assert "inside\n" in first and "Read-only file system" in first, first
        # No network.
        assert "Network is unreachable" in first or "Connection refused" in first or "denied" in first, first
        # The second command ran in the same container: the background
        # process is still there, the data directory is hidden (empty).
        assert [r["sandbox"] for r in records if r["stage"] == "done"] == [True, True]
        assert "1\nuser\ninside\n0\n" in done.stdout.replace("\\n", "\n"), done.stdout
        # The sandbox is gone after the run.
        left = list((data_dir / "oneshot").glob("*/containers/*"))
        assert left == [], left
    finally:
        subprocess.run(["rm", "-rf", str(outside)], check=False)


def test_sandbox_works_for_an_ordinary_user(server):
    """`--sandbox` without root: the same engine in rootless mode (the user
    alone mapped to the sandbox user), without cgroup limits it cannot make
    and says so."""
    top = Path(tempfile.mkdtemp(prefix="shellgate-local-user-", dir="/var/tmp"))
    try:
        binary, work, data = top / "shellgate", top / "work", top / "data"
        work.mkdir()
        data.mkdir()
        subprocess.run(["cp", str(BINARY), str(binary)], check=True)
        subprocess.run(["chown", "-R", "65534:65534", str(top)], check=True)
        os.chmod(top, 0o755)
        task = "Execute: echo mine > mine.txt; id -un; echo x > /var/tmp/not-here 2>&1 | head -1"
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", str(binary),
             "local", "--base-url", server.base_url, "--model", "scripted", "--api-key", KEY_A,
             "--approve", "never-ask", "--sandbox", "--data-dir", str(data),
             "--audit", str(work / "audit.jsonl"), task],
            cwd=work, capture_output=True, text=True, timeout=120,
            env={"PATH": "/usr/bin:/bin", "HOME": str(work), "SHELLGATE_LOG": "warn"})
        assert done.returncode == 0, done.stderr
        # Written in the working directory, as that user, on the host.
        assert (work / "mine.txt").read_text() == "mine\n"
        assert (work / "mine.txt").stat().st_uid == 65534
        assert '"stdout":"user\\n"' in done.stdout, done.stdout
        # Nothing outside it: a read-only file system.
        assert not Path("/var/tmp/not-here").exists()
        assert "Read-only file system" in done.stderr
        # It says which limits it could not have.
        assert "limit is off" in done.stderr
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)
