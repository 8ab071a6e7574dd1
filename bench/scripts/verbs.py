#!/usr/bin/env python3
"""What one write costs the apiserver, by verb: the apiserver's and etcd's CPU time (from /proc)
over BENCH_VERBS_COUNT writes of each kind, 16 at a time, with the controller-manager paused so
that nothing else runs. Run by bench/scripts/verbs.sh on a cluster of its own; prints JSON.

Each pair compares two ways of making the same change on fresh objects of the same shape (the
Deployment, Service and Memcached status that kubesteer writes for a Memcached): a POST against
a server-side apply that creates; a JSON patch of the whole status against a server-side apply of
it, for a first status and for the change to Ready. Rounds rotate which of a pair goes first.
"""
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import threading
import time

SERVER, PKI, CLUSTER, COUNT, ROUNDS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
HOST, PORT = SERVER.removeprefix("https://").rsplit(":", 1)
THREADS = 16
MANAGER = "kubesteer-controller"
TLS = ssl.create_default_context(cafile=f"{PKI}/ca.crt")
TLS.load_cert_chain(f"{PKI}/admin.crt", f"{PKI}/admin.key")


def pid(process):
    out = subprocess.check_output(["pgrep", "-f", f"{process}.*/clusters/{CLUSTER}/"])
    return out.split()[0].decode()


def cpu_s(p):
    fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


APISERVER, ETCD = pid("kube-apiserver"), pid("etcd")
LABELS = lambda n: {"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": n,
                    "app.kubernetes.io/managed-by": "kubesteer"}


def owner(i, n):
    return [{"apiVersion": "kubesteer.io/v1alpha1", "kind": "Memcached", "name": n,
             "uid": "00000000-0000-0000-0000-%012d" % i, "controller": True, "blockOwnerDeletion": True}]


def deployment(i, ns, n):
    probe = {"tcpSocket": {"port": "memcached"}, "periodSeconds": 10}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": n, "namespace": ns, "labels": LABELS(n), "ownerReferences": owner(i, n),
                         "annotations": {"kubesteer.io/applied": "0123456789abcdef"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {k: v for k, v in LABELS(n).items() if k != "app.kubernetes.io/managed-by"}},
                     "template": {"metadata": {"labels": LABELS(n)}, "spec": {
                         "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "memcached", "image": "memcached:1.6.26-alpine",
                                         "args": ["-m", "64", "-p", "11211"],
                                         "ports": [{"name": "memcached", "containerPort": 11211, "protocol": "TCP"}],
                                         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                                         "livenessProbe": probe, "readinessProbe": probe,
                                         "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                             "runAsUser": 11211, "capabilities": {"drop": ["ALL"]}}}]}}}}


def service(i, ns, n):
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": n, "namespace": ns, "labels": LABELS(n), "ownerReferences": owner(i, n),
                         "annotations": {"kubesteer.io/applied": "0123456789abcdef"}},
            "spec": {"clusterIP": "None", "selector": LABELS(n),
                     "ports": [{"name": "memcached", "port": 11211, "targetPort": "memcached"}]}}


def status(i, ready):
    def condition(kind, value, reason):
        return {"type": kind, "status": value, "reason": reason, "message": f"Deployment m{i}: {reason}",
                "lastTransitionTime": "2026-11-27T14:00:00Z", "observedGeneration": 1}
    return {"nodes": [f"m{i}-5d8f9c7b6d-x2kqp"] if ready else [], "readyReplicas": 1 if ready else 0,
            "observedGeneration": 1,
            "conditions": [condition("Ready", "True" if ready else "False", "RolloutComplete" if ready else "RollingOut"),
                           condition("Available", "True" if ready else "False", "MinimumPodsAvailable"),
                           condition("Progressing", "True", "NewReplicaSetAvailable"),
                           condition("Degraded", "False", "AsExpected")]}


