#!/usr/bin/env python3
"""The egress proxy's benchmark (BENCHMARKS.md, "Egress proxy").

Every number is measured in the same run as its baseline, on this machine,
inside a network namespace this script creates (nothing touches the host's
network): nginx serves HTTPS at 203.0.113.10 there; shellgate serves the API
there too; `wrk` is the client, run

  * directly in that namespace (the baseline: the same client, the same
    server, no sandbox, no proxy), and
  * inside a shellgate container with an allowlist, where every connection
    goes through the egress proxy (transparently: wrk knows nothing of
    proxies), passed through as is, or terminated to put a secret in.

Container creation is timed from the client's side (the API call end to
end), with and without an allowlist, alternating.

Usage: bench/egress.py [--seconds N]   (bench/run.sh installs nginx-light,
wrk and openssl first). Needs root.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("SHELLGATE_BIN", ROOT / "target" / "release" / "shellgate"))
NETNS = f"sg-egress-bench-{os.getpid()}"
HOST_IF, NS_IF = f"sgbh{os.getpid() % 10000}", f"sgbn{os.getpid() % 10000}"
HOST_ADDR, NS_ADDR, PORT = "198.18.78.1", "198.18.78.2", 18080
SERVER_ADDR = "203.0.113.10"
KEY = "sk-bench-project-a"


def sh(*args, **kwargs):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


def certificates(directory: Path) -> dict:
    ca_key, ca = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sh("openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=bench CA")
    sh("openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=a.allowed.test")
    ext = directory / "server.ext"
    ext.write_text("subjectAltName=DNS:a.allowed.test,DNS:api.secret.test\nbasicConstraints=CA:FALSE\n")
    sh("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
       "-out", cert, "-days", "2", "-extfile", ext)
    return {"ca": ca, "cert": cert, "key": key}


def api(method, path, body=None):
    request = urllib.request.Request(
        f"http://{NS_ADDR}:{PORT}/v1{path}", method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read() or b"null")


def in_container(container, command, seconds):
    result = api("POST", f"/containers/{container}/exec",
                 {"commands": [command], "timeout_ms": int((seconds + 30) * 1000)})
    entry = result["output"][0]
    if entry["outcome"].get("exit_code") != 0:
        raise RuntimeError(f"{command}: {entry}")
    return entry["stdout"]


def direct(command):
    return sh("nsenter", f"--net=/run/netns/{NETNS}", "sh", "-c", command).stdout


def requests_per_second(wrk_output):
    match = re.search(r"Requests/sec:\s+([\d.]+)", wrk_output)
    if not match:
        raise RuntimeError(f"no rate in: {wrk_output}")
    return float(match.group(1))


def wrk(args, seconds, url, header=""):
    return f"wrk {args} -d{seconds}s --timeout 5s {header} {url}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--creates", type=int, default=10)
    options = parser.parse_args()
    seconds = options.seconds

    directory = Path(tempfile.mkdtemp(prefix="shellgate-egress-bench-"))
    os.chmod(directory, 0o755)
    processes = []
    sh("ip", "netns", "add", NETNS)
    try:
        tls = certificates(directory)
        ns = ["ip", "-n", NETNS]
        sh(*ns, "link", "set", "lo", "up")
        sh(*ns, "addr", "add", f"{SERVER_ADDR}/32", "dev", "lo")
        sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF, "netns", NETNS)
        sh("ip", "addr", "add", f"{HOST_ADDR}/30", "dev", HOST_IF)
        sh("ip", "link", "set", HOST_IF, "up")
        sh(*ns, "addr", "add", f"{NS_ADDR}/30", "dev", NS_IF)
        sh(*ns, "link", "set", NS_IF, "up")

        nginx_conf = directory / "nginx.conf"
        nginx_conf.write_text(f"""
worker_processes 1;
daemon off;
pid {directory}/nginx.pid;
error_log {directory}/nginx.err;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  server {{
    listen {SERVER_ADDR}:443 ssl;
    ssl_certificate {tls['cert']};
    ssl_certificate_key {tls['key']};
    location / {{ return 200 "ok\\n"; }}
  }}
}}
""")
        processes.append(subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{NETNS}", "nginx", "-c", str(nginx_conf)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        config = directory / "shellgate.toml"
        config.write_text(f"""
