//! What the controller's caches take per object, in this process: `count` copies of each sample
//! object (bench/bodies/stores/, as the apiserver returned them in the scale phase), each with
//! its own name, namespace (one of 50), uid and resourceVersion, put through the store the
//! controller keeps them in (its own, packed), against the same objects kept parsed (what a plain kube-rs
//! controller keeps, managedFields taken off). Each line is measured as the growth of this
//! process's resident memory while it fills, with every store before it still held.
use std::path::Path;

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use kubesteer_api::scaler::claims::ClaimIndex;
use kubesteer_api::{Memcached, Scaler, ScalerStatus};
use kubesteer_controller::children::{packed_store, trim, Packed, PackedStore};
use kubesteer_controller::metrics::Metrics;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

const NAMESPACES: usize = 50;

/// The sample object `file` with the identity of copy `i`.
fn copy<K: DeserializeOwned>(sample: &Value, i: usize) -> Result<K> {
    let mut v = sample.clone();
    let name = format!("cache-{i}");
    let meta = &mut v["metadata"];
    meta["name"] = json!(name);
    meta["namespace"] = json!(format!("scale-{}", i % NAMESPACES));
    meta["uid"] = json!(format!("0b5c3e52-7d3f-4f6a-9c1e-{i:012}"));
    meta["resourceVersion"] = json!(format!("{}", 1_000_000 + 7 * i));
    for key in ["labels", "annotations"] {
        if let Some(map) = meta[key].as_object_mut() {
            for (k, val) in map.iter_mut() {
                if k == "app.kubernetes.io/instance" {
                    *val = json!(name);
                }
            }
        }
    }
    if let Some(owners) = meta["ownerReferences"].as_array_mut() {
        for o in owners {
            o["name"] = json!(name);
            o["uid"] = json!(format!("7d1e0f3a-2b4c-4d5e-8f6a-{i:012}"));
        }
    }
    Ok(serde_json::from_value(v)?)
}

/// Resident memory of this process, in bytes.
fn rss() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|l| l.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kib * 1024)
}

/// A store as kube-runtime keeps it (what a plain kube-rs controller keeps), and how to write
/// to it.
fn reflected<T>() -> (Store<T>, impl FnMut(&Event<T>))
where
    T: kube::runtime::reflector::Lookup<DynamicType = ()> + Clone,
{
    let (store, mut writer) = reflector::store::<T>();
    (store, move |e: &Event<T>| writer.apply_watcher_event(e))
}

/// A store as the controller keeps it (its children caches, and since its own queue replaced
/// kube-runtime's `Controller`, its owners and Scalers too), and how to write to it.
fn cached<K>() -> (PackedStore<K>, impl FnMut(&Event<Packed<K>>))
where
    K: kube::Resource<DynamicType = ()>,
{
    let (store, mut writer) = packed_store::<K>();
    (store, move |e: &Event<Packed<K>>| {
        writer.apply_watcher_event(e)
    })
}

/// Fills `store` with `count` copies made by `make` and returns (the store, bytes per object).
fn fill<T, S>(
    count: usize,
    (store, mut apply): (S, impl FnMut(&Event<T>)),
    make: impl Fn(usize) -> Result<T>,
) -> Result<(S, f64)> {
    let before = rss()?;
    apply(&Event::Init);
    for i in 0..count {
        apply(&Event::InitApply(make(i)?));
    }
    apply(&Event::InitDone);
    let grown = rss()?.saturating_sub(before);
    Ok((store, grown as f64 / count as f64))
}

fn sample(dir: &Path, file: &str) -> Result<Value> {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    serde_json::from_str(&text).with_context(|| path.display().to_string())
}

