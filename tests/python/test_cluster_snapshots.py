"""Snapshots in a cluster (cluster.py: three nodes, two replicas, Postgres,
moto's S3), through the replicas with plain HTTP and the OpenAI SDK.

What is checked: a snapshot taken on one node is put in the object store
(its archive's key, `snapshots/<id>.tar.zst`) and restored, through the
other replica, on another node (its own node drained so placement cannot
choose it): text, binary, sparse (still a hole), a link and an empty
directory as they were; a fork through a replica makes copies on the
source's node that diverge apart; a delete removes the row and the
archive, after which a create from it is a 404; another project's id is a
404 on every route; the count quota holds as on one box; a node killed
with -9 mid-upload leaves no row, no archive and, restarted, no copy of
its own. Every wait is for a condition, with a deadline.
"""

import threading

import boto3
import pytest
import requests

from cluster import (MEMBER_KEYS, ROOMY, SECRET_HEADER, own_clusters_only, cluster, clusters)  # noqa: F401 (fixtures)
from conftest import exec_commands, wait_until

pytestmark = own_clusters_only()

ALPHA, BETA = MEMBER_KEYS["alpha"], MEMBER_KEYS["beta"]
# Where the archives are in the bucket (the object store's prefix, then
# the server's folder).
ARCHIVES = "objects/snapshots/"


def api(cluster, method, path, key=ALPHA, replica=0, **kwargs) -> requests.Response:
    """One request through a replica (reads answered 503 asked again)."""
    return cluster.request(method, path, key, replica, **kwargs)


def ok(response: requests.Response) -> dict:
    assert response.status_code == 200, f"{response.status_code} {response.text}"
    return response.json()


def run(cluster, container_id, command, replica=0) -> str:
    output = exec_commands(cluster.client(replica), container_id, [command])["output"][0]
    assert output["outcome"].get("exit_code") == 0, output
    return output["stdout"]


def set_draining(cluster, name: str, draining: bool) -> None:
    """A node's operator stops (or allows again) placement on it."""
    method = requests.post if draining else requests.delete
    answer = method(f"{cluster.nodes[name].root}/internal/v1/drain",
                    headers={SECRET_HEADER: cluster.secret}, timeout=10)
    assert answer.status_code < 300, answer.text
    want = "draining" if draining else "ready"
    cluster.wait_nodes(lambda nodes: {n["id"]: n["status"] for n in nodes}.get(name) == want,
                       30, f"{name} {want}")


