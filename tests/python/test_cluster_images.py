"""Project images in a cluster (cluster.py: three nodes, two replicas,
Postgres, moto's S3), through the replicas with plain HTTP.

What is checked: an OCI image imported through one replica and a
Dockerfile built `FROM` it through the other (each job on the node that
took it, its status read through the other replica) are put in the object
store (`images/<revision>-<name>.tar.zst`) before their jobs are ready;
containers of the built image are made on every node (the others drained,
so placement must choose each), which fetch it and see what its steps
wrote; a container committed on one node makes a container on another;
another project neither sees nor deletes it; a delete through a
replica removes its row and archive at once, makes creates refuse it, and
each node's copy is removed by that node's sweep. A node whose fetched
images pass `image_cache_bytes` removes the least recently used idle one
(never one a container is made from, nor the copies the nodes made) and
fetches it again on its next use. An E2B template's build whose node is
killed ends `error` once the node is back. Every wait is for a
condition, with a deadline.
"""

import boto3
import requests

from cluster import MEMBER_KEYS, ROOMY, SECRET_HEADER, own_clusters_only, cluster, clusters  # noqa: F401 (fixtures)
from conftest import exec_commands, wait_until
from test_image_builds import oci_layout

pytestmark = own_clusters_only()

ALPHA, BETA = MEMBER_KEYS["alpha"], MEMBER_KEYS["beta"]
# Where the archives are in the bucket (the object store's prefix, then
# the server's folder).
ARCHIVES = "objects/images/"


def api(cluster, method, path, key=ALPHA, replica=0, **kwargs) -> requests.Response:
    """One request through a replica (reads answered 503 asked again)."""
    return cluster.request(method, path, key, replica, **kwargs)


def finished(cluster, build_id: str, replica: int) -> dict:
    """The job once it has ended, polled through `replica`."""
    seen = {}

    def ended():
        status = api(cluster, "GET", f"/images/builds/{build_id}", replica=replica)
        assert status.status_code == 200, status.text
        seen["job"] = status.json()
        return seen["job"]["status"] in ("ready", "error")

    assert wait_until(ended, 600, 0.5), seen
    return seen["job"]


