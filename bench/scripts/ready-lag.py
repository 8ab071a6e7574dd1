#!/usr/bin/env python3
"""How long each Memcached's Ready followed its Deployment's, from a kept peers cluster.

After `BENCH_KEEP_CLUSTER=1 BENCH_SUBJECT=peers BENCH_PEER_SUBJECTS=<subject> BENCH_REPEATS=1
make bench-controller`, dump the run's objects and read them:

    k="$HOME/.cache/kubesteer/bin/kubectl --kubeconfig bench/tmp/cluster/kubeconfig"
    for r in deployments replicasets pods memcacheds; do $k get $r -n memcached -o json >DIR/$r.json; done
    cp bench/tmp/controller-wtest/<subject>-1.json DIR/run.json
    bench/scripts/ready-lag.py DIR

Prints, as seconds from the run's first create, the deciles of when each Deployment was
created, when its ReplicaSet was (the controller-manager's pace), when the Deployment turned
Available and when the Memcached turned Ready, and of Ready minus Available. The times are the
objects' own (creationTimestamp, the conditions' lastTransitionTime): whole seconds, so a lag is
read from its mean over the 1,000 Memcacheds. With a pods.json, also when each Memcached's last
pod was created and turned Ready, and Available minus that pod's Ready (the controller-manager's
roll-up of the pod's readiness into its ReplicaSet's and Deployment's status).
"""
import datetime
import json
import statistics
import sys


def seconds(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def condition(obj, kind):
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def main(directory):
    load = lambda name: json.load(open(f"{directory}/{name}.json"))
    run = load("run")
    start = seconds(run["started_at"])
    deployments = {d["metadata"]["name"]: d for d in load("deployments")["items"]}
    replicasets = {r["metadata"]["ownerReferences"][0]["name"]: r for r in load("replicasets")["items"]}
    pods = {}
    try:
        for p in load("pods")["items"]:
            instance = p["metadata"].get("labels", {}).get("app.kubernetes.io/instance")
            ready = next((c for c in p.get("status", {}).get("conditions", []) if c["type"] == "Ready"), None)
            if instance and ready and ready["status"] == "True":
                at = (seconds(p["metadata"]["creationTimestamp"]), seconds(ready["lastTransitionTime"]))
                pods[instance] = max(pods.get(instance, at), at, key=lambda t: t[1])
    except FileNotFoundError:
        pass
    keys = ["deployment_created", "replicaset_created", "available", "ready", "ready_minus_available"]
    if pods:
        keys += ["pod_created", "pod_ready", "available_minus_pod_ready"]
    columns = {k: [] for k in keys}
    for m in load("memcacheds")["items"]:
        name = m["metadata"]["name"]
        d = deployments[name]
        ready = seconds(condition(m, "Ready")["lastTransitionTime"])
        available = seconds(condition(d, "Available")["lastTransitionTime"])
        columns["deployment_created"].append(seconds(d["metadata"]["creationTimestamp"]) - start)
        columns["replicaset_created"].append(seconds(replicasets[name]["metadata"]["creationTimestamp"]) - start)
        columns["available"].append(available - start)
        columns["ready"].append(ready - start)
        columns["ready_minus_available"].append(ready - available)
        if pods and name in pods:
            created, pod_ready = pods[name]
            columns["pod_created"].append(created - start)
            columns["pod_ready"].append(pod_ready - start)
            columns["available_minus_pod_ready"].append(available - pod_ready)
    out = {"converged_s": run["converged_s"]}
    for key, values in columns.items():
        out[key] = {
            "deciles_s": [round(x, 1) for x in statistics.quantiles(values, n=10)],
            "max_s": round(max(values), 1),
            "mean_s": round(statistics.mean(values), 2),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