def bucket(cluster):
    return boto3.client("s3", endpoint_url=cluster.objects.endpoint, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


def archives(cluster) -> set:
    """The archive keys in the bucket."""
    listed = bucket(cluster).list_objects_v2(Bucket=cluster.bucket, Prefix=ARCHIVES)
    return {item["Key"] for item in listed.get("Contents", [])}


def node_copies(node) -> set:
    """The snapshots a node's engine holds (committed ones: no dot)."""
    directory = node.data_dir / "sandbox" / "snapshots"
    if not directory.is_dir():
        return set()
    return {entry.name for entry in directory.iterdir() if not entry.name.startswith(".")}


# What a container's files are made of, and how they are read back.
FILL = (
    "mkdir -p tree/empty && echo hello > tree/text.txt && "
    "head -c 3000000 /dev/urandom > tree/random.bin && "
    "truncate -s 256M tree/sparse.img && printf data | dd of=tree/sparse.img bs=1 seek=1000000 conv=notrunc 2>/dev/null && "
    "ln -s text.txt tree/link && chmod 640 tree/text.txt"
)
READ = (
    "cd tree && md5sum text.txt random.bin sparse.img && stat -c '%n %s %a %F' text.txt link empty sparse.img && "
    "readlink link && du -k sparse.img | cut -f1"
)


def test_a_snapshot_is_restored_on_another_node_through_the_other_replica(cluster):
    made = cluster.client(0).containers.create(name="source")
    run(cluster, made.id, FILL)
    before = run(cluster, made.id, READ)
    source_node = cluster.node_holding(made.id)
    assert source_node, "the harness finds the container's node"

    snapshot = ok(api(cluster, "POST", f"/containers/{made.id}/snapshots", replica=1,
                      json={"name": "travels", "metadata": {"k": "v"}}))
    assert snapshot["object"] == "container.snapshot" and snapshot["size_bytes"] > 3_000_000, snapshot
    assert f"{ARCHIVES}{snapshot['id']}.tar.zst" in archives(cluster)
    archive = bucket(cluster).head_object(Bucket=cluster.bucket, Key=f"{ARCHIVES}{snapshot['id']}.tar.zst")
    assert archive["ContentLength"] < 8_000_000, "holes are not stored, random bytes once"
    # Listed and read through either replica.
    assert ok(api(cluster, "GET", f"/snapshots/{snapshot['id']}"))["name"] == "travels"
    assert snapshot["id"] in [s["id"] for s in ok(api(cluster, "GET", "/snapshots", replica=1))["data"]]

    set_draining(cluster, source_node, True)
    try:
        copies = [ok(api(cluster, "POST", "/containers", replica=index % 2,
                         json={"name": f"restored-{index}", "snapshot_id": snapshot["id"]}))
                  for index in range(2)]
    finally:
        set_draining(cluster, source_node, False)
    for copy in copies:
        holder = cluster.node_holding(copy["id"])
        assert holder not in (None, source_node), f"placed on {holder}, the source's node drained"
        assert run(cluster, copy["id"], READ, replica=1) == before
        assert snapshot["id"] in node_copies(cluster.nodes[holder]), "kept there for the next restore"
    # The sparse file is still a hole on the restored disk.
    allocated_kib = int(before.strip().splitlines()[-1])
    assert allocated_kib < 1024, before
    # A copy's changes are its own.
    run(cluster, copies[0]["id"], "echo changed > tree/text.txt")
    assert run(cluster, copies[1]["id"], "cat tree/text.txt") == "hello\n"
    assert run(cluster, made.id, "cat tree/text.txt") == "hello\n"

    for container_id in [made.id] + [copy["id"] for copy in copies]:
        cluster.client(0).containers.delete(container_id)
    assert api(cluster, "DELETE", f"/snapshots/{snapshot['id']}", replica=1).status_code == 200
    assert f"{ARCHIVES}{snapshot['id']}.tar.zst" not in archives(cluster), "its archive went with it"
    gone = api(cluster, "POST", "/containers", json={"name": "late", "snapshot_id": snapshot["id"]})
    assert gone.status_code == 404, gone.text
    assert gone.json()["error"]["param"] == "snapshot_id", gone.text
    assert api(cluster, "GET", f"/snapshots/{snapshot['id']}").status_code == 404


def test_a_fork_through_a_replica_makes_copies_on_the_sources_node(cluster):
    made = cluster.client(1).containers.create(name="forked")
    run(cluster, made.id, "echo original > state.txt")
    copies = ok(api(cluster, "POST", f"/containers/{made.id}/fork", json={"count": 2}))["data"]
    assert len(copies) == 2, copies
    source_node = cluster.node_holding(made.id)
    for index, copy in enumerate(copies):
        assert cluster.node_holding(copy["id"]) == source_node
        assert run(cluster, copy["id"], "cat state.txt", replica=index % 2) == "original\n"
        run(cluster, copy["id"], f"echo copy-{index} > state.txt")
    assert [run(cluster, copy["id"], "cat state.txt") for copy in copies] == ["copy-0\n", "copy-1\n"]
    assert run(cluster, made.id, "cat state.txt") == "original\n"
    # A fork's snapshot never has a row.
    assert ok(api(cluster, "GET", "/snapshots"))["data"] == [] or all(
        s["container_id"] != made.id for s in ok(api(cluster, "GET", "/snapshots"))["data"])
    for container_id in [made.id] + [copy["id"] for copy in copies]:
        cluster.client(0).containers.delete(container_id)


def test_another_projects_snapshot_is_a_404_everywhere(cluster):
    made = cluster.client(0).containers.create(name="private")
    snapshot = ok(api(cluster, "POST", f"/containers/{made.id}/snapshots", json={}))
    for replica in (0, 1):
        assert api(cluster, "GET", f"/snapshots/{snapshot['id']}", key=BETA, replica=replica).status_code == 404
        created = api(cluster, "POST", "/containers", key=BETA, replica=replica,
                      json={"name": "thief", "snapshot_id": snapshot["id"]})
        assert created.status_code == 404, created.text
        assert api(cluster, "DELETE", f"/snapshots/{snapshot['id']}", key=BETA,
                   replica=replica).status_code == 404
        assert snapshot["id"] not in [s["id"] for s in ok(api(cluster, "GET", "/snapshots", key=BETA,
                                                              replica=replica))["data"]]
    # Still there for its own project.
    assert ok(api(cluster, "GET", f"/snapshots/{snapshot['id']}"))["id"] == snapshot["id"]
    assert api(cluster, "DELETE", f"/snapshots/{snapshot['id']}").status_code == 200
    cluster.client(0).containers.delete(made.id)


def test_the_count_quota_holds_and_a_node_killed_mid_upload_leaves_nothing(clusters):
    cluster = clusters.get(**ROOMY, max_snapshots_per_project=2)
    made = cluster.client(0).containers.create(name="quota")
    taken = [ok(api(cluster, "POST", f"/containers/{made.id}/snapshots", replica=i % 2, json={}))
             for i in range(2)]
    refused = api(cluster, "POST", f"/containers/{made.id}/snapshots", json={})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "too_many_snapshots", refused.text
    assert archives(cluster) == {f"{ARCHIVES}{s['id']}.tar.zst" for s in taken}, "a refused take leaves no archive"
    for snapshot in taken:
        assert api(cluster, "DELETE", f"/snapshots/{snapshot['id']}").status_code == 200

    # Enough random bytes that the upload takes a while after the node's
    # engine committed its own copy: the kill lands in between.
    run(cluster, made.id, "head -c 200000000 /dev/urandom > big.bin")
    victim_name = cluster.node_holding(made.id)
    victim = cluster.nodes[victim_name]
    clusters.taint()
    # Copies of the deleted ones may still be there (another node's delete
    # leaves them to this node's sweep): the new one is awaited.
    held_before = node_copies(victim)
    answers = []
    taking = threading.Thread(target=lambda: answers.append(
        api(cluster, "POST", f"/containers/{made.id}/snapshots", json={})))
    taking.start()
    assert wait_until(lambda: node_copies(victim) - held_before, 120, 0.02), \
        "the engine's copy was never committed"
    victim.kill9()
    taking.join(300)
    assert answers and answers[0].status_code >= 500, answers and answers[0].text
    assert ok(api(cluster, "GET", "/snapshots"))["data"] == [], "no row"
    assert archives(cluster) == set(), "no archive"
    cluster.restart_node(victim_name)
    assert node_copies(victim) == set(), "the restarted node removed its copy no row names"
