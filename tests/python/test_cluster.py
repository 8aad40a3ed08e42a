"""shellgate as a cluster: three nodes in network namespaces of
their own, two stateless API replicas, one Postgres and one S3 (see
cluster.py), driven through the official OpenAI SDK and plain HTTP.

What is checked: the SDK works through either replica (containers, exec,
streamed exec, processes on a terminal over the WebSocket, Files API and
`file_ids`, container files, files by path); a container is found by its
id through any replica; a conversation that switched containers across
nodes continues the last one it names through either replica; a thousand containers spread over the nodes;
quotas hold when two replicas admit at once; a node killed with -9 has its
containers reported lost (409 `container_lost` on exec), the others
untouched and new ones placed on the survivors; a node stalled (SIGSTOP)
past the lost limit is answered for at once while it hangs, and gets its
containers back, files and processes, when it continues, as does a node
restarted after it was lost, while one deleted meanwhile leaves its disk;
a replica killed mid-request loses nothing another replica cannot redo,
and leaves no half-made container; no spelling of a node's own routes
passes a replica, and a node serves a forwarded request the API alone; a
node, a replica and a single box on Postgres exit 0 on SIGTERM. Every wait
is for a condition, with a deadline.
"""

import collections
import concurrent.futures
import io
import json
import os
import subprocess
import threading
import time

import anthropic
import openai
import pytest
import requests

from cluster import (FORWARD_HEADER, GATEWAY, LOST_AFTER_SECS, MEMBER_KEYS, NODE_NAMES,
                     NODE_PORT, ROOMY, SECRET_HEADER, Server, own_clusters_only, cluster, clusters)  # noqa: F401 (fixtures)
from conftest import (BINARY, exec_commands, free_port, processes_matching, raw_request,
                      wait_until)

pytestmark = own_clusters_only()

ALPHA, BETA = MEMBER_KEYS["alpha"], MEMBER_KEYS["beta"]
# How long after its last heartbeat a killed node must read lost, beyond
# `node_lost_after_secs`: a sweep interval and a loaded machine's delays.
LOST_SLACK_SECS = 10
# What a request sent while a node hangs is given to come back at all: the
# client's own timeout, far beyond what a replica takes to give up on the
# node, and short of forever (what it took when nothing gave up).
HANG_TIMEOUT_SECS = 90


def run(client, container_id, command, **options):
    """One command's (stdout, stderr, exit code)."""
    output = exec_commands(client, container_id, [command], **options)["output"][0]
    outcome = output["outcome"]
    return output["stdout"], output["stderr"], outcome.get("exit_code")


def in_parallel(function, items, workers=16):
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(function, items))


def delete_all(clients, ids):
    """Deletes containers, spread over the clients (replicas), in parallel."""
    def delete(pair):
        index, container_id = pair
        clients[index % len(clients)].containers.delete(container_id)
    in_parallel(delete, list(enumerate(ids)))


def sse_events(response):
    """The JSON `data:` of a server-sent event stream, as they come."""
    for line in response.iter_lines(decode_unicode=True):
        if line and line.startswith("data:"):
            yield json.loads(line[5:])


# --- the cluster as such ----------------------------------------------------


def test_the_nodes_are_listed_ready_to_admins_and_answer_only_the_cluster(cluster):
    nodes = {n["id"]: n for n in cluster.node_list()}
    assert sorted(nodes) == NODE_NAMES, nodes
    for name, node in nodes.items():
        assert node["object"] == "cluster.node"
        assert node["address"] == cluster.nodes[name].root
        assert node["status"] == "ready"
        assert abs(node["heartbeat_at"] - time.time()) < 10, node
        assert isinstance(node["containers"], int)
    # Through the other replica too; never to a member key or no key.
    assert sorted(n["id"] for n in cluster.node_list(1)) == NODE_NAMES
    for headers in [{"Authorization": f"Bearer {ALPHA}"}, {}]:
        refused = requests.get(f"{cluster.replicas[0].base_url}/cluster/nodes", headers=headers, timeout=10)
        assert refused.status_code in (401, 403), refused.text
    # A node answers a tenant's key with 401 unless the cluster's secret
    # comes along; its health check needs nothing.
    node = cluster.nodes["n1"]
    for secret in [None, "not-the-" + cluster.secret[8:]]:
        headers = {"Authorization": f"Bearer {ALPHA}", **({SECRET_HEADER: secret} if secret else {})}
        direct = requests.get(f"{node.base_url}/containers", headers=headers, timeout=10)
        assert direct.status_code == 401, direct.text
        assert direct.json()["error"]["code"] == "cluster_secret_required", direct.text
        made = requests.post(f"{node.base_url}/containers", headers=headers, json={"name": "sneak"}, timeout=10)
        assert made.status_code == 401, made.text
    assert requests.get(f"{node.root}/healthz", timeout=10).status_code == 200
    for replica in cluster.replicas:
        assert requests.get(f"{replica.root}/healthz", timeout=10).status_code == 200


# --- the replica/node trust boundary -----------------------------------------

# A node's own routes: its operator's, never a tenant's.
NODE_ONLY = [("GET", "internal/v1/node"), ("POST", "internal/v1/drain"), ("DELETE", "internal/v1/drain"),
             ("GET", "metrics")]


def spellings(tail: str, container_id: str) -> list:
    """Request targets that name `tail` (a node's own route) to some
    reader: raw, dot segments plain and percent-encoded, backslashes,
    empty segments, `;` parameters, letter case, double encoding, under
    every prefix the replica routes by and under a container that exists
    (which picks its node)."""
    first, _, rest = tail.partition("/")
    return [
        f"/{tail}", f"//{tail}", f"/./{tail}", f"/{tail.upper()}", f"/{tail.capitalize()}",
        f"/{first};x/{rest}" if rest else f"/{first};x",
        f"/v1/../{tail}", f"/v1/./../{tail}", f"/v1/../{tail.upper()}", f"/V1/../{tail}",
        f"/v1/%2e%2e/{tail}", f"/v1/%2E%2e/{tail}", f"/v1/.%2e/{tail}", f"/v1/%2e./{tail}", f"/%2e/{tail}",
        f"/v1/%2e%2e%2f{tail}", f"/v1/..%2f{tail}", f"/v1/..%2F{tail}", f"/v1%2f..%2f{tail}",
        f"/v1/%252e%252e/{tail}", f"/v1/..%00/{tail}",
        f"/v1\\..\\{tail}", f"/v1/..\\{tail}", f"/v1/%5c..%5c{tail}", f"/v1/..%5C{tail}",
        f"/v1/..;/{tail}", f"/v1/;/../{tail}",
        f"/api/v1/../../{tail}", f"/console/api/../../{tail}", f"/console/api/v1/../../../{tail}",
        f"/console/../{tail}", f"/v2/sandboxes/../../{tail}",
        f"/v1/containers/{container_id}/../../../{tail}",
        f"/v1/containers/{container_id}/%2e%2e/%2e%2e/%2e%2e/{tail}",
        f"/v1/containers/{container_id}/..%2f..%2f..%2f{tail}",
        f"/api/v1/containers/{container_id}/../../../../{tail}",
        f"/v1/containers/{container_id}/ports/8000/../../../../../{tail}",
        f"/v1/containers/{container_id}/files/../../../../{tail}",
        f"/sandboxes/{container_id}/../../{tail}",
        f"/v1/responses/resp_x/../../../{tail}",
    ]


