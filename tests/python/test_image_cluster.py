"""shellgate's own image (scripts/image), run as Kubernetes would run it:
two sandbox nodes and one API replica as podman containers (runc, the
cgroupfs manager), each with the security context, environment, volumes,
resources, command and probes deploy/kubernetes gives its role. Those are
not restated here: the manifests are rendered with kustomize and turned
into podman's flags (`podman_run_args`), which refuses any setting it does
not know how to give, so the manifests and this test cannot drift apart.

Postgres and the S3-compatible server (moto's) run on the host, on the
podman network's gateway, as the store's external endpoints do for the
manifests (they are not part of them; as podman containers they would
need images from a registry). The test drives, through the replica with
the OpenAI SDK: a container made, commands run in it, a file uploaded and
read back, then the node holding it killed and started again (the kubelet
restarting a crashed pod's container) and the same container's files and
commands served again.

Also here: the image is reproducible (built twice, one digest) and its
`shellgate --version` names the commit and build date.

Needs root, podman, buildah, skopeo and mmdebstrap (scripts/test installs
them), and the binary under test (SHELLGATE_BIN), which scripts/image
strips and ships."""

import io
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import openai
import pytest
import requests
import yaml

from conftest import BINARY, exec_commands, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
MOTO_SERVER = Path(sys.executable).parent / "moto_server"
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
# podman's runc refuses rlimits at this host's hard limits; a Kubernetes
# node's runtime sets its own defaults the same way.
ULIMITS = ["--ulimit", "nofile=16384:16384", "--ulimit", "nproc=16384:16384"]
# runc with the cgroupfs manager, whatever podman would pick: crun refuses
# a hybrid cgroup host, and there is no systemd to manage cgroups.
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
# Two nodes on one host share its uids: each needs a range of its own (on
# Kubernetes each node pod is on a machine of its own). Apart from the
# engine's default (3,000,000,000), which the run's single boxes use, and
# from tests/python/cluster.py's slots (3,200,000,000 to 3,800,000,000).
UID_BASES = {"node-a": 3_900_000_000, "node-b": 4_000_000_000}
API_KEY = "sk-image-cluster-" + secrets.token_hex(8)
# The operator's key: the node list (GET /v1/cluster/nodes) is an admin's.
ADMIN_KEY = "sk-image-admin-" + secrets.token_hex(8)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("podman"),
                                reason="needs root and podman (scripts/test installs it)")


def run(*args, check=True, timeout=600, **kwargs) -> subprocess.CompletedProcess:
    """A command whose failure raises with its output (what it saw)."""
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def build_image(out: Path) -> dict:
    """scripts/image on the binary under test, its outputs in `out`."""
    tag = f"localhost/shellgate-test:{secrets.token_hex(4)}"
    run(ROOT / "scripts" / "image", "--binary", BINARY, "--tag", tag, "--out", out, timeout=1200)
    return {"tag": tag, "digest": (out / "digest").read_text().strip(), "out": out}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    # An image built already (scripts/image's tag), for iterating on the
    # cluster's tests alone; the SBOM and reproducibility tests need a build.
    if os.environ.get("SHELLGATE_TEST_IMAGE"):
        yield {"tag": os.environ["SHELLGATE_TEST_IMAGE"], "digest": None, "out": None}
        return
    built = build_image(tmp_path_factory.mktemp("image"))
    yield built
    run("podman", "rmi", "-f", built["tag"], check=False)


def test_the_image_is_reproducible(image, tmp_path):
    if image["out"] is None:
        pytest.skip("SHELLGATE_TEST_IMAGE: the image was not built here")
    again = build_image(tmp_path / "again")
    try:
        assert again["digest"] == image["digest"], f"two builds of one input: {image} and {again}"
    finally:
        run("podman", "rmi", "-f", again["tag"], check=False)


def test_the_image_names_its_version_and_serves_as_the_api_user(image):
    shown = run(*PODMAN, "run", "--rm", *ULIMITS, image["tag"], "--version").stdout
    # `unknown` where the source had no git and no SHELLGATE_BUILD_COMMIT or
    # SOURCE_DATE_EPOCH (a tarball): build.rs says so rather than failing.
    assert re.fullmatch(r"shellgate \d+\.\d+\.\d+ \(commit ([0-9a-f]{12}|unknown), built (\d{4}-\d\d-\d\d|unknown)\)\n",
                        shown), shown
    who = run(*PODMAN, "run", "--rm", *ULIMITS, "--entrypoint", "id", image["tag"]).stdout
    assert who.startswith("uid=65532(shellgate) gid=65532(shellgate)"), who
    # The SBOM: the crates built in, and the Debian packages.
    if image["out"] is None:
        return
    crates = (image["out"] / "crates.tsv").read_text()
    assert "\ntokio\t" in crates and "\nshellgate\t" in crates, crates[:2000]
    debian = (image["out"] / "debian-packages.tsv").read_text()
    assert "\ne2fsprogs\t" in debian and "\nca-certificates\t" in debian, debian