def archives(cluster) -> set:
    s3 = boto3.client("s3", endpoint_url=cluster.objects.endpoint, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    listed = s3.list_objects_v2(Bucket=cluster.bucket, Prefix=ARCHIVES)
    return {item["Key"] for item in listed.get("Contents", [])}


def set_draining(cluster, name: str, draining: bool) -> None:
    method = requests.post if draining else requests.delete
    answer = {}

    def set_once() -> bool:
        answer["last"] = method(f"{cluster.nodes[name].root}/internal/v1/drain",
                                headers={SECRET_HEADER: cluster.secret}, timeout=10)
        # A node declared lost meanwhile (its heartbeats late on a busy
        # machine) refuses with 409 until its next heartbeat registers it
        # again: asked again until then.
        return answer["last"].status_code != 409

    wait_until(set_once, 60, 0.5)
    assert answer["last"].status_code < 300, answer["last"].text
    want = "draining" if draining else "ready"
    cluster.wait_nodes(lambda nodes: {n["id"]: n["status"] for n in nodes}.get(name) == want,
                       30, f"{name} {want}")


def image_tree(node, name: str):
    return node.data_dir / "sandbox" / "images" / name / "rootfs"


def test_an_image_built_through_a_replica_makes_containers_on_every_node_and_is_deleted(cluster):
    imported = api(cluster, "POST", "/images", replica=0, files={
        "name": (None, "cluster-base"),
        "file": ("image.tar", oci_layout({"etc/imported.txt": b"from the layer\n"}), "application/x-tar")})
    assert imported.status_code == 202, imported.text
    assert finished(cluster, imported.json()["id"], replica=1)["status"] == "ready"
    built = api(cluster, "POST", "/images", replica=1, files={
        "name": (None, "cluster-app"),
        "dockerfile": (None, "FROM cluster-base\nRUN echo built > /etc/built.txt\nENV APP=yes\n")})
    assert built.status_code == 202, built.text
    job = finished(cluster, built.json()["id"], replica=0)
    assert job["status"] == "ready", job
    revision = job["revision"]
    assert f"{ARCHIVES}{revision}-cluster-app.tar.zst" in archives(cluster), archives(cluster)
    for replica in (0, 1):
        listed = api(cluster, "GET", "/images", replica=replica).json()["data"]
        assert {"cluster-base", "cluster-app"} <= {i["name"] for i in listed}, listed
        assert api(cluster, "GET", "/images/cluster-app", key=BETA, replica=replica).status_code == 404

    # Every node offers it from its next heartbeat on (placement reads that).
    cluster.wait_nodes(lambda nodes: len(nodes) == len(cluster.nodes) and all(
        "cluster-app" in node["images"] for node in nodes), 120, "every node lists cluster-app")
    made = {}
    for name in cluster.nodes:
        others = [other for other in cluster.nodes if other != name]
        for other in others:
            set_draining(cluster, other, True)
        try:
            answer = api(cluster, "POST", "/containers", replica=len(made) % 2,
                         json={"name": f"on-{name}", "image": "cluster-app"})
            assert answer.status_code == 200, answer.text
            made[name] = answer.json()["id"]
        finally:
            for other in others:
                set_draining(cluster, other, False)
        assert cluster.node_holding(made[name]) == name
        output = exec_commands(cluster.client(len(made) % 2), made[name],
                               ["cat /etc/built.txt /etc/imported.txt; echo $APP"])["output"][0]
        assert output["stdout"] == "built\nfrom the layer\nyes\n", output
        assert image_tree(cluster.nodes[name], "cluster-app").is_dir()

    # A commit on one node makes containers on another.
    source_node = next(iter(made))
    committed_from = made[source_node]
    exec_commands(cluster.client(0), committed_from, ["echo committed > /home/user/kept.txt"])
    committed = api(cluster, "POST", f"/containers/{committed_from}/image", replica=1,
                    json={"name": "cluster-commit"})
    assert committed.status_code == 200, committed.text
    assert any(key.endswith("-cluster-commit.tar.zst") for key in archives(cluster)), archives(cluster)
    cluster.wait_nodes(lambda nodes: all("cluster-commit" in node["images"] for node in nodes),
                       120, "every node lists cluster-commit")
    set_draining(cluster, source_node, True)
    try:
        copy = api(cluster, "POST", "/containers", json={"name": "from-commit", "image": "cluster-commit"})
        assert copy.status_code == 200, copy.text
    finally:
        set_draining(cluster, source_node, False)
    assert cluster.node_holding(copy.json()["id"]) not in (None, source_node)
    out = exec_commands(cluster.client(1), copy.json()["id"],
                        ["cat /home/user/kept.txt /etc/built.txt"])["output"][0]
    assert out["stdout"] == "committed\nbuilt\n", out
    cluster.client(0).containers.delete(copy.json()["id"])
    assert api(cluster, "DELETE", "/images/cluster-commit").status_code == 200

    refused = api(cluster, "DELETE", "/images/cluster-app", key=BETA)
    assert refused.status_code == 404, refused.text
    deleted = api(cluster, "DELETE", "/images/cluster-app", replica=1)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"id": "cluster-app", "object": "image.deleted", "deleted": True}
    assert not any(key.endswith("-cluster-app.tar.zst") for key in archives(cluster))
    for replica in (0, 1):
        assert api(cluster, "GET", "/images/cluster-app", replica=replica).status_code == 404
        gone = api(cluster, "POST", "/containers", replica=replica,
                   json={"name": "late", "image": "cluster-app"})
        assert gone.status_code == 400, gone.text
    # Containers made before keep running on it.
    for container_id in made.values():
        out = exec_commands(cluster.client(0), container_id, ["cat /etc/built.txt"])["output"][0]
        assert out["stdout"] == "built\n", out
    # Each node's copy goes with its sweep.
    assert wait_until(lambda: not any(image_tree(node, "cluster-app").exists()
                                      for node in cluster.nodes.values()), 180, 1)
    for container_id in made.values():
        cluster.client(0).containers.delete(container_id)
    assert api(cluster, "DELETE", "/images/cluster-base").status_code == 200


def node_with(cluster, image: str):
    """The nodes whose engine holds a tree of `image`."""
    return {name for name, node in cluster.nodes.items() if image_tree(node, image).is_dir()}


