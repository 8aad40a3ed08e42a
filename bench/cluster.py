"""The cluster against a single box, in the same run.

1. Exec latency: `POST /v1/containers/{id}/exec` of `true`, one after
   another on a kept-alive connection, (a) on a single box (`shellgate
   serve`, SQLite) and (b) through an API replica to the node holding the
   container, in a network namespace of its own across a veth (Postgres
   store); (c) straight to that node with the cluster's secret, which
   shows what the replica's hop costs. Rounds alternate a, b, c; the
   median of every request is reported, and b/a is the ratio with a target
   of at most 1.2x.
2. Creates per second: containers made by 16 concurrent clients through a
   replica, with one node and with three.
3. With `--versus OTHER_BINARY` (another build, e.g. main's before a
   change): exec through a replica on a cluster of each binary, the two
   alternating round by round in the same run (one cluster at a time on
   a machine), and the ratio of their medians.

Runs the cluster harness of the tests (tests/python/cluster.py: network
namespaces, Postgres, moto's S3), so it needs root and the test venv:
`.venv/bin/python bench/cluster.py`.
"""

import argparse
import concurrent.futures
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))

import requests  # noqa: E402

import cluster  # noqa: E402
from conftest import BINARY, KEY_A, Server  # noqa: E402

KEY = cluster.MEMBER_KEYS["alpha"]


def session(key: str, extra: dict = None) -> requests.Session:
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {key}"
    s.headers.update(extra or {})
    return s


def create(s: requests.Session, root: str) -> str:
    answer = s.post(f"{root}/v1/containers", json={"name": "bench"}, timeout=60)
    answer.raise_for_status()
    return answer.json()["id"]


def exec_times(s: requests.Session, root: str, container: str, count: int) -> list:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        answer = s.post(f"{root}/v1/containers/{container}/exec", json={"commands": ["true"]}, timeout=60)
        times.append(time.perf_counter() - start)
        answer.raise_for_status()
    return times


def exec_latency(rounds: int, per_round: int) -> dict:
    print(f"exec latency: {rounds} rounds of {per_round} execs each, alternating", flush=True)
    samples = {"single box": [], "replica -> node": [], "node direct": []}
    with tempfile.TemporaryDirectory(prefix="shellgate-bench-single-") as tmp:
        single = Server(Path(tmp), warm_containers="0").start()
        the_cluster = cluster.Cluster(replicas=1).start()
        try:
            single_session = session(KEY_A)
            single_root = f"http://{single.host}:{single.port}"
            single_container = create(single_session, single_root)
            replica_session = session(KEY)
            replica_root = the_cluster.replicas[0].root
            container = create(replica_session, replica_root)
            node = the_cluster.node_holding(container)
            node_root = the_cluster.nodes[node].root
            node_session = session(KEY, {cluster.SECRET_HEADER: the_cluster.secret})
            paths = [
                ("single box", single_session, single_root, single_container),
                ("replica -> node", replica_session, replica_root, container),
                ("node direct", node_session, node_root, container),
            ]
            for name, s, root, target in paths:
                exec_times(s, root, target, 20)  # warm-up: connections, caches
            for _ in range(rounds):
                for name, s, root, target in paths:
                    samples[name].extend(exec_times(s, root, target, per_round))
        finally:
            the_cluster.stop()
            single.stop()
    return {name: times for name, times in samples.items()}


def exec_through_replica(binary: str, per_round: int) -> list:
    """Exec times of `true` through a replica to the node holding the
    container, on a cluster of `binary` started for this round."""
    # The harness starts the servers of the binary its module names.
    cluster.BINARY = Path(binary)
    the_cluster = cluster.Cluster(replicas=1).start()
    try:
        s = session(KEY)
        root = the_cluster.replicas[0].root
        container = create(s, root)
        exec_times(s, root, container, 20)  # warm-up: connections, caches
        return exec_times(s, root, container, per_round)
    finally:
        the_cluster.stop()


def versus(other: str, rounds: int, per_round: int) -> dict:
    """This build (SHELLGATE_BIN) against `other`, round by round."""
    print(f"exec through a replica: {rounds} rounds of {per_round}, {other} against {BINARY}", flush=True)
    builds = {"other": other, "this": str(BINARY)}
    samples = {name: [] for name in builds}
    try:
        for _ in range(rounds):
            for name, binary in builds.items():
                samples[name].extend(exec_through_replica(binary, per_round))
    finally:
        cluster.BINARY = BINARY
    return samples


def creates_per_second(nodes: int, count: int, clients: int) -> float:
    the_cluster = cluster.Cluster(replicas=1, nodes=nodes, settings={
        "max_running_containers_per_project": "100000",
        "max_memory_per_project": "100000g",
    }).start()
    try:
        root = the_cluster.replicas[0].root
        sessions = [session(KEY) for _ in range(clients)]
        made = []
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            made = list(pool.map(lambda n: create(sessions[n % clients], root), range(count)))
        elapsed = time.perf_counter() - start
        assert len(made) == count
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(lambda n: sessions[n % clients].delete(
                f"{root}/v1/containers/{made[n]}", timeout=60), range(count)))
        return count / elapsed
    finally:
        the_cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=100)
    parser.add_argument("--creates", type=int, default=300)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--versus", metavar="OTHER_BINARY",
                        help="only exec through a replica, this build against another, alternating")
    args = parser.parse_args()
    if why := cluster.can_run():
        sys.exit(f"bench/cluster.py: {why}")

    if args.versus:
        samples = versus(args.versus, args.rounds, args.per_round)
        medians = {name: statistics.median(times) for name, times in samples.items()}
        print("\nexec of `true` through a replica, median (p90) per request:")
        for name, times in samples.items():
            p90 = statistics.quantiles(times, n=10)[-1]
            print(f"  {name:6} {medians[name] * 1000:6.2f} ms ({p90 * 1000:6.2f} ms)")
        print(f"  this / other: {medians['this'] / medians['other']:4.2f}x")
        return

    samples = exec_latency(args.rounds, args.per_round)
    base = statistics.median(samples["single box"])
    print("\nexec of `true`, median (p90) per request:")
    for name, times in samples.items():
        median = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"  {name:16} {median * 1000:6.2f} ms ({p90 * 1000:6.2f} ms)  {median / base:4.2f}x the single box")

    print(f"\ncreates: {args.creates} containers by {args.clients} concurrent clients through one replica")
    for nodes in (1, 3):
        rate = creates_per_second(nodes, args.creates, args.clients)
        print(f"  {nodes} node{'s' if nodes > 1 else ''}: {rate:6.1f} creates/s", flush=True)


if __name__ == "__main__":
    main()