# --- the manifests, as podman flags ---------------------------------------


def render_manifests(tmp_path: Path) -> list:
    """deploy/kubernetes rendered by kustomize, with base/secret.env made
    from its example as a user's first step makes it."""
    tree = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, tree, ignore=shutil.ignore_patterns("secret.env"))
    shutil.copy(tree / "base" / "secret.env.example", tree / "base" / "secret.env")
    kubectl = Path(sys.executable).parent / "kubectl"
    rendered = run(kubectl if kubectl.exists() else "kubectl", "kustomize", tree).stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


def workload(docs: list, kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {[(d['kind'], d['metadata']['name']) for d in docs]}"
    return found[0]["spec"]["template"]["spec"]


def expand(value: str, env: dict) -> str:
    """Kubernetes' $(NAME) references to variables defined before."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def container_env(container: dict, pod: dict, config: dict, secret: dict) -> dict:
    """The container's environment as the kubelet makes it: envFrom's
    ConfigMap, then env in order (fieldRefs from `pod`: its IP and node
    name; Secret keys from `secret`)."""
    env = {}
    for source in container.get("envFrom", []):
        assert set(source) == {"configMapRef"}, f"envFrom {source}: not translated"
        env.update(config)
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = expand(entry["value"], env)
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            field = source["fieldRef"]["fieldPath"]
            assert field in pod, f"{entry['name']}: fieldRef {field} not translated"
            env[entry["name"]] = pod[field]
        elif "secretKeyRef" in source:
            env[entry["name"]] = secret[source["secretKeyRef"]["key"]]
        else:
            raise AssertionError(f"{entry}: not translated")
    return env


def podman_run_args(spec: dict, pod: dict, config: dict, secret: dict, host_paths: dict) -> list:
    """`podman run`'s flags for the pod template `spec`'s one container:
    every setting of its pod and container security contexts, its volumes,
    its memory limit and its readiness probe (podman's health check), each
    translated or refused, never skipped."""
    (container,) = spec["containers"]
    # A pod's containers are restarted whenever they exit (the default
    # policy, which the manifests keep), as the kubelet does.
    assert spec.get("restartPolicy", "Always") == "Always", spec.get("restartPolicy")
    args = ["--restart", "always"]
    for flag in ("hostPID", "hostIPC", "hostNetwork"):
        assert spec.get(flag, False) is False, f"{flag}: not translated"
    # hostUsers: true is podman's default (no user namespace of its own).
    assert spec.get("hostUsers", True) is True, "hostUsers: false is not translated"
    security = {**spec.get("securityContext", {}), **container.get("securityContext", {})}
    handled = set()

    def take(key, default=None):
        handled.add(key)
        return security.get(key, default)

    if take("privileged", False):
        args.append("--privileged")
    user, group = take("runAsUser"), take("runAsGroup")
    if user is not None:
        args += ["--user", f"{user}:{group if group is not None else user}"]
    if take("runAsNonRoot", False):
        assert user not in (None, 0), f"runAsNonRoot with runAsUser {user}"
    if take("fsGroup") is not None:
        args += ["--group-add", str(security["fsGroup"])]
    if take("allowPrivilegeEscalation", True) is False:
        args += ["--security-opt", "no-new-privileges"]
    if take("readOnlyRootFilesystem", False):
        args.append("--read-only")
    capabilities = take("capabilities", {})
    assert set(capabilities) <= {"drop", "add"}, f"capabilities {capabilities}: not translated"
    args += [f"--cap-drop={c}" for c in capabilities.get("drop", [])]
    args += [f"--cap-add={c}" for c in capabilities.get("add", [])]
    for key, option in (("seccompProfile", "seccomp"), ("appArmorProfile", "apparmor")):
        profile = take(key, {"type": "RuntimeDefault"})["type"]
        assert profile in ("RuntimeDefault", "Unconfined"), f"{key} {profile}: not translated"
        if profile == "Unconfined":
            args += ["--security-opt", f"{option}=unconfined"]
    assert set(security) <= handled, f"security settings not translated: {set(security) - handled}"

    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        assert set(mount) == {"name", "mountPath"}, f"volumeMount {mount}: not translated"
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            source = host_paths.get(volume["hostPath"]["path"], volume["hostPath"]["path"])
            args += ["--volume", f"{source}:{mount['mountPath']}"]
        elif "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit", "").replace("Gi", "g").replace("Mi", "m")
            # An emptyDir is writable by the pod's fsGroup; a tmpfs, by all.
            args += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777" + (f",size={size}" if size else "")]
        else:
            raise AssertionError(f"volume {volume}: not translated")

    memory = container.get("resources", {}).get("limits", {}).get("memory")
    if memory:
        args += ["--memory", memory.replace("Gi", "g").replace("Mi", "m")]

    port = {p["name"]: p["containerPort"] for p in container["ports"]}
    probe = container["readinessProbe"]["httpGet"]
    startup = container["startupProbe"]
    args += ["--health-cmd", f"curl -sf -o /dev/null http://127.0.0.1:{port[probe['port']]}{probe['path']}",
             "--health-interval", "disable",  # run by the test (no systemd timers here)
             "--health-timeout", f"{container['readinessProbe']['timeoutSeconds']}s",
             "--health-retries", str(container["readinessProbe"]["failureThreshold"]),
             "--health-start-period", f"{startup['periodSeconds'] * startup['failureThreshold']}s"]
    env = container_env(container, pod, config, secret)
    for name, value in env.items():
        args += ["--env", f"{name}={value}"]
    command = container["command"]
    args += ["--entrypoint", json.dumps(command[:1])]
    return args, command[1:] + container.get("args", [])


def startup_bound(spec: dict) -> float:
    """How long the kubelet waits for the startup probe: its period times
    its failure threshold."""
    probe = spec["containers"][0]["startupProbe"]
    return probe["periodSeconds"] * probe["failureThreshold"]


# --- the cluster --------------------------------------------------------------


class PodmanCluster:
    def __init__(self, image: str, work: Path):
        self.image = image
        self.work = work
        self.suffix = secrets.token_hex(3)
        self.network = f"sgimg-{self.suffix}"
        self.containers = []
        self.started = {}
        self.postgres_dir = None
        self.moto = None

    def name(self, role: str) -> str:
        return f"sgimg-{self.suffix}-{role}"

    def start(self) -> "PodmanCluster":
        run("podman", "network", "create", self.network)
        network = json.loads(run("podman", "network", "inspect", self.network).stdout)[0]
        subnet = network["subnets"][0]
        self.subnet, self.gateway = subnet["subnet"], subnet["gateway"]
        prefix = self.gateway.rsplit(".", 1)[0]
        self.ip = {"node-a": f"{prefix}.11", "node-b": f"{prefix}.12", "api": f"{prefix}.21"}
        # The bridge and its gateway address exist once a container is on
        # the network: one that holds it up, so the host's servers can bind there.
        self._podman_run("bridge", ["--network", self.network, "--entrypoint", '["sleep"]'],
                         ["infinity"])
        self._start_postgres()
        self._start_moto()

        docs = render_manifests(self.work)
        self.node_spec = workload(docs, "DaemonSet", "shellgate-node")
        self.api_spec = workload(docs, "Deployment", "shellgate-api")
        configmap = next(d for d in docs if d["kind"] == "ConfigMap")
        self.config = {
            **configmap["data"],
            "SHELLGATE_OBJECT_STORE": "s3://shellgate/image-cluster",
            "SHELLGATE_S3_ENDPOINT": f"http://{self.gateway}:{self.moto_port}",
            "SHELLGATE_S3_ALLOW_HTTP": "true",
            # Containers on the image's own /usr (`host`): no 2.4 GB build.
            "SHELLGATE_BUILD_DEFAULT_IMAGE": "false",
            "SHELLGATE_LOG_FORMAT": "text",
        }
        self.secret = {
            "cluster-secret": secrets.token_hex(32),
            "database-url": f"postgres://postgres@{self.gateway}:{self.postgres_port}/shellgate",
            "s3-access-key-id": "test",
            "s3-secret-access-key": "test",
            "upstream-api-key": "unused",
            "api-keys": f"{API_KEY}:image-cluster,{ADMIN_KEY}:ops:admin",
        }
        # One at a time: podman sets up each container's network while the
        # others run, and a server connecting to Postgres meanwhile may see
        # its connection cut (it exits, and is restarted).
        for node in ("node-a", "node-b"):
            self.start_node(node)
            self.wait_ready(node)
        self.start_api()
        self.wait_ready("api")
        self.wait_nodes_ready({"node-a", "node-b"})
        return self

    def _podman_run(self, role: str, args: list, command: list) -> None:
        name = self.name(role)
        run(*PODMAN, "run", "-d", "--name", name, *ULIMITS, *args, self.image, *command)
        self.containers.append(name)

    def _start_postgres(self) -> None:
        self.postgres_dir = Path(tempfile.mkdtemp(prefix="shellgate-image-pg-"))
        shutil.chown(self.postgres_dir, "postgres", "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
        data = self.postgres_dir / "data"
        run(*as_postgres, POSTGRES_BIN / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync")
        with open(data / "pg_hba.conf", "a") as f:
            f.write(f"host all all {self.subnet} trust\n")
        self.postgres_port = free_port()
        run(*as_postgres, POSTGRES_BIN / "pg_ctl", "-D", data, "-l", self.postgres_dir / "log", "-w", "-o",
            f"-p {self.postgres_port} -k {self.postgres_dir} -c listen_addresses=127.0.0.1,{self.gateway} "
            "-c fsync=off -c synchronous_commit=off", "start")
        run("psql", "-X", "-q", "-h", "127.0.0.1", "-p", self.postgres_port, "-U", "postgres",
            "-c", "CREATE DATABASE shellgate")

    def _start_moto(self) -> None:
        self.moto_port = free_port()
        log = open(self.work / "moto.log", "wb")
        self.moto = subprocess.Popen([str(MOTO_SERVER), "-H", self.gateway, "-p", str(self.moto_port)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        endpoint = f"http://{self.gateway}:{self.moto_port}"

        def up():
            try:
                return requests.get(endpoint, timeout=1).status_code < 500
            except requests.RequestException:
                return False

        assert wait_until(up, 60, 0.1), (self.work / "moto.log").read_text()
        made = requests.put(f"{endpoint}/shellgate", timeout=10)
        assert made.status_code == 200, made.text

    def start_node(self, node: str) -> None:
        data = self.work / node
        data.mkdir(exist_ok=True)
        config = {**self.config, "SHELLGATE_SANDBOX_UID_BASE": str(UID_BASES[node])}
        args, command = podman_run_args(
            self.node_spec, {"status.podIP": self.ip[node], "spec.nodeName": node}, config, self.secret,
            {"/var/lib/shellgate": data})
        self._podman_run(node, ["--network", self.network, "--ip", self.ip[node], *args], command)
        self.started[node] = args

    def start_api(self) -> None:
        args, command = podman_run_args(self.api_spec, {"status.podIP": self.ip["api"]}, self.config,
                                        self.secret, {})
        self.api_port = free_port()
        self._podman_run("api", ["--network", self.network, "--ip", self.ip["api"],
                                 "--publish", f"127.0.0.1:{self.api_port}:8080", *args], command)

    def logs(self, role: str) -> str:
        done = run("podman", "logs", "--tail", "200", self.name(role), check=False)
        return (done.stdout + done.stderr)[-12000:]

    def postgres_log(self) -> str:
        log = self.postgres_dir / "log"
        return log.read_text()[-3000:] if log.exists() else ""

    def wait_ready(self, role: str) -> None:
        """The readiness probe (podman's health check, run by hand), within
        the startup probe's bound."""
        spec = self.api_spec if role == "api" else self.node_spec

        def ready():
            return run(*PODMAN, "healthcheck", "run", self.name(role), check=False).returncode == 0

        assert wait_until(ready, startup_bound(spec), 1), \
            f"{role} not ready: {self.logs(role)}\npostgres: {self.postgres_log()}"

    def wait_nodes_ready(self, names: set) -> None:
        """The replica lists every node of `names` ready (their
        registrations and heartbeats, in Postgres)."""
        seen = {}

        def listed():
            done = requests.get(f"http://127.0.0.1:{self.api_port}/v1/cluster/nodes",
                                headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
            seen["last"] = (done.status_code, done.text[:2000])
            if done.status_code != 200:
                return False
            return {n["id"] for n in done.json()["data"] if n["status"] == "ready"} >= names

        assert wait_until(listed, 120, 1), f"nodes {names} not ready: {seen}"

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.api_port}/v1", api_key=API_KEY,
                             max_retries=4, timeout=120)

    def node_of_the_only_container(self) -> str:
        """The node holding the cluster's one container (the node list's
        counts)."""
        done = requests.get(f"http://127.0.0.1:{self.api_port}/v1/cluster/nodes",
                            headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
        assert done.status_code == 200, done.text
        holding = [n["id"] for n in done.json()["data"] if n["containers"] > 0]
        assert len(holding) == 1, done.text
        return holding[0]

    def stop(self) -> None:
        for name in reversed(self.containers):
            run("podman", "rm", "-f", "-t", "5", name, check=False)
        run("podman", "network", "rm", "-f", self.network, check=False)
        if self.moto is not None:
            self.moto.kill()
            self.moto.wait()
        if self.postgres_dir is not None:
            run("runuser", "-u", "postgres", "--", POSTGRES_BIN / "pg_ctl", "-D", self.postgres_dir / "data",
                "-m", "immediate", "-w", "stop", check=False)
            shutil.rmtree(self.postgres_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(image, tmp_path_factory):
    work = tmp_path_factory.mktemp("podman-cluster")
    started = PodmanCluster(image["tag"], work)
    try:
        yield started.start()
    finally:
        started.stop()


def test_the_api_role_runs_as_the_restricted_profile_asks(cluster):
    inspected = json.loads(run("podman", "inspect", cluster.name("api")).stdout)[0]
    assert inspected["Config"]["User"] == "65532:65532", inspected["Config"]["User"]
    assert inspected["HostConfig"]["ReadonlyRootfs"] is True, inspected["HostConfig"]
    assert inspected["HostConfig"]["Privileged"] is False, inspected["HostConfig"]
    assert inspected["EffectiveCaps"] in (None, []), inspected["EffectiveCaps"]
    live = requests.get(f"http://127.0.0.1:{cluster.api_port}/livez", timeout=10)
    assert live.status_code == 200, live.text


def test_a_container_through_the_replica_survives_its_nodes_restart(cluster):
    client = cluster.client()
    # The tests before this one rebuild the image beside the nodes: both
    # must be placeable again (ready, heart-beating) before a create.
    cluster.wait_nodes_ready(set(UID_BASES))
    try:
        container = client.containers.create(name="from-the-image")
    except openai.APIStatusError as error:
        nodes = requests.get(f"http://127.0.0.1:{cluster.api_port}/v1/cluster/nodes",
                             headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10).text
        raise AssertionError(
            f"create failed: {error}\nnodes: {nodes}\n"
            + "\n".join(f"{n}: {cluster.logs(n)[-3000:]}" for n in UID_BASES)) from error
    result = exec_commands(client, container.id, ["echo hi", "uname -s", "printf made > made.txt"])
    assert [o["outcome"] for o in result["output"]] == [{"type": "exit", "exit_code": 0}] * 3, result
    assert result["output"][0]["stdout"] == "hi\n", result
    uploaded = client.containers.files.create(container.id, file=("notes.txt", io.BytesIO(b"round trip")))
    read = client.containers.files.content.retrieve(uploaded.id, container_id=container.id).read()
    assert read == b"round trip", read
    seen = exec_commands(client, container.id, [f"cat {uploaded.path}"])
    assert seen["output"][0]["stdout"] == "round trip", seen

    # The kubelet restarting the node's crashed container: the same id,
    # address and data directory (hostPath), no preStop drain.
    node = cluster.node_of_the_only_container()
    run("podman", "kill", cluster.name(node))
    run("podman", "wait", cluster.name(node), check=False)
    run(*PODMAN, "start", cluster.name(node))
    cluster.wait_ready(node)
    cluster.wait_nodes_ready({node})

    def served():
        try:
            again = exec_commands(client, container.id, ["cat made.txt", f"cat {uploaded.path}"])
        except openai.APIStatusError as error:
            if error.status_code in (502, 503):
                return False
            raise
        served.result = again
        return True

    assert wait_until(served, 120, 1), f"not served after {node}'s restart: {cluster.logs(node)}"
    assert [o["stdout"] for o in served.result["output"]] == ["made", "round trip"], served.result
    read = client.containers.files.content.retrieve(uploaded.id, container_id=container.id).read()
    assert read == b"round trip", read
    client.containers.delete(container.id)