def test_fetched_images_beyond_the_cache_bound_are_removed_and_fetched_again(clusters):
    # Each node keeps at most one byte of fetched images: every idle one
    # beyond is removed, the ones in use and the originals stay.
    cluster = clusters.get(image_cache_bytes="1", **ROOMY)
    origins = {}
    for name in ("cache-a", "cache-b"):
        imported = api(cluster, "POST", "/images", files={
            "name": (None, name),
            "file": ("image.tar", oci_layout({f"etc/{name}.txt": f"{name}\n".encode()}), "application/x-tar")})
        assert imported.status_code == 202, imported.text
        assert finished(cluster, imported.json()["id"], replica=1)["status"] == "ready"
        origins[name] = node_with(cluster, name)
        assert len(origins[name]) == 1, origins
    # A node that made neither: what it holds of them it fetched.
    fetcher = next(name for name in cluster.nodes if name not in origins["cache-a"] | origins["cache-b"])
    node = cluster.nodes[fetcher]
    others = [other for other in cluster.nodes if other != fetcher]
    cluster.wait_nodes(lambda nodes: all({"cache-a", "cache-b"} <= set(n["images"]) for n in nodes),
                       120, "every node lists both images")

    def create(name: str, image: str) -> str:
        answer = api(cluster, "POST", "/containers", json={"name": name, "image": image})
        assert answer.status_code == 200, answer.text
        assert cluster.node_holding(answer.json()["id"]) == fetcher
        out = exec_commands(cluster.client(0), answer.json()["id"], [f"cat /etc/{image}.txt"])["output"][0]
        assert out["stdout"] == f"{image}\n", out
        return answer.json()["id"]

    for other in others:
        set_draining(cluster, other, True)
    try:
        on_a = create("uses-a", "cache-a")
        assert image_tree(node, "cache-a").is_dir()
        # Over the bound with both, but a container is made from each.
        on_b = create("uses-b", "cache-b")
        assert image_tree(node, "cache-a").is_dir() and image_tree(node, "cache-b").is_dir()
        cluster.client(0).containers.delete(on_a)
        # Idle now: the sweep removes it, the one in use stays.
        assert wait_until(lambda: not image_tree(node, "cache-a").exists(), 180, 0.5), node.log_tail()
        assert image_tree(node, "cache-b").is_dir()
        # Logged once the engine's delete returns (its tree goes first).
        assert wait_until(lambda: "removed a fetched image beyond image_cache_bytes" in node.log_tail(100_000),
                          60, 0.2), node.log_tail()
        # The originals stay on the nodes that made them, over the bound.
        for name, made_on in origins.items():
            assert node_with(cluster, name) >= made_on, (name, made_on)
        # Used again: fetched again.
        again = create("uses-a-again", "cache-a")
        assert image_tree(node, "cache-a").is_dir()
    finally:
        for other in others:
            set_draining(cluster, other, False)
    for container_id in (on_b, again):
        cluster.client(0).containers.delete(container_id)
    for name in origins:
        assert api(cluster, "DELETE", f"/images/{name}").status_code == 200


def e2b(cluster, method: str, path: str, replica: int = 0, **kwargs) -> requests.Response:
    """One E2B call through a replica, with E2B's key header."""
    return requests.request(method, f"{cluster.replicas[replica].root}{path}",
                            headers={"X-API-KEY": ALPHA}, timeout=300, **kwargs)


def template_status(cluster, template_id: str, build_id: str, replica: int = 0) -> dict:
    answer = e2b(cluster, "GET", f"/templates/{template_id}/builds/{build_id}/status", replica)
    assert answer.status_code == 200, answer.text
    return answer.json()


def building_on(cluster):
    """The nodes whose engine has a build sandbox."""
    return {name for name, node in cluster.nodes.items()
            if any((node.data_dir / "sandbox" / "containers").glob("imgbuild*"))}


def test_a_template_build_whose_node_restarts_ends_in_error(clusters):
    # The template's base is a project image: the default image, which
    # E2B's base images stand for. The node is restarted, never declared
    # lost meanwhile (a loss fails its builds too, saying so).
    cluster = clusters.get(default_image="tpl-base", node_lost_after_secs=600, **ROOMY)
    imported = api(cluster, "POST", "/images", files={
        "name": (None, "tpl-base"),
        "file": ("image.tar", oci_layout({}), "application/x-tar")})
    assert imported.status_code == 202, imported.text
    assert finished(cluster, imported.json()["id"], replica=1)["status"] == "ready"
    requested = e2b(cluster, "POST", "/v3/templates", json={"name": "interrupted"})
    assert requested.status_code == 202, requested.text
    template_id, build_id = requested.json()["templateID"], requested.json()["buildID"]
    started = e2b(cluster, "POST", f"/v2/templates/{template_id}/builds/{build_id}", replica=1,
                  json={"fromImage": "e2bdev/base", "steps": [{"type": "RUN", "args": ["sleep 600"]}]})
    assert started.status_code == 202, started.text
    # The step runs (its build sandbox is up, its line logged).
    assert wait_until(lambda: any("sleep 600" in entry["message"] for entry in
                                  template_status(cluster, template_id, build_id)["logEntries"]),
                      300, 0.5), template_status(cluster, template_id, build_id)
    assert template_status(cluster, template_id, build_id)["status"] == "building"
    assert wait_until(lambda: len(building_on(cluster)) == 1, 60, 0.2)
    victim = next(iter(building_on(cluster)))
    clusters.taint()
    cluster.nodes[victim].kill9()
    cluster.restart_node(victim)
    for replica in (0, 1):
        status = template_status(cluster, template_id, build_id, replica)
        assert status["status"] == "error", status
        assert "stopped during it" in status["reason"]["message"], status
    job = api(cluster, "GET", f"/images/builds/{build_id}").json()
    assert job["status"] == "error" and "stopped" in job["error"]["message"], job
    # Over: the template can go, and be built again.
    assert e2b(cluster, "DELETE", f"/templates/{template_id}").status_code == 204