api_keys = "{KEY}"
warm_containers = 0
container_cpus = 0.0
log_format = "text"
egress_allowed_domains = "a.allowed.test,api.secret.test"
egress_trusted_roots = "{tls['ca']}"
[egress_hosts]
"a.allowed.test" = ["{SERVER_ADDR}"]
"api.secret.test" = ["{SERVER_ADDR}"]
""")
        log = open(directory / "server.log", "wb")
        processes.append(subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{NETNS}", str(BINARY), "--data-dir", str(directory / "data"),
             "serve", "--config", str(config), "--listen", f"{NS_ADDR}:{PORT}"],
            stdout=log, stderr=log, env={"PATH": os.environ["PATH"], "SHELLGATE_LOG": "warn", "SHELLGATE_BUILD_DEFAULT_IMAGE": "false"}))
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://{NS_ADDR}:{PORT}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)

        policy = {"type": "allowlist", "allowed_domains": ["a.allowed.test", "api.secret.test"],
                  "domain_secrets": [{"domain": "api.secret.test", "name": "API_TOKEN", "value": "bench-secret"}]}
        container = api("POST", "/containers", {"name": "bench", "network_policy": policy})["id"]
        in_container(container, "true", 1)

        # One client, a new TLS connection per request: what a CLI tool or
        # a script making one call pays.
        new_connection = "-t1 -c1 -H 'Connection: close'"
        cases = {
            "new connection, direct": lambda: direct(wrk(new_connection, seconds, f"https://{SERVER_ADDR}/")),
            "new connection, proxy passthrough": lambda: in_container(
                container, wrk(new_connection, seconds, "https://a.allowed.test/"), seconds),
            "new connection, proxy with secret": lambda: in_container(
                container, wrk(new_connection, seconds, "https://api.secret.test/",
                               "-H \"Authorization: Bearer $API_TOKEN\""), seconds),
            "keep-alive, 1 client, direct": lambda: direct(wrk("-t1 -c1", seconds, f"https://{SERVER_ADDR}/")),
            "keep-alive, 1 client, proxy passthrough": lambda: in_container(
                container, wrk("-t1 -c1", seconds, "https://a.allowed.test/"), seconds),
            "keep-alive, 32 clients, direct": lambda: direct(wrk("-t2 -c32", seconds, f"https://{SERVER_ADDR}/")),
            "keep-alive, 32 clients, proxy passthrough": lambda: in_container(
                container, wrk("-t2 -c32", seconds, "https://a.allowed.test/"), seconds),
            "new connection, 32 clients, direct": lambda: direct(
                wrk("-t2 -c32 -H 'Connection: close'", seconds, f"https://{SERVER_ADDR}/")),
            "new connection, 32 clients, proxy passthrough": lambda: in_container(
                container, wrk("-t2 -c32 -H 'Connection: close'", seconds, "https://a.allowed.test/"), seconds),
        }
        rates = {name: [] for name in cases}
        for _ in range(options.rounds):  # interleaved: drift hits every case alike
            for name, run in cases.items():
                rates[name].append(requests_per_second(run()))
        rate = {name: statistics.median(values) for name, values in rates.items()}

        # Container creation, client side, alternating.
        create = {"no network": [], "allowlist": []}
        for _ in range(options.creates):
            for name, body in [("no network", {"name": "c"}),
                               ("allowlist", {"name": "c", "network_policy": {
                                   "type": "allowlist", "allowed_domains": ["a.allowed.test"]}})]:
                started = time.perf_counter()
                made = api("POST", "/containers", body)
                create[name].append((time.perf_counter() - started) * 1000)
                api("DELETE", f"/containers/{made['id']}")

        def ms(name):
            return 1000 / rate[name]

        print(f"\nEgress proxy, same run ({options.rounds} rounds of {seconds} s, medians)\n")
        print("| Measurement | Direct (baseline) | Through the proxy | Ratio |")
        print("|---|---|---|---|")
        for label, base, proxied in [
            ("HTTPS request on a new connection, 1 client (latency)",
             "new connection, direct", "new connection, proxy passthrough"),
            ("… with a secret put in (TLS terminated and re-made)",
             "new connection, direct", "new connection, proxy with secret"),
            ("HTTPS request on an open connection, 1 client (latency)",
             "keep-alive, 1 client, direct", "keep-alive, 1 client, proxy passthrough"),
        ]:
            print(f"| {label} | {ms(base):.3f} ms | {ms(proxied):.3f} ms "
                  f"(+{ms(proxied) - ms(base):.3f} ms) | {ms(proxied) / ms(base):.2f}× |")
        for label, base, proxied in [
            ("Requests per second, 32 clients, open connections",
             "keep-alive, 32 clients, direct", "keep-alive, 32 clients, proxy passthrough"),
            ("Requests per second, 32 clients, a new connection each",
             "new connection, 32 clients, direct", "new connection, 32 clients, proxy passthrough"),
        ]:
            print(f"| {label} | {rate[base]:.0f}/s | {rate[proxied]:.0f}/s | {rate[proxied] / rate[base]:.2f}× |")
        without, with_list = statistics.median(create["no network"]), statistics.median(create["allowlist"])
        print(f"| Container create (API call, no warm pool), without vs with an allowlist | "
              f"{without:.1f} ms | {with_list:.1f} ms | {with_list / without:.2f}× |")
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        for pid in subprocess.run(["ip", "netns", "pids", NETNS], capture_output=True, text=True).stdout.split():
            subprocess.run(["kill", "-9", pid], check=False)
        subprocess.run(["ip", "netns", "del", NETNS], check=False)
        subprocess.run(["ip", "link", "del", HOST_IF], check=False, capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
