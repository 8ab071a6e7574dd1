//! The cluster as the plugin reads it: the client from the kubeconfig (as kubectl picks it),
//! a Scaler by name, a target's replicas through its `/scale`, its record of the original
//! replicas, the HPA that scales it, and the last events.
use std::path::PathBuf;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Event;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use kubesteer_api::keys::annotation;
use kubesteer_api::scaler::target::{group_of, Target};
use kubesteer_api::Scaler;

use crate::{Error, Result};

/// Where to connect, as kubectl's own flags say it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Connection {
    /// The kubeconfig file to use (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The namespace (default: the context's, else "default").
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
}

impl Connection {
    /// A client and the namespace to work in.
    pub async fn connect(&self) -> Result<(Client, String)> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .map_err(|e| Error::Input(format!("--kubeconfig {}: {e}", path.display())))?;
                Config::from_custom_kubeconfig(kubeconfig, &options).await
            }
            None => Config::from_kubeconfig(&options).await,
        };
        let config = match config {
            Ok(c) => c,
            // Inside a pod without a kubeconfig, as kubectl does.
            Err(e) if self.context.is_none() && self.kubeconfig.is_none() => Config::incluster()
                .map_err(|_| Error::Client(format!("no kubeconfig to use: {e}")))?,
            Err(e) => return Err(Error::Client(format!("kubeconfig: {e}"))),
        };
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(|e| Error::Client(e.to_string()))?;
        Ok((client, namespace))
    }
}

/// The name in `scaler/NAME` (also `scalers/`, `scl/`, `scaler.kubesteer.io/`, or a bare name).
pub fn scaler_name(text: &str) -> Result<String> {
    let name = match text.split_once('/') {
        None => text,
        Some((kind, name)) => match kind.to_ascii_lowercase().as_str() {
            "scaler" | "scalers" | "scl" | "scaler.kubesteer.io" | "scalers.kubesteer.io" => name,
            _ => {
                return Err(Error::Input(format!(
                    "{text:?}: only Scalers here; give scaler/NAME"
                )))
            }
        },
    };
    if name.is_empty() || name.contains('/') {
        return Err(Error::Input(format!("{text:?}: give scaler/NAME")));
    }
    Ok(name.to_string())
}

/// The Scaler `name` in `namespace`.
pub async fn get_scaler(client: &Client, namespace: &str, name: &str) -> Result<Scaler> {
    let api: Api<Scaler> = Api::namespaced(client.clone(), namespace);
    api.get(name).await.map_err(Error::from)
}

/// The holidays of the calendar `spec` names (`spec.excludeCalendar`), none when it names none:
/// the ConfigMap read as the controller reads it, or why it cannot be.
pub async fn holidays(
    client: &Client,
    namespace: &str,
    spec: &kubesteer_api::ScalerSpec,
    now: kubesteer_api::scaler::schedule::Instant,
) -> Result<Vec<kubesteer_api::scaler::calendar::Holiday>> {
    let Some(calendar) = &spec.exclude_calendar else {
        return Ok(Vec::new());
    };
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), namespace);
    let map = api.get(&calendar.name).await.map_err(Error::from)?;
    let tz: chrono_tz::Tz = spec.time_zone().parse().unwrap_or(chrono_tz::Tz::UTC);
    kubesteer_api::scaler::calendar::holidays_in(map.data.as_ref(), namespace, calendar, tz, now)
        .map_err(Error::Input)
}

/// A target as read from the cluster.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Its replicas through `/scale`; None when it does not exist.
    pub replicas: Option<i32>,
    /// The original replicas recorded on it, and who recorded them.
    pub original: Option<(String, Option<String>)>,
    /// The HPA that scales it.
    pub hpa: Option<Hpa>,
    /// Why it could not be read.
    pub error: Option<String>,
}

/// The HorizontalPodAutoscaler of a target.
#[derive(Debug, Clone)]
pub struct Hpa {
    pub name: String,
    pub min: i32,
    pub max: i32,
    pub current: Option<i32>,
    /// Its minReplicas from before a Scaler raised it.
    pub original_min: Option<String>,
}

impl std::fmt::Display for Hpa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (min {}, max {}", self.name, self.min, self.max)?;
        if let Some(o) = &self.original_min {
            write!(f, ", min {o} before the Scaler")?;
        }
        write!(f, ")")
    }
}