def request(conn, method, path, body, content_type):
    conn.request(method, path, body=json.dumps(body), headers={"Content-Type": content_type, "Accept": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status >= 300:
        raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")


APPLY, JSON, JSON_PATCH = "application/apply-patch+yaml", "application/json", "application/json-patch+json"
MEMCACHEDS = "/apis/kubesteer.io/v1alpha1/namespaces/{ns}/memcacheds"


def write(kind, i, ns, conn):
    n = f"m{i}"
    if kind == "memcached create":
        request(conn, "POST", MEMCACHEDS.format(ns=ns), {"apiVersion": "kubesteer.io/v1alpha1", "kind": "Memcached",
                "metadata": {"name": n, "namespace": ns}, "spec": {"size": 1}}, JSON)
    elif kind == "event create":
        request(conn, "POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events", {
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": f"{n}.created", "namespace": ns},
            "eventTime": "2026-11-27T14:00:00.000000Z", "reportingController": MANAGER,
            "reportingInstance": f"{MANAGER}-0", "action": "Create", "reason": "Created", "type": "Normal",
            "note": f"Created Deployment {n}, Service {n}",
            "regarding": {"apiVersion": "kubesteer.io/v1alpha1", "kind": "Memcached", "name": n, "namespace": ns}}, JSON)
    elif kind.startswith(("deployment", "service")):
        what, how = kind.split(" ", 1)
        body = (deployment if what == "deployment" else service)(i, ns, n)
        base = f"/apis/apps/v1/namespaces/{ns}/deployments" if what == "deployment" else f"/api/v1/namespaces/{ns}/services"
        if how == "POST":
            request(conn, "POST", f"{base}?fieldManager={MANAGER}", body, JSON)
        else:  # an apply that can only create: a resourceVersion no object has
            body["metadata"]["resourceVersion"] = "1"
            request(conn, "PATCH", f"{base}/{n}?fieldManager={MANAGER}", body, APPLY)
    else:  # "status <first|ready> <JSON patch|apply>"
        _, which, how = kind.split(" ", 2)
        value = status(i, which == "ready")
        path = f"{MEMCACHEDS.format(ns=ns)}/{n}/status?fieldManager={MANAGER}"
        if how == "JSON patch":
            request(conn, "PATCH", path, [{"op": "add", "path": "/status", "value": value}], JSON_PATCH)
        else:
            request(conn, "PATCH", path + "&force=true", {"apiVersion": "kubesteer.io/v1alpha1", "kind": "Memcached",
                                                         "status": value}, APPLY)


def measure(kind, ns):
    errors = []

    def worker(k):
        conn = http.client.HTTPSConnection(HOST, int(PORT), context=TLS)
        for i in range(k, COUNT, THREADS):
            try:
                write(kind, i, ns, conn)
            except Exception as e:  # counted and shown; a run with errors is not a measurement
                errors.append(str(e))
                conn = http.client.HTTPSConnection(HOST, int(PORT), context=TLS)

    api0, etcd0 = cpu_s(APISERVER), cpu_s(ETCD)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(1)  # the watch cache's and etcd's share of the last writes
    api1, etcd1 = cpu_s(APISERVER), cpu_s(ETCD)
    if errors:
        raise SystemExit(f"{kind}: {len(errors)} of {COUNT} writes failed, first: {errors[0]}")
    return {"apiserver_ms": round((api1 - api0) / COUNT * 1000, 3), "etcd_ms": round((etcd1 - etcd0) / COUNT * 1000, 3)}


def namespace(name):
    conn = http.client.HTTPSConnection(HOST, int(PORT), context=TLS)
    request(conn, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, JSON)


PAIRS = [("deployment POST", "deployment apply"), ("service POST", "service apply")]
STATUS = [("status first JSON patch", "status first apply"), ("status ready JSON patch", "status ready apply")]
runs = {}
for r in range(ROUNDS):
    flip = r % 2 == 1
    a, b = f"a{r}", f"b{r}"  # two namespaces, one per way of writing, each with its own Memcacheds
    for ns in (a, b):
        namespace(ns)
    for ns in (a, b):
        runs.setdefault("memcached create", []).append(measure("memcached create", ns))
    runs.setdefault("event create", []).append(measure("event create", a))
    for pair in PAIRS:
        for kind, ns in ((pair[1], b), (pair[0], a)) if flip else ((pair[0], a), (pair[1], b)):
            runs.setdefault(kind, []).append(measure(kind, ns))
    for pair in STATUS:
        for kind, ns in ((pair[1], b), (pair[0], a)) if flip else ((pair[0], a), (pair[1], b)):
            runs.setdefault(kind, []).append(measure(kind, ns))

print(json.dumps({
    "count_per_run": COUNT,
    "rounds": ROUNDS,
    "writes": {kind: {"apiserver_ms_median": statistics.median(x["apiserver_ms"] for x in v),
                      "etcd_ms_median": statistics.median(x["etcd_ms"] for x in v),
                      "runs": v} for kind, v in runs.items()},
}, indent=2))