def leaked(text: str) -> bool:
    """Whether an answer shows a node's state or its metrics."""
    return any(mark in text for mark in ['"status":"ready"', '"status":"draining"', "shellgate_", "# TYPE"])


def undrain_every_node(cluster) -> None:
    """Every node taken back by its operator (a test that drained one
    leaves the cluster as it found it)."""
    for name in cluster.node_names:
        requests.delete(f"{cluster.nodes[name].root}/internal/v1/drain",
                        headers={SECRET_HEADER: cluster.secret}, timeout=10)


def test_no_spelling_of_a_nodes_own_routes_passes_a_replica(cluster):
    """A replica refuses a path some reader would resolve (400) and never
    forwards a node's own routes (404), with or without a key, by path,
    by E2B's sandbox header or as an absolute-form target; no node drains,
    nothing of a node's state or metrics comes back."""
    container = cluster.client().containers.create(name="walls", memory_limit="1g")
    replica = cluster.replicas[0]
    node_host = f"{cluster.nodes['n1'].host}:{NODE_PORT}"
    try:
        for method, tail in NODE_ONLY:
            for key in [None, ALPHA, cluster.admin_key]:
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                cases = [(target, headers, True) for target in spellings(tail, container.id)]
                cases += [(f"/x/../{tail}", {**headers, "E2b-Sandbox-Id": container.id}, True),
                          (f"/{tail}", {**headers, "E2b-Sandbox-Id": container.id}, True),
                          (f"http://{node_host}/{tail}", headers, False),
                          (f"http://{node_host}/{tail}", headers, True),
                          (f"http://{node_host}/v1/../{tail}", headers, False),
                          (f"http://{replica.host}:{replica.port}/v1/../{tail}", headers, False),
                          (f"http://{replica.host}:{replica.port}/{tail}", headers, False)]
                for target, sent, host_header in cases:
                    status, text = raw_request(replica.host, replica.port, method, target, sent,
                                               host_header=host_header)
                    assert status >= 400, (method, target, status, text)
                    assert not leaked(text), (method, target, text)
        assert cluster.node_status() == {name: "ready" for name in cluster.node_names}, cluster.node_list()
        # Through the other replica, the spellings the review found.
        other = cluster.replicas[1]
        for target in ["/v1/../internal/v1/drain", "/console/api/../../internal/v1/drain",
                       "/v1/%2e%2e/internal/v1/drain", f"/v1/containers/{container.id}/../../../internal/v1/drain"]:
            status, text = raw_request(other.host, other.port, "POST", target, {"Authorization": f"Bearer {ALPHA}"})
            assert status == 400, (target, status, text)
        assert cluster.node_status() == {name: "ready" for name in cluster.node_names}, cluster.node_list()
    finally:
        undrain_every_node(cluster)
        cluster.client().containers.delete(container.id)