/// Reads `target`: its object, `/scale` and HPA. Failures land in [`Seen::error`].
pub async fn look(client: &Client, api_version: &str, target: &Target) -> Seen {
    match try_look(client, api_version, target).await {
        Ok(seen) => seen,
        Err(e) => Seen {
            error: Some(e.to_string()),
            ..Seen::default()
        },
    }
}

async fn try_look(client: &Client, api_version: &str, target: &Target) -> Result<Seen> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, &target.kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| Error::Client(format!("{} {api_version}: {e}", target.kind)))?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &target.namespace, &resource);
    let object = match api.get_opt(&target.name).await? {
        Some(o) => o,
        None => return Ok(Seen::default()),
    };
    let scale = api.get_scale(&target.name).await?;
    let annotations = object.annotations();
    let original = annotations.get(annotation::ORIGINAL_REPLICAS).map(|r| {
        (
            r.clone(),
            annotations
                .get(annotation::ORIGINAL_REPLICAS_OWNER)
                .cloned(),
        )
    });
    let hpa = hpa_for(client, target).await?;
    Ok(Seen {
        replicas: scale.spec.and_then(|s| s.replicas),
        original,
        hpa,
        error: None,
    })
}

/// The HPA in the target's namespace whose scaleTargetRef names it.
pub async fn hpa_for(client: &Client, target: &Target) -> Result<Option<Hpa>> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &target.namespace);
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        // Someone who may not list HPAs still gets the rest.
        Err(e) if Error::is_code(&e, 403) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(list.items.into_iter().find_map(|h| {
        let spec = h.spec.as_ref()?;
        let r = &spec.scale_target_ref;
        let same = r.kind == target.kind
            && r.name == target.name
            && group_of(r.api_version.as_deref().unwrap_or_default()) == target.group;
        same.then(|| Hpa {
            name: h.name_any(),
            min: spec.min_replicas.unwrap_or(1),
            max: spec.max_replicas,
            current: h.status.as_ref().and_then(|s| s.current_replicas),
            original_min: h
                .annotations()
                .get(annotation::ORIGINAL_MIN_REPLICAS)
                .cloned(),
        })
    }))
}

/// One event, as shown.
#[derive(Debug, Clone)]
pub struct Happened {
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    pub type_: String,
    pub reason: String,
    pub object: String,
    pub message: String,
}

/// The events about `kind` `name` in `namespace`, oldest first.
pub async fn events(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Result<Vec<Happened>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let selector = format!("involvedObject.kind={kind},involvedObject.name={name}");
    let list = match api.list(&ListParams::default().fields(&selector)).await {
        Ok(list) => list,
        Err(e) if Error::is_code(&e, 403) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out: Vec<Happened> = list
        .items
        .into_iter()
        .map(|e| {
            let at = e
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
                .or(e.last_timestamp.as_ref().map(|t| t.0))
                .or(e.event_time.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .and_then(|t| chrono::DateTime::from_timestamp(t.as_second(), 0));
            Happened {
                at,
                type_: e.type_.unwrap_or_default(),
                reason: e.reason.unwrap_or_default(),
                object: format!("{}/{}", kind.to_ascii_lowercase(), name),
                message: e.message.unwrap_or_default(),
            }
        })
        .collect();
    out.sort_by_key(|h| h.at);
    Ok(out)
}

/// The ApiResource of a kubesteer kind, at the version the binaries use.
pub fn kubesteer_resource(kind: kubesteer_api::kind::Kind) -> ApiResource {
    ApiResource {
        group: kubesteer_api::GROUP.to_string(),
        version: kind.version().to_string(),
        api_version: format!("{}/{}", kubesteer_api::GROUP, kind.version()),
        kind: kind.name().to_string(),
        plural: kind.plural().to_string(),
    }
}

/// The Ready condition of an object's status: (status, reason, message).
pub fn ready_of(status: Option<&serde_json::Value>) -> Option<(String, String, String)> {
    let conditions = status?.get("conditions")?.as_array()?;
    let ready = conditions
        .iter()
        .find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready"))?;
    let field = |k: &str| {
        ready
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    Some((field("status"), field("reason"), field("message")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scaler_is_named_as_kubectl_names_it() {
        for ok in [
            "scaler/a",
            "scalers/a",
            "scl/a",
            "Scaler/a",
            "scaler.kubesteer.io/a",
            "a",
        ] {
            assert_eq!(scaler_name(ok).ok().as_deref(), Some("a"), "{ok}");
        }
        for bad in ["deployment/a", "scaler/", "scaler/a/b", ""] {
            assert!(scaler_name(bad).is_err(), "{bad}");
        }
    }
}
