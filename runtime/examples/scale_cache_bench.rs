//! The RESTMapper's cache (`kubesteer_runtime::scale::RestMapper::resolve`) against a local fake
//! apiserver that answers discovery after 2 ms and counts the requests:
//! `cargo run -p kubesteer-runtime --release --example scale_cache_bench -- [ROUNDS]` prints JSON.
//!
//! Per round, on a fresh mapper:
//! - `cold_requests`: 256 resolves of the same 4 kinds at once (a controller starting with many
//!   Scalers over a few kinds): the discovery requests they sent;
//! - `hit_ns`: then 200,000 resolves of those kinds from 2 tasks, the mean nanoseconds per
//!   resolve (every one a hit).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use kubesteer_runtime::scale::RestMapper;
use serde_json::json;

const KINDS: [&str; 4] = ["Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"];
const COLD: usize = 256;
const HITS: usize = 100_000;

async fn apps_v1(
    State(asked): State<Arc<AtomicU64>>,
) -> ([(&'static str, &'static str); 1], String) {
    asked.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(2)).await;
    let resource = |kind: &str, plural: &str| {
        json!({"name": plural, "singularName": "", "namespaced": true, "kind": kind,
               "verbs": ["get", "list", "watch", "patch"]})
    };
    let mut resources = Vec::new();
    for kind in KINDS {
        let plural = format!("{}s", kind.to_lowercase());
        resources.push(resource(kind, &plural));
        resources.push(
            json!({"name": format!("{plural}/scale"), "singularName": "",
            "namespaced": true, "kind": "Scale", "group": "autoscaling", "version": "v1",
            "verbs": ["get", "patch", "update"]}),
        );
    }
    let list = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                      "resources": resources});
    ([("content-type", "application/json")], list.to_string())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 5,
    };
    let asked = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/apis/apps/v1", get(apps_v1))
        .with_state(asked.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = kube::Config::new(url.parse()?);

    let mut results = Vec::new();
    for _ in 0..rounds {
        let mapper = Arc::new(RestMapper::new(kube::Client::try_from(config.clone())?));
        let before = asked.load(Ordering::Relaxed);
        let cold = (0..COLD).map(|i| {
            let mapper = mapper.clone();
            tokio::spawn(async move { mapper.resolve("apps/v1", KINDS[i % KINDS.len()]).await })
        });
        for answer in futures::future::join_all(cold).await {
            answer?
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        }
        let cold_requests = asked.load(Ordering::Relaxed) - before;

        let started = Instant::now();
        let hits = (0..2).map(|t| {
            let mapper = mapper.clone();
            tokio::spawn(async move {
                for i in 0..HITS {
                    let kind = KINDS[(i + t) % KINDS.len()];
                    if !matches!(mapper.resolve("apps/v1", kind).await, Ok(Ok(_))) {
                        return Err(format!("{kind} did not resolve"));
                    }
                }
                Ok(())
            })
        });
        for done in futures::future::join_all(hits).await {
            done??;
        }
        let hit_ns = started.elapsed().as_nanos() as f64 / (2 * HITS) as f64;
        results.push(json!({"cold_requests": cold_requests, "hit_ns": hit_ns.round()}));
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({"cold_resolves": COLD, "kinds": KINDS.len(),
            "hit_resolves": 2 * HITS, "discovery_delay_ms": 2, "rounds": results}))?
    );
    Ok(())
}