def test_a_node_serves_a_forwarded_request_the_api_alone(cluster):
    """The node's own wall, whatever a replica lets through: a request
    with the forwarding credential (the one a replica shows for a tenant)
    reaches the API, never the node's state, drain or metrics, even beside
    the operator's credential; the operator's credential alone reaches
    them."""
    node = cluster.nodes["n1"]
    forwarded = {FORWARD_HEADER: cluster.secret}
    operator = {SECRET_HEADER: cluster.secret}
    try:
        listed = requests.get(f"{node.base_url}/containers", timeout=10,
                              headers={**forwarded, "Authorization": f"Bearer {ALPHA}"})
        assert listed.status_code == 200 and listed.json()["object"] == "list", listed.text
        for headers in [forwarded, {**forwarded, **operator}, {FORWARD_HEADER: "not-the-secret", **operator},
                        {**forwarded, "Authorization": f"Bearer {cluster.admin_key}"}]:
            for method, tail in NODE_ONLY:
                for target in [f"/{tail}", f"/{tail.upper()}", f"/{tail}/"]:
                    status, text = raw_request(node.host, NODE_PORT, method, target, headers)
                    assert status in (401, 404), (headers.keys(), method, target, status, text)
                    assert not leaked(text), (method, target, text)
        assert cluster.node_status()["n1"] == "ready", cluster.node_list()
        # The operator (`shellgate drain`) still reaches them, and only it.
        state = requests.get(f"{node.root}/internal/v1/node", headers=operator, timeout=10)
        assert state.status_code == 200 and state.json()["status"] == "ready", state.text
        metrics = requests.get(f"{node.root}/metrics", headers=operator, timeout=10)
        assert metrics.status_code == 200 and "shellgate_" in metrics.text, metrics.text
        # `shellgate drain`, as the node's preStop hook runs it, on its machine.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SHELLGATE_CLUSTER_SECRET": cluster.secret,
               "SHELLGATE_LISTEN": f"{cluster.nodes['n1'].host}:{NODE_PORT}"}
        for args, status in [(["--timeout", "0"], "draining"), (["--cancel"], "ready")]:
            done = subprocess.run(["nsenter", f"--net=/run/netns/{node.netns}", str(BINARY), "--data-dir",
                                   str(node.data_dir), "drain", *args], env=env, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            assert cluster.node_status()["n1"] == status, (args, cluster.node_list())
        # Through a replica, `/metrics` is no node's either.
        through = requests.get(f"{cluster.replicas[0].root}/metrics", timeout=10, headers={
            "Authorization": f"Bearer {cluster.admin_key}", SECRET_HEADER: cluster.secret})
        assert through.status_code == 404 and not leaked(through.text), through.text
    finally:
        undrain_every_node(cluster)


# --- the SDK through each replica ------------------------------------------


@pytest.mark.parametrize("replica", [0, 1])
def test_containers_exec_files_through_each_replica(cluster, replica):
    client = cluster.client(replica)
    container = client.containers.create(name=f"sdk-{replica}", memory_limit="1g")
    assert container.id.startswith("cntr_") and container.status == "running"
    assert client.containers.retrieve(container.id).name == f"sdk-{replica}"
    assert container.id in [c.id for c in client.containers.list(name=f"sdk-{replica}")]

    result = exec_commands(client, container.id, ["echo hi", "python3 -c 'print(6*7)' > answer.txt", "exit 3"])
    assert result["output"][0] == {"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
    assert result["output"][2]["outcome"] == {"type": "exit", "exit_code": 3}
    made = [f for f in client.containers.files.list(container.id) if f.path == "/mnt/data/answer.txt"]
    assert len(made) == 1 and made[0].source == "assistant" and made[0].bytes == 3
    assert client.containers.files.content.retrieve(made[0].id, container_id=container.id).read() == b"42\n"

    uploaded = client.containers.files.create(container.id, file=("notes.txt", io.BytesIO(b"uploaded bytes")))
    assert uploaded.path == "/mnt/data/notes.txt" and uploaded.bytes == 14
    assert run(client, container.id, "cat /mnt/data/notes.txt")[0] == "uploaded bytes"
    assert uploaded.id in [f.id for f in client.containers.files.list(container.id)]
    client.containers.files.delete(uploaded.id, container_id=container.id)
    assert "notes.txt" not in run(client, container.id, "ls /mnt/data")[0]

    # A Files API upload (on whichever node took it) reaches containers on
    # other nodes: three containers made in a row spread over the nodes.
    file = client.files.create(file=("data.csv", io.BytesIO(b"a,b\n1,2\n")), purpose="user_data")
    assert client.files.content(file.id).read() == b"a,b\n1,2\n"
    assert cluster.client(1 - replica).files.retrieve(file.id).bytes == 8
    with_files = [client.containers.create(name=f"sdk-files-{replica}", file_ids=[file.id]) for _ in range(3)]
    for made in with_files:
        assert run(client, made.id, "cat /mnt/data/data.csv")[0] == "a,b\n1,2\n"
        copied = client.containers.files.create(made.id, file_id=file.id)
        assert copied.path == "/mnt/data/data.csv"
    holders = {cluster.node_holding(c.id) for c in with_files}
    assert None in holders or len(holders) >= 2, holders

    for made in with_files + [container]:
        client.containers.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            client.containers.retrieve(made.id)
    client.files.delete(file.id)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file.id)


@pytest.mark.parametrize("replica", [0, 1])
def test_streamed_exec_and_files_by_path_through_each_replica(cluster, replica):
    client, http = cluster.client(replica), cluster.session(replica)
    container = client.containers.create(name=f"stream-{replica}")
    reply = http.post(f"{http.base}/containers/{container.id}/exec", timeout=60, stream=True,
                      json={"commands": ["for i in 1 2 3; do echo line$i; sleep 0.1; done"], "stream": True})
    assert reply.status_code == 200, reply.text
    events = list(sse_events(reply))
    streamed = "".join(e["delta"] for e in events if e["type"] == "exec.output.delta" and e["stream"] == "stdout")
    assert streamed == "line1\nline2\nline3\n", events
    completed = [e for e in events if e["type"] == "exec.completed"]
    assert len(completed) == 1 and completed[0]["shell_call_output"]["output"][0]["stdout"] == streamed

    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    put = http.put(f"{http.base}/containers/{container.id}/fs/content", timeout=60,
                   params={"path": "/home/user/deep/blob.bin", "parents": "true"}, data=payload)
    assert put.status_code in (200, 201), put.text
    got = http.get(f"{http.base}/containers/{container.id}/fs/content", timeout=60,
                   params={"path": "/home/user/deep/blob.bin"})
    assert got.status_code == 200 and got.content == payload
    assert run(client, container.id, "sha256sum < /home/user/deep/blob.bin | cut -c1-16")[0].strip() \
        == __import__("hashlib").sha256(payload).hexdigest()[:16]
    client.containers.delete(container.id)


@pytest.mark.parametrize("replica", [0, 1])
def test_a_terminal_over_the_websocket_through_each_replica(cluster, replica):
    connect = pytest.importorskip("websockets.sync.client").connect
    http = cluster.session(replica)
    made = http.post(f"{http.base}/containers", json={"name": f"pty-{replica}"}, timeout=60)
    assert made.status_code == 200, made.text
    cid = made.json()["id"]
    started = http.post(f"{http.base}/containers/{cid}/processes", timeout=60,
                        json={"command": "bash --norc -i", "pty": {"cols": 100, "rows": 30}})
    assert started.status_code == 201, started.text
    pid = started.json()["id"]
    url = f"{http.base.replace('http://', 'ws://')}/containers/{cid}/processes/{pid}/ws?access_token={ALPHA}"

    def read_until(socket, needle, then=""):
        """Reads until `needle` shows, and `then` after it."""
        text = b""
        while needle.encode() not in text or then.encode() not in text.split(needle.encode(), 1)[1]:
            frame = socket.recv(timeout=30)
            assert isinstance(frame, bytes), frame
            text += frame
        return text.decode(errors="replace")

    with connect(url) as socket:
        socket.send(b"test -t 0 && echo tty-$((1+1)); stty size; echo through-$((6*7))\n")
        # Resized once bash is back at its prompt: readline reads the window
        # size and writes it back as it prepares each prompt, so a resize
        # landing between the two would be undone by the shell itself.
        text = read_until(socket, "through-42", then="$ ")
        assert "tty-2" in text and "30 100" in text, text
        socket.send(json.dumps({"type": "resize", "cols": 120, "rows": 40}))
        socket.send(b"stty size\n")
        read_until(socket, "40 120")
        socket.send(b"exit 0\n")
        while isinstance(frame := socket.recv(timeout=30), bytes):
            pass
        assert json.loads(frame)["type"] == "exit", frame
    assert http.delete(f"{http.base}/containers/{cid}", timeout=60).status_code in (200, 204)


def test_a_container_is_found_by_its_id_through_either_replica(cluster):
    a, b = cluster.client(0), cluster.client(1)
    for maker, user in [(a, b), (b, a)]:
        container = maker.containers.create(name="roaming")
        assert run(user, container.id, "echo from-the-other > here.txt; cat here.txt")[0] == "from-the-other\n"
        assert maker.containers.retrieve(container.id).status == "running"
        listed = {f.path for f in maker.containers.files.list(container.id)}
        assert "/mnt/data/here.txt" in listed
        assert container.id in [c.id for c in user.containers.list(name="roaming")]
        # Another project sees nothing of it, through either replica.
        for replica in [0, 1]:
            with pytest.raises(openai.NotFoundError):
                cluster.client(replica, BETA).containers.retrieve(container.id)
            with pytest.raises(openai.NotFoundError):
                exec_commands(cluster.client(replica, BETA), container.id, ["true"])
        user.containers.delete(container.id)
        with pytest.raises(openai.NotFoundError):
            maker.containers.retrieve(container.id)


@pytest.fixture(scope="module")
def scripted():
    """A scripted model (a fixture, not a product part) that the nodes, each
    in its network namespace, reach at the bridge's address."""
    from scripted_upstream import ScriptedUpstream

    upstream = ScriptedUpstream(host="0.0.0.0", advertise=GATEWAY)
    yield upstream
    upstream.stop()


def replayed_shell_turn(container_id: str, command: str, stdout: str) -> list:
    """A shell call the model made in `container_id` and its output, as a
    client replays them in a Responses request's `input`."""
    call_id = f"call_{container_id[-8:]}_{len(stdout)}"
    return [
        {"type": "shell_call", "call_id": call_id, "status": "completed", "action": {"commands": [command]},
         "environment": {"type": "container_reference", "container_id": container_id}},
        {"type": "shell_call_output", "call_id": call_id,
         "output": [{"stdout": stdout, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
    ]


@pytest.mark.parametrize("replica", [0, 1])
def test_a_conversation_that_switched_nodes_continues_its_last_container(clusters, scripted, replica):
    # The node continues the last container a conversation names; the
    # replica must send the request to that container's node, not to the
    # node of an older container the replayed items name first.
    cluster = clusters.get(**ROOMY, upstream_url=scripted.url)
    client = cluster.client(replica)
    older = client.containers.create(name="switched").id
    made = [older]
    while True:
        assert len(made) < 30, f"placement never chose another node than {cluster.node_holding(older)}"
        newer = client.containers.create(name="switched").id
        made.append(newer)
        if cluster.node_holding(newer) != cluster.node_holding(older):
            break
    assert run(client, older, "echo older > /mnt/data/which")[2] == 0
    assert run(client, newer, "echo newer > /mnt/data/which")[2] == 0
    conversation = [
        {"role": "user", "content": "Execute: cat /mnt/data/which"},
        *replayed_shell_turn(older, "cat /mnt/data/which", "older\n"),
        {"role": "user", "content": "Execute: cat /mnt/data/which"},
        *replayed_shell_turn(newer, "cat /mnt/data/which", "newer\n"),
        {"role": "user", "content": "Execute: cat /mnt/data/which"},
    ]
    response = client.responses.create(
        model="scripted", tools=[{"type": "shell", "environment": {"type": "container_auto"}}],
        input=conversation)
    assert response.status == "completed", response
    call = next(item for item in response.output if item.type == "shell_call")
    assert call.environment.container_id == newer, (older, newer, call)
    result = next(item for item in response.output if item.type == "shell_call_output")
    assert result.output[0].stdout == "newer\n", result
    delete_all([client], made)


# --- scale -----------------------------------------------------------------


@pytest.mark.serial
def test_a_thousand_containers_spread_across_the_nodes(cluster):
    total = 1000
    clients = [cluster.client(0, MEMBER_KEYS["bulk"]), cluster.client(1, MEMBER_KEYS["bulk"])]
    before = cluster.node_counts()
    started = time.monotonic()
    ids = in_parallel(lambda i: clients[i % 2].containers.create(name="bulk").id, range(total))
    made_secs = time.monotonic() - started
    assert len(set(ids)) == total
    after = cluster.node_counts()
    spread = {name: after[name] - before.get(name, 0) for name in NODE_NAMES}
    print(f"\n{total} containers made in {made_secs:.1f}s ({total / made_secs:.0f}/s) "
          f"through two replicas, 16 at a time; per node: {spread}")
    assert sum(spread.values()) == total, (before, after)
    for name, count in spread.items():
        assert count >= total // 5, f"{name} holds {count} of {total}: {spread}"
    listed = [c.id for c in clients[1].containers.list(name="bulk", limit=100)]
    assert len(listed) == total and set(listed) == set(ids)
    # Any of them answers, wherever it is.
    for container_id in ids[:: total // 10]:
        assert run(clients[0], container_id, "echo ok")[0] == "ok\n"
    started = time.monotonic()
    delete_all(clients, ids)
    print(f"{total} deleted in {time.monotonic() - started:.1f}s")
    assert wait_until(lambda: cluster.node_counts() == before, 60, 0.5), (before, cluster.node_counts())
    assert list(clients[0].containers.list(name="bulk")) == []


# --- failures ----------------------------------------------------------------


def test_a_replica_killed_mid_request(clusters):
    cluster = clusters.get(**ROOMY)
    clusters.taint()
    key = MEMBER_KEYS["chaos"]
    a = cluster.client(0, key)
    container = a.containers.create(name="survivor")
    run(a, container.id, "echo before > kept.txt")

    # An exec through replica B, B killed while the command runs.
    b = cluster.client(1, key)
    marker = "sleep 5.4321"
    command = f"{marker}; echo done"
    failure = {}

    def long_exec():
        try:
            failure["result"] = exec_commands(b, container.id, [command])
        except Exception as error:  # what the client sees is the point
            failure["error"] = error

    thread = threading.Thread(target=long_exec)
    thread.start()
    assert wait_until(lambda: processes_matching(marker), 30), "the command never started"
    cluster.replicas[1].kill9()
    thread.join(60)
    assert not thread.is_alive()
    assert isinstance(failure.get("error"), openai.APIConnectionError), failure
    # The same request through the other replica succeeds; the container
    # is whole and usable.
    assert run(a, container.id, command)[0] == "done\n"
    assert run(a, container.id, "cat kept.txt")[0] == "before\n"
    assert a.containers.retrieve(container.id).status == "running"
    assert "/mnt/data/kept.txt" in {f.path for f in a.containers.files.list(container.id)}

    # Creates through a new replica B, which is killed while they come;
    # each one that failed is retried through A. Every container listed
    # then is a whole one, and the nodes hold no other.
    b = cluster.client(cluster.restart_replica(1), key)
    before_total = sum(cluster.node_counts().values())
    creates, done = 160, []
    lock = threading.Lock()

    def create(i):
        try:
            made = (b.containers.create(name="retry").id, "b")
        except openai.APIConnectionError:
            made = (a.containers.create(name="retry").id, "a")
        with lock:
            done.append(made)
        return made

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(create, i) for i in range(creates)]
        assert wait_until(lambda: len(done) >= 30, 60), "creates through B never came back"
        cluster.replicas[1].kill9()
        results = [f.result(timeout=120) for f in futures]
    ids = [container_id for container_id, _ in results]
    through = collections.Counter(via for _, via in results)
    assert len(set(ids)) == creates and through["a"] > 0 and through["b"] >= 30, through

    def listed():
        return {c.id: c for c in a.containers.list(name="retry", limit=100)}

    # Settled: what the nodes count is what the list shows (no container
    # made but unlisted, none stuck half-made).
    def settled():
        return sum(cluster.node_counts().values()) == before_total + len(listed())

    assert wait_until(settled, 60, 0.5), (before_total, cluster.node_counts(), len(listed()))
    shown = listed()
    assert set(ids) <= set(shown), set(ids) - set(shown)
    # Made by B with the answer lost on the way: whole, at most one per
    # create in flight when B died.
    orphans = set(shown) - set(ids)
    assert len(orphans) <= 16, orphans
    assert all(c.status == "running" for c in shown.values()), {i: c.status for i, c in shown.items()}
    outputs = in_parallel(lambda cid: run(a, cid, "echo whole")[0], sorted(shown))
    assert outputs == ["whole\n"] * len(shown)
    delete_all([a], list(shown) + [container.id])


def test_a_node_killed_with_minus_9(clusters):
    cluster = clusters.get(**ROOMY)
    clusters.taint()
    key = MEMBER_KEYS["chaos"]
    clients = [cluster.client(0, key), cluster.client(1, key)]
    before = cluster.node_counts()
    ids = [clients[i % 2].containers.create(name="doomed").id for i in range(12)]
    for i, container_id in enumerate(ids):
        run(clients[i % 2], container_id, f"echo {i} > mine.txt")
    placed = cluster.node_counts()
    delta = {name: placed[name] - before.get(name, 0) for name in NODE_NAMES}
    assert sum(delta.values()) == 12 and min(delta.values()) >= 1, delta
    holding = {cid: cluster.node_holding(cid) for cid in ids}
    known = None not in holding.values()
    if known:
        # The harness's own view (engine directories) agrees with the API's.
        assert collections.Counter(holding.values()) == collections.Counter(
            {n: c for n, c in delta.items() if c}), (holding, delta)

    victim = "n3"
    killed_at = time.monotonic()
    cluster.nodes[victim].kill9()
    cluster.wait_nodes(lambda nodes: {n["id"]: n["status"] for n in nodes}.get(victim) == "lost",
                       LOST_AFTER_SECS + LOST_SLACK_SECS, f"{victim} lost")

    def statuses():
        try:
            return {cid: clients[0].containers.retrieve(cid).status for cid in ids}
        except openai.ConflictError as error:
            pytest.fail("a lost container must still be retrievable (200, status \"lost\"), "
                        f"not {error.status_code} {error.body}")

    seen = {}

    def lost_ones_read_lost():
        seen.update(statuses())
        return collections.Counter(seen.values()) == {"lost": delta[victim], "running": 12 - delta[victim]}

    assert wait_until(lost_ones_read_lost, LOST_AFTER_SECS + LOST_SLACK_SECS, 0.25), seen
    lost_secs = time.monotonic() - killed_at
    assert lost_secs <= LOST_AFTER_SECS + LOST_SLACK_SECS
    lost = [cid for cid, status in seen.items() if status == "lost"]
    alive = [cid for cid, status in seen.items() if status == "running"]
    if known:
        assert {holding[cid] for cid in lost} == {victim}, holding
    # Through either replica: an exec on a lost one is a 409 saying so...
    for client in clients:
        for container_id in lost[:2]:
            with pytest.raises(openai.ConflictError) as refused:
                exec_commands(client, container_id, ["true"])
            assert refused.value.code == "container_lost", refused.value.body
    # ... and the others are untouched.
    for i, container_id in enumerate(alive):
        stdout = run(clients[i % 2], container_id, "cat mine.txt")[0]
        assert stdout == f"{ids.index(container_id)}\n"

    # New containers go to the survivors only.
    now = cluster.node_counts()
    fresh = [clients[i % 2].containers.create(name="after").id for i in range(9)]
    for i, container_id in enumerate(fresh):
        assert run(clients[i % 2], container_id, "echo fine")[0] == "fine\n"
    later = cluster.node_counts()
    assert later[victim] <= now[victim], (now, later)
    assert sum(later[n] - now[n] for n in NODE_NAMES if n != victim) == 9, (now, later)
    if known:
        assert victim not in {cluster.node_holding(cid) for cid in fresh}
    # Lost ones stay lost: never made again elsewhere.
    assert all(clients[1].containers.retrieve(cid).status == "lost" for cid in lost)
    if known:
        assert all(cluster.node_holding(cid) == victim for cid in lost)
    # What the error tells the user to do works: delete it.
    clients[0].containers.delete(lost[0])
    with pytest.raises(openai.NotFoundError):
        clients[1].containers.retrieve(lost[0])
    delete_all(clients, alive + fresh)


def on_node(cluster, client, node, count, name):
    """Creates containers until `count` of them are on `node` (the
    harness's view: the engine's directories) and one is elsewhere:
    (those on it, those elsewhere)."""
    on, elsewhere = [], []
    while len(on) < count or not elsewhere:
        assert len(on) + len(elsewhere) < 60, f"placement never chose {node}: {on}, {elsewhere}"
        container_id = client.containers.create(name=name).id
        (on if cluster.node_holding(container_id) == node else elsewhere).append(container_id)
    return on, elsewhere


def wait_lost(cluster, client, node, ids):
    cluster.wait_nodes(lambda nodes: {n["id"]: n["status"] for n in nodes}.get(node) == "lost",
                       LOST_AFTER_SECS + LOST_SLACK_SECS, f"{node} lost")
    seen = {}

    def all_lost():
        seen.update({cid: client.containers.retrieve(cid).status for cid in ids})
        return set(seen.values()) == {"lost"}

    assert wait_until(all_lost, LOST_AFTER_SECS + LOST_SLACK_SECS, 0.25), seen


def test_a_stalled_node_is_answered_for_at_once_and_gets_its_containers_back(clusters):
    """A node's process stopped (SIGSTOP: a long pause; its sandboxes run
    on) past `node_lost_after_secs`, then continued. While it hangs,
    requests for its containers come back (409 `container_lost` or 502
    `node_unreachable`), and requests any node answers are answered by
    the others, all before it continues. Back, it has its containers as
    they were: the running one running (its process too), the paused E2B
    sandbox suspended, files intact, through either replica; the one its
    tenant deleted while it was lost is gone from its disk."""
    cluster = clusters.get(**ROOMY)
    clusters.taint()
    key = MEMBER_KEYS["chaos"]
    client, http = cluster.client(0, key), cluster.session(0, key)
    root, e2b = cluster.replicas[0].root, {"X-API-Key": key}
    made = requests.post(f"{root}/sandboxes", headers=e2b, json={"templateID": "base", "timeout": 3600},
                         timeout=120)
    assert made.status_code == 201, made.text
    asleep = made.json()["sandboxID"]
    victim = cluster.node_holding(asleep)
    assert victim is not None, "the harness cannot see which node holds the sandbox"
    (kept, doomed), elsewhere = on_node(cluster, client, victim, 2, "stalled")
    for container_id in [asleep, kept, doomed] + elsewhere:
        assert run(client, container_id, f"echo {container_id} > /mnt/data/mine.txt")[2] == 0
    started = http.post(f"{http.base}/containers/{kept}/processes", json={"command": "sleep 3600"}, timeout=60)
    assert started.status_code == 201, started.text
    process = started.json()["id"]
    paused = requests.post(f"{root}/sandboxes/{asleep}/pause", headers=e2b, timeout=60)
    assert paused.status_code == 204, paused.text
    assert client.containers.retrieve(asleep).status == "suspended"

    node = cluster.nodes[victim]
    node.stall()
    try:
        def exec_on_kept(replica):
            session = cluster.session(replica, key)
            return session.post(f"{session.base}/containers/{kept}/exec", json={"commands": ["true"]},
                                timeout=HANG_TIMEOUT_SECS)

        def any_node(replica):
            session = cluster.session(replica, key)
            return session.get(f"{session.base}/containers", params={"limit": 1}, timeout=HANG_TIMEOUT_SECS)

        # At once, before it is declared lost: sent to it, and given up on.
        calls = [lambda: exec_on_kept(0), lambda: exec_on_kept(1)] + \
            [lambda i=i: any_node(i % 2) for i in range(16)]
        stalled_at = time.monotonic()
        answers = in_parallel(lambda call: call(), calls, workers=len(calls))
        print(f"\nwhile {victim} hangs: {len(calls)} requests answered within "
              f"{time.monotonic() - stalled_at:.1f}s "
              f"({[a.json()['error']['code'] for a in answers[:2]]} for its container)")
        for answer in answers[:2]:
            assert answer.status_code in (409, 502), (answer.status_code, answer.text)
            assert answer.json()["error"]["code"] in ("container_lost", "node_unreachable"), answer.text
        assert [a.status_code for a in answers[2:]] == [200] * 16, [a.text[:200] for a in answers[2:]]

        # Declared lost: its containers read lost, an exec is refused by the
        # replica, and its tenant deletes one.
        wait_lost(cluster, client, victim, [asleep, kept, doomed])
        refused = exec_on_kept(1)
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "container_lost", refused.text
        client.containers.delete(doomed)
        with pytest.raises(openai.NotFoundError):
            client.containers.retrieve(doomed)
        assert node.alive()
    finally:
        node.resume()
    resumed_at = time.monotonic()

    # Back: registered again, its containers as they were.
    cluster.wait_nodes(lambda nodes: {n["id"]: n["status"] for n in nodes}.get(victim) == "ready",
                       60, f"{victim} ready again")
    seen = {}

    def back():
        # As the store has them (what every replica routes by), not as the
        # node answers a retrieve forwarded to it: the rows come back when
        # the node's next heartbeat learns it was declared lost, which may
        # be after it answers again.
        listed = {c.id: c.status for c in client.containers.list(limit=100)}
        seen.update({cid: listed.get(cid) for cid in (kept, asleep)})
        return seen == {kept: "running", asleep: "suspended"}

    assert wait_until(back, 60, 0.25), seen
    print(f"its containers back {time.monotonic() - resumed_at:.1f}s after it continued")
    other = cluster.client(1, key)
    assert run(other, kept, "cat /mnt/data/mine.txt")[0] == f"{kept}\n"
    shown = cluster.session(1, key).get(f"{http.base}/containers/{kept}/processes/{process}", timeout=60)
    assert shown.status_code == 200 and shown.json()["status"] == "running", shown.text
    read = cluster.session(1, key).get(f"{cluster.replicas[1].base_url}/containers/{asleep}/fs/content",
                                       params={"path": "/mnt/data/mine.txt"}, timeout=60)
    assert read.status_code == 200 and read.text == f"{asleep}\n", read.text
    info = requests.get(f"{root}/sandboxes/{asleep}", headers=e2b, timeout=60)
    assert info.status_code == 200 and info.json()["state"] == "paused", info.text
    # What its tenant deleted while it was lost: its disk is gone too.
    assert wait_until(lambda: cluster.node_holding(doomed) is None, 60, 0.25), node.log_tail(20000)
    for container_id in elsewhere:
        assert run(other, container_id, "cat /mnt/data/mine.txt")[0] == f"{container_id}\n"
    delete_all([client, other], [kept, asleep] + elsewhere)


def test_a_hung_node_not_yet_lost_is_given_up_on_when_it_answers_no_probe(clusters):
    """A node that hangs where no sweep will declare it lost for ten
    minutes: a request for its container is given up on once the node
    answers neither it (within `node_answer_timeout_secs`) nor its liveness
    probe (502 `node_unreachable`); reads any node answers are answered by
    another; creates go to the others; all while it hangs. Continued, it
    serves its container again. While it is live, an exec whose answer
    begins later than that timeout is waited for.

    The timeout is the default, which a live node's liveness probe meets
    on a loaded machine too (a shorter one fails a live node whose answer
    to the probe is late). What a replica knows of a node is its own, so
    each replica is shown the hang (an exec of the hung node's container
    through each) before the creates it is to send elsewhere."""
    answer_timeout = 5
    cluster = clusters.get(**ROOMY, node_lost_after_secs=600, node_answer_timeout_secs=answer_timeout)
    clusters.taint()
    key = MEMBER_KEYS["chaos"]
    client = cluster.client(0, key)
    first = client.containers.create(name="hung").id
    victim = cluster.node_holding(first)
    assert victim is not None, "the harness cannot see which node holds the container"
    assert run(client, first, "echo before > /mnt/data/mine.txt")[2] == 0
    # A live node is waited for however long its answer takes to begin (a
    # synchronous exec longer than the timeout, twice over).
    assert run(cluster.client(1, key), first, f"sleep {2 * answer_timeout + 1}; echo slept")[0] == "slept\n"
    node = cluster.nodes[victim]
    node.stall()
    made = []
    try:
        def exec_on_the_hung_node(replica):
            session = cluster.session(replica, key)
            hung_at = time.monotonic()
            refused = session.post(f"{session.base}/containers/{first}/exec", json={"commands": ["true"]},
                                   timeout=HANG_TIMEOUT_SECS)
            print(f"\n{victim} hangs: its container's exec through replica {replica} answered "
                  f"{refused.status_code} in {time.monotonic() - hung_at:.1f}s")
            return refused

        for refused in in_parallel(exec_on_the_hung_node, [1, 0]):
            assert refused.status_code == 502, refused.text
            assert refused.json()["error"]["code"] == "node_unreachable", refused.text

        def any_node(replica):
            http = cluster.session(replica, key)
            return http.get(f"{http.base}/containers", params={"limit": 1}, timeout=HANG_TIMEOUT_SECS)

        answers = in_parallel(any_node, [i % 2 for i in range(16)])
        assert [a.status_code for a in answers] == [200] * 16, [a.text[:200] for a in answers]
        for i in range(6):
            made.append(cluster.client(i % 2, key, timeout=HANG_TIMEOUT_SECS).containers.create(name="hung").id)
        assert victim not in {cluster.node_holding(cid) for cid in made}
        assert {n["id"]: n["status"] for n in cluster.node_list()}[victim] == "ready"
        assert node.alive()
    finally:
        node.resume()
    assert run(client, first, "cat /mnt/data/mine.txt")[0] == "before\n"
    delete_all([client], [first] + made)


def test_a_node_restarted_after_it_was_declared_lost_gets_its_containers_back(clusters):
    """A node killed with -9, declared lost, then started again with its
    data directory: its containers come back suspended (their processes
    ended with it), files intact, and wake on the next command; the one its
    tenant deleted while it was lost is gone from its disk."""
    cluster = clusters.get(**ROOMY)
    clusters.taint()
    key = MEMBER_KEYS["chaos"]
    client = cluster.client(0, key)
    first = client.containers.create(name="restarted").id
    victim = cluster.node_holding(first)
    assert victim is not None, "the harness cannot see which node holds the container"
    (kept, doomed), elsewhere = on_node(cluster, client, victim, 2, "restarted")
    for container_id in [kept, doomed]:
        assert run(client, container_id, f"echo {container_id} > /mnt/data/mine.txt")[2] == 0

    cluster.nodes[victim].kill9()
    wait_lost(cluster, client, victim, [kept, doomed])
    client.containers.delete(doomed)
    cluster.restart_node(victim)
    seen = {}

    def back():
        seen[kept] = client.containers.retrieve(kept).status
        return seen[kept] == "suspended"

    assert wait_until(back, 60, 0.25), seen
    other = cluster.client(1, key)
    assert run(other, kept, "cat /mnt/data/mine.txt")[0] == f"{kept}\n"
    assert other.containers.retrieve(kept).status == "running"
    assert cluster.node_holding(doomed) is None
    with pytest.raises(openai.NotFoundError):
        other.containers.retrieve(doomed)
    delete_all([client, other], [first, kept] + elsewhere)


def test_a_batch_its_node_left_unended_is_resumed_when_the_node_starts_again(clusters, scripted):
    """A Message Batch whose requests are still running when every node is
    killed with -9 goes on when they start again: the node that took it
    runs its requests without a result, and the batch ends."""
    cluster = clusters.get(**ROOMY, upstream_url=scripted.url)
    clusters.taint()
    sdk = anthropic.Anthropic(base_url=cluster.replicas[0].root, api_key=MEMBER_KEYS["alpha"],
                              max_retries=0, timeout=120)
    # The scripted upstream answers this model after 30 s: the batch is
    # unended when the nodes die.
    slow = [{"custom_id": f"r{i}", "params": {"model": "scripted-slow", "max_tokens": 8,
                                               "messages": [{"role": "user", "content": "hi"}]}}
            for i in range(4)]
    batch = sdk.messages.batches.create(requests=slow)
    assert batch.processing_status == "in_progress", batch
    for node in cluster.nodes.values():
        node.kill9()
    for name in list(cluster.nodes):
        cluster.restart_node(name)
    seen = {}

    def ended():
        seen["batch"] = sdk.messages.batches.retrieve(batch.id)
        return seen["batch"].processing_status == "ended"

    assert wait_until(ended, 240, 0.5), seen
    counts = seen["batch"].request_counts
    assert counts.processing == 0 and counts.succeeded + counts.errored == 4, seen
    ids = [line.custom_id for line in sdk.messages.batches.results(batch.id)]
    assert ids == [f"r{i}" for i in range(4)], ids


# --- quotas ------------------------------------------------------------------


# The quota tests' cluster (its own; last in this file, so the shared one
# is made once): replicas and nodes alike run with the quotas.
QUOTAS = {"max_running_containers_per_project": 5, "max_execs_per_project": 4}


def test_a_quota_holds_when_two_replicas_admit_at_once(clusters):
    cluster = clusters.get(**QUOTAS)
    key = MEMBER_KEYS["quota"]
    sessions = [cluster.session(0, key), cluster.session(1, key)]
    attempts = 20
    barrier = threading.Barrier(attempts)

    def create(i):
        http = sessions[i % 2]
        barrier.wait(timeout=30)
        # (Not through the shared session: one connection each, at once.)
        return requests.post(f"{http.base}/containers", headers=http.headers, json={"name": "quota"},
                             timeout=120)

    answers = in_parallel(create, range(attempts), workers=attempts)
    made = [r.json()["id"] for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code != 200]
    assert len(made) == 5, [(r.status_code, r.text[:200]) for r in answers]
    for answer in refused:
        assert answer.status_code == 429, answer.text
        assert answer.json()["error"]["code"] == "too_many_running_containers", answer.text
    client = cluster.client(0, key)
    assert sorted(c.id for c in client.containers.list(name="quota")) == sorted(made)
    # A slot freed is a slot for the next create, once.
    client.containers.delete(made.pop())
    barrier = threading.Barrier(4)
    again = in_parallel(create, range(4), workers=4)
    assert sorted(r.status_code for r in again) == [200, 429, 429, 429], [r.text[:200] for r in again]
    made += [r.json()["id"] for r in again if r.status_code == 200]
    delete_all([client, cluster.client(1, key)], made)


def test_the_exec_quota_is_the_projects_across_every_node(clusters):
    """max_execs_per_project holds across the cluster, not per node:
    execs through both replicas into containers on every node, at once,
    run exactly the limit (the rest 429); once they end the limit runs
    again; a node killed holding some gives them back once it is lost."""
    cluster = clusters.get(**QUOTAS)
    limit = QUOTAS["max_execs_per_project"]
    key = MEMBER_KEYS["execs"]
    sessions = [cluster.session(0, key), cluster.session(1, key)]
    client = cluster.client(0, key)
    containers = [client.containers.create(name="execs").id for _ in NODE_NAMES]
    placed = {cid: cluster.node_holding(cid) for cid in containers}
    assert len(set(placed.values())) >= 2, placed

    def execute(job):
        """(container, gate, replica): an exec through that replica that
        runs until the gate file exists in the container; its answer."""
        cid, gate, replica = job
        http = sessions[replica]
        command = f"until [ -e /mnt/data/{gate} ]; do sleep 0.05; done; echo through-{gate}"
        return requests.post(f"{http.base}/containers/{cid}/exec", headers=http.headers, timeout=180,
                             json={"commands": [command], "timeout_ms": 120_000})

    def open_gate(gate):
        for cid in containers:
            put = sessions[0].put(f"{sessions[0].base}/containers/{cid}/fs/content", timeout=60,
                                  params={"path": f"/mnt/data/{gate}"}, data=b"")
            assert put.status_code in (200, 201), put.text

    def contend(gate, count):
        """`count` execs at once, spread over the containers (nodes) and
        both replicas; the gate opens once all but `limit` have answered.
        Returns (ran, refused)."""
        jobs = [(containers[i % len(containers)], gate, i % 2) for i in range(count)]
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            futures = [pool.submit(execute, job) for job in jobs]
            wait_until(lambda: sum(f.done() for f in futures) >= count - limit, 60, 0.1)
            open_gate(gate)
            answers = [f.result() for f in futures]
        ran = [a for a in answers if a.status_code == 200]
        refused = [a for a in answers if a.status_code != 200]
        for answer in ran:
            assert answer.json()["output"][0]["stdout"] == f"through-{gate}\n", answer.text
        for answer in refused:
            assert answer.status_code == 429, answer.text
            assert answer.json()["error"]["code"] == "too_many_concurrent_execs", answer.text
        return ran, refused

    ran, refused = contend("gate-1", 2 * limit + 1)
    assert (len(ran), len(refused)) == (limit, limit + 1), [(a.status_code, a.text[:200]) for a in ran + refused]
    # They ended: the limit runs again.
    ran, refused = contend("gate-2", limit + 1)
    assert (len(ran), len(refused)) == (limit, 1), [(a.status_code, a.text[:200]) for a in ran + refused]

    # A node killed while it runs one of them: once it is lost, its
    # credits are the project's again.
    victim_container = containers[-1]
    victim = placed[victim_container]
    survivors = [cid for cid in containers if placed[cid] != victim]

    def credits_of(node):
        held = cluster.postgres.psql(f"SELECT COALESCE(SUM(held), 0) FROM exec_credits WHERE node_id = '{node}'",
                                     database="shellgate")
        return int(held.strip())

    def running(gate):
        # Each running exec is a shell whose command line names its gate.
        return len(processes_matching(f"/mnt/data/{gate} ]"))

    with concurrent.futures.ThreadPoolExecutor(limit) as pool:
        doomed = pool.submit(execute, (victim_container, "gate-3", 0))
        assert wait_until(lambda: running("gate-3") == 1 or doomed.done(), 60, 0.1), doomed.result().text
        assert credits_of(victim) >= 1
        others = [pool.submit(execute, (survivors[i % len(survivors)], "gate-3", i % 2)) for i in range(limit - 1)]
        assert wait_until(lambda: running("gate-3") == limit or any(f.done() for f in others), 60, 0.1), \
            [f.result().text for f in others if f.done()]
        full = requests.post(f"{sessions[1].base}/containers/{survivors[0]}/exec", headers=sessions[1].headers,
                             json={"commands": ["true"]}, timeout=60)
        assert full.status_code == 429, full.text
        assert not doomed.done() and not any(f.done() for f in others), [f.result().text for f in others if f.done()]
        cluster.nodes[victim].kill9()
        clusters.taint()
        # Marked lost by a replica's sweep, its credits dropped with it.
        assert wait_until(lambda: credits_of(victim) == 0, LOST_AFTER_SECS + LOST_SLACK_SECS, 0.2), \
            cluster.logs()
        # A survivor is not declared lost with it, even when its heartbeats
        # come later than this test's short node_lost_after_secs on a loaded
        # machine: it answers the replicas' probes.
        back = requests.post(f"{sessions[1].base}/containers/{survivors[0]}/exec", headers=sessions[1].headers,
                             json={"commands": ["echo back"]}, timeout=60)
        assert back.status_code == 200, back.text
        assert back.json()["output"][0]["stdout"] == "back\n"
        for cid in survivors:
            put = sessions[0].put(f"{sessions[0].base}/containers/{cid}/fs/content", timeout=60,
                                  params={"path": "/mnt/data/gate-3"}, data=b"")
            assert put.status_code in (200, 201), put.text
        assert [f.result().status_code for f in others] == [200] * (limit - 1)
        assert doomed.result().status_code != 200


def test_a_database_outage_fails_readiness_not_liveness_and_passes(clusters):
    """Postgres stopped: every server's `/healthz` (readiness) fails, its
    `/livez` (what an orchestrator restarts on) still answers, so no node
    is restarted and no container lost for it; a container's running
    command carries on. Postgres back: the same servers serve again."""
    cluster = clusters.get(**ROOMY)
    clusters.taint()
    client = cluster.client(0)
    container = client.containers.create(name="outage")
    servers = cluster.replicas + list(cluster.nodes.values())

    def probe(server, path):
        headers = {SECRET_HEADER: server.secret} if server.secret else {}
        try:
            return requests.get(f"{server.root}{path}", headers=headers, timeout=10).status_code
        except requests.RequestException:
            return None

    cluster.postgres.outage()
    try:
        assert wait_until(lambda: all(probe(s, "/healthz") not in (200, None) for s in servers), 60), \
            [probe(s, "/healthz") for s in servers]
        assert [probe(s, "/livez") for s in servers] == [200] * len(servers)
    finally:
        cluster.postgres.recover()
    assert wait_until(lambda: all(probe(s, "/healthz") == 200 for s in servers), 60), \
        [probe(s, "/healthz") for s in servers]
    assert cluster.all_alive()
    # The pools reconnected: the container is served again, by either replica.
    for replica in (0, 1):
        output = exec_commands(cluster.client(replica), container.id, ["echo back"])["output"]
        assert output[0]["stdout"] == "back\n", output



def test_servers_on_postgres_exit_cleanly_on_sigterm(clusters):
    """SIGTERM (every rollout, drain and `kubectl delete pod`) to a server
    on Postgres (a replica, a node, and a single box with `database_url`)
    ends it with status 0: its store's connections are closed off the async
    runtime, in order; none panics."""
    cluster = clusters.get(**ROOMY)
    clusters.taint()
    # A single box (no role) on the cluster's Postgres, in a schema of its own.
    single = Server("single box", None, cluster.directory / "single-box", "127.0.0.1", free_port(), {
        "database_url": cluster.postgres.url("127.0.0.1"), "database_schema": "single_box",
        "api_keys": f"{ALPHA}:alpha", "warm_containers": "0", "sandbox_uid_base": "3600000000"})
    single.start().wait_healthy()
    cluster.extra.append(single)
    # Every one of them has used its pool (a container made on a node through
    # a replica; the single box's own).
    made = cluster.client(0).containers.create(name="sigterm", memory_limit="1g")
    holder = cluster.node_holding(made.id)
    alone = openai.OpenAI(base_url=single.base_url, api_key=ALPHA, max_retries=0, timeout=120)
    assert alone.containers.list().object == "list"
    for server in [cluster.replicas[0], cluster.nodes[holder], single]:
        status = server.terminate()
        log = server.log.read_text(errors="replace")
        assert status == 0 and "panicked" not in log, f"{server.name}: exit {status}\n{log[-4000:]}"
