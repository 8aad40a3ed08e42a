"""What an operator of one box relies on, driven through the real binary:
the Grafana dashboard under deploy/monitoring queries only metrics the
server exports, and `shellgate backup` copies a serving box into a
directory that, copied to a new data directory, serves everything again."""

import io
import json
import os
import re
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

from conftest import BINARY, ROOT, Server, exec_commands, wait_until

DASHBOARD = ROOT / "deploy" / "monitoring" / "grafana-dashboard.json"
SCRAPE_CONFIG = ROOT / "deploy" / "monitoring" / "prometheus.yml"
METRIC = re.compile(r"\bshellgate_[a-z_]+\b")


def exported_metrics(text: str) -> set:
    """The metric names of an exposition: each `# TYPE`'s family and each
    sample's name (a histogram's `_bucket`, `_sum`, `_count`)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def dashboard_queries() -> list:
    return [target["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"]
            for target in panel["targets"]]


@pytest.mark.single_box("reads one server's own /metrics")
def test_the_dashboard_queries_only_metrics_the_server_exports(server):
    with urllib.request.urlopen(f"http://{server.host}:{server.port}/metrics", timeout=30) as answer:
        exposition = answer.read().decode()
    exported = exported_metrics(exposition)
    queries = dashboard_queries()
    assert queries, f"no queries in {DASHBOARD}"
    queried = {name for query in queries for name in METRIC.findall(query)}
    unknown = sorted(queried - exported)
    assert not unknown, f"the dashboard queries {unknown}, which /metrics does not export:\n{exposition}"
    # Every family the server exports has a panel (a histogram by its parts).
    families = {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")}
    shown = {name for name in families if any(name in query for query in queries)}
    assert shown == families, f"no panel for {sorted(families - shown)}"
    assert "metrics_path: /metrics" in SCRAPE_CONFIG.read_text()


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BINARY), "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=600)


def restored_copy(backup: Path) -> Path:
    """The backup copied to a new data directory, as the guide says."""
    restored = Path(tempfile.mkdtemp(prefix="shellgate-py-restored-"))
    restored.rmdir()
    copied = subprocess.run(["cp", "-a", "--sparse=always", str(backup), str(restored)],
                            capture_output=True, text=True)
    assert copied.returncode == 0, copied.stderr
    return restored


@pytest.mark.single_box("backs up one server's data directory")
def test_a_box_backed_up_while_it_serves_is_served_again_from_the_copy():
    work = Path(tempfile.mkdtemp(prefix="shellgate-py-backup-"))
    # Traversable by every user, as a deployment's is (sandboxes reach it).
    work.chmod(0o755)
    data_dir = work / "data"
    data_dir.mkdir(mode=0o755)
    backup = work / "backup"
    restored = None
    original = Server(data_dir).start()
    try:
        client = original.client()
        container = client.containers.create(name="kept")
        wrote = exec_commands(client, container.id, ["echo kept-bytes > /mnt/data/kept.txt && sync"])
        assert wrote["output"][0]["outcome"] == {"type": "exit", "exit_code": 0}, wrote
        uploaded = client.files.create(file=("notes.txt", io.BytesIO(b"uploaded bytes")), purpose="user_data")
        made = cli(data_dir, "keys", "create", "--project", "alpha")
        assert made.returncode == 0, made.stderr
        new_key = made.stdout.strip().splitlines()[-1]

        done = cli(data_dir, "backup", str(backup))
        assert done.returncode == 0, f"backup failed: {done.stderr}"
        assert (backup / "shellgate.db").is_file(), sorted(p.name for p in backup.iterdir())
        left_out = {"spool", "skill-mounts", ".partial", "shellgate.db-wal"}
        assert not left_out & {p.name for p in backup.iterdir()}, sorted(p.name for p in backup.iterdir())
        # Written after the backup: not in it.
        client.files.create(file=("later.txt", io.BytesIO(b"later")), purpose="user_data")
        again = cli(data_dir, "backup", str(backup))
        assert again.returncode != 0, f"a second backup over the first succeeded: {again.stderr}"
    finally:
        original.stop()

    restored = restored_copy(backup)
    server = Server(restored).start()
    try:
        client = server.client()
        names = {c.name for c in client.containers.list()}
        assert "kept" in names, names
        seen = exec_commands(client, container.id, ["cat /mnt/data/kept.txt"])
        assert seen["output"][0]["stdout"] == "kept-bytes\n", seen
        files = {f.filename: f.id for f in client.files.list()}
        assert "notes.txt" in files and "later.txt" not in files, files
        assert client.files.content(uploaded.id).read() == b"uploaded bytes"
        with_new_key = server.client(new_key)
        assert container.id in {c.id for c in with_new_key.containers.list()}, "the key made before the backup"
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(work), str(restored)], check=False)


def test_completions_the_manual_and_serve_help_come_from_the_command_line():
    for shell, mark in [("bash", "_shellgate()"), ("zsh", "#compdef shellgate"), ("fish", "complete -c shellgate")]:
        completion = subprocess.run([str(BINARY), "completions", shell], capture_output=True, text=True, timeout=60)
        assert completion.returncode == 0 and mark in completion.stdout, (shell, completion.stderr, completion.stdout[:500])
        assert "backup" in completion.stdout, completion.stdout[:2000]
    page = subprocess.run([str(BINARY), "man"], capture_output=True, text=True, timeout=60)
    assert page.returncode == 0 and page.stdout.startswith(".ie"), (page.stderr, page.stdout[:500])
    assert ".TH shellgate 1" in page.stdout, page.stdout[:500]
    pages = Path(tempfile.mkdtemp(prefix="shellgate-py-man-"))
    try:
        written = subprocess.run([str(BINARY), "man", "--out-dir", str(pages)], capture_output=True, text=True, timeout=60)
        assert written.returncode == 0, written.stderr
        names = {p.name for p in pages.iterdir()}
        assert {"shellgate.1", "shellgate-serve.1", "shellgate-backup.1"} <= names, names
    finally:
        subprocess.run(["rm", "-rf", str(pages)], check=False)
    helped = subprocess.run([str(BINARY), "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0, helped.stderr
    for said in ["SHELLGATE_<NAME>", "shellgate config example", "deploy/shellgate.toml.example"]:
        assert said in helped.stdout, f"serve --help does not say {said!r}:\n{helped.stdout}"


def test_the_log_is_text_into_the_journal():
    """`serve` with stderr into a file and JOURNAL_STREAM naming that file,
    as systemd names the journal's stream, logs text (elsewhere off a
    terminal it is JSON, as every other suite's server logs)."""
    work = Path(tempfile.mkdtemp(prefix="shellgate-py-journal-"))
    work.chmod(0o755)
    log_path = work / "serve.log"
    log = open(log_path, "wb")
    stat = log_path.stat()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino}",
        "SHELLGATE_API_KEYS": "sk-journal-test-key-0123456789:alpha",
        "SHELLGATE_BUILD_DEFAULT_IMAGE": "false",
        "SHELLGATE_WARM_CONTAINERS": "0",
    }
    process = subprocess.Popen([str(BINARY), "--data-dir", str(work / "data"), "serve", "--listen", "127.0.0.1:0"],
                               env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        def serving():
            assert process.poll() is None, f"serve exited: {log_path.read_text()}"
            return "shellgate is serving" in log_path.read_text()

        assert wait_until(serving, 60), f"serve did not say it is serving: {log_path.read_text()}"
        text = log_path.read_text()
        assert "shellgate is serving on http://" in text, text
        assert not any(line.startswith("{") for line in text.splitlines()), text
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()
        subprocess.run(["rm", "-rf", str(work)], check=False)