pub fn run(dir: &Path, count: usize) -> Result<Value> {
    let memcached = sample(dir, "memcached.json")?;
    let deployment = sample(dir, "deployment.json")?;
    let service = sample(dir, "service.json")?;
    let scaler = sample(dir, "scaler.json")?;
    let parsed = |mut k: Memcached| {
        trim(&mut k);
        k
    };
    let mut lines = serde_json::Map::new();
    let mut keep = Vec::new();
    macro_rules! line {
        ($name:literal, $store:expr, $make:expr) => {{
            let (store, bytes) = fill(count, $store, $make)?;
            lines.insert($name.into(), json!((bytes * 10.0).round() / 10.0));
            keep.push(Box::new(store) as Box<dyn std::any::Any>);
        }};
    }
    line!("memcached_parsed", reflected::<Memcached>(), |i| Ok(
        parsed(copy(&memcached, i)?)
    ));
    line!("memcached_packed", cached::<Memcached>(), |i| {
        Ok(Packed::whole(&parsed(copy(&memcached, i)?))?)
    });
    line!("deployment_parsed", reflected::<Deployment>(), |i| {
        let mut d: Deployment = copy(&deployment, i)?;
        trim(&mut d);
        Ok(d)
    });
    line!("deployment_packed", cached::<Deployment>(), |i| {
        Ok(Packed::pack(&copy::<Deployment>(&deployment, i)?)?)
    });
    line!("service_parsed", reflected::<Service>(), |i| {
        let mut s: Service = copy(&service, i)?;
        trim(&mut s);
        Ok(s)
    });
    line!("service_packed", cached::<Service>(), |i| {
        Ok(Packed::pack(&copy::<Service>(&service, i)?)?)
    });
    line!("scaler_parsed", reflected::<Scaler>(), |i| {
        let mut s: Scaler = copy(&scaler, i)?;
        trim(&mut s);
        Ok(s)
    });
    line!("scaler_packed", cached::<Scaler>(), |i| {
        let mut s: Scaler = copy(&scaler, i)?;
        trim(&mut s);
        Ok(Packed::whole(&s)?)
    });
    // The claims index (kept by the controller and the webhook): each copy claims a target of
    // its own, named in its spec and listed in its status, as the scale phase's Scalers do.
    let before = rss()?;
    let mut claims = ClaimIndex::default();
    for i in 0..count {
        let mut s: Scaler = copy(&scaler, i)?;
        let target = format!("idle-{i}");
        for r in &mut s.spec.scale_target_refs {
            r.name = target.clone();
        }
        for t in s.status.iter_mut().flat_map(|s| &mut s.targets) {
            t.name = target.clone();
        }
        claims.upsert(&s);
    }
    let grown = rss()?.saturating_sub(before) as f64 / count as f64;
    lines.insert("scaler_claims".into(), json!((grown * 10.0).round() / 10.0));
    keep.push(Box::new(claims));
    let metrics = Metrics::default();
    let now = chrono::Utc::now();
    let before = rss()?;
    for i in 0..count {
        let s: Scaler = copy(&scaler, i)?;
        let status = s.status.clone().unwrap_or_default();
        metrics
            .scalers()
            .observed(&s, &ScalerStatus::default(), &status, None, now);
    }
    let grown = rss()?.saturating_sub(before) as f64 / count as f64;
    lines.insert(
        "scaler_metrics".into(),
        json!((grown * 10.0).round() / 10.0),
    );
    drop((keep, metrics));
    let mean = |lens: Vec<usize>| lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64;
    let memcached_packed = mean(
        (0..100)
            .map(|i| Ok(Packed::whole(&parsed(copy(&memcached, i)?))?.packed_len()))
            .collect::<Result<_>>()?,
    );
    let deployment_packed = mean(
        (0..100)
            .map(|i| Ok(Packed::pack(&copy::<Deployment>(&deployment, i)?)?.packed_len()))
            .collect::<Result<_>>()?,
    );
    let service_packed = mean(
        (0..100)
            .map(|i| Ok(Packed::pack(&copy::<Service>(&service, i)?)?.packed_len()))
            .collect::<Result<_>>()?,
    );
    let json_len = |v: &Value| serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0);
    Ok(json!({
        "what": "bytes of resident memory per object of each store, as the controller keeps it (packed) and parsed (what a plain kube-rs controller keeps, managedFields taken off), filled in this order in one process; scaler_claims: the claims index of as many Scalers, each claiming a Deployment of its own; scaler_metrics: the per-Scaler metrics series of as many Scalers, each observed once with a status listing one target",
        "count": count,
        "sample_json_bytes": {
            "memcached": json_len(&memcached),
            "deployment": json_len(&deployment),
            "service": json_len(&service),
            "scaler": json_len(&scaler),
        },
        "bytes_per_object": lines,
        "compressed_json_bytes": {
            "memcached": memcached_packed,
            "deployment": deployment_packed,
            "service": service_packed,
        },
        "inline_bytes": {
            "ObjectMeta": std::mem::size_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(),
            "Packed": std::mem::size_of::<Packed<Deployment>>(),
            "ObjectRef": std::mem::size_of::<kube::runtime::reflector::ObjectRef<Deployment>>(),
        },
    }))
}
