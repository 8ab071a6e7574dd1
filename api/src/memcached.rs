//! Memcached: a Deployment of memcached pods behind a headless Service.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field::FieldErrors;
use crate::rules::memcached::{MAX_MEMORY_MB, MAX_SIZE, MIN_MEMORY_MB};
use crate::rules::{
    check_image, check_range, MAX_GENERATION, MAX_IMAGE, MAX_INT32, MAX_PORT, MIN_PORT,
    MIN_REPLICAS,
};

pub const DEFAULT_SIZE: i32 = 1;
pub const DEFAULT_PORT: i32 = 11211;
/// A pinned tag, so every replica runs the same memcached.
pub const DEFAULT_IMAGE: &str = "memcached:1.6.38-alpine";
pub const DEFAULT_MEMORY_MB: i32 = 64;

/// A memcached cluster: a Deployment of `size` pods and a headless Service on `port`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kubesteer.io",
    version = "v1alpha1",
    kind = "Memcached",
    namespaced,
    status = "MemcachedStatus",
    shortname = "mc",
    category = "kubesteer",
    doc = "Memcached runs a memcached cluster as a Deployment behind a headless Service.",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size","description":"Wanted pods"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"Ready pods"}"#,
    printcolumn = r#"{"name":"Port","type":"integer","jsonPath":".spec.port","description":"memcached port"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedSpec {
    /// Number of memcached pods, 0-100. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_SIZE))]
    pub size: Option<i32>,

    /// TCP port memcached listens on and the Service exposes, 1-65535. Defaults to 11211.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_PORT, max = MAX_PORT))]
    pub port: Option<i32>,

    /// Container image. Defaults to a pinned memcached 1.6 alpine tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_IMAGE), regex(pattern = crate::rules::IMAGE.regex))]
    pub image: Option<String>,

    /// Memory for item storage in megabytes, passed as -m. Defaults to 64.
    #[serde(default, rename = "memoryMB", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_MEMORY_MB, max = MAX_MEMORY_MB))]
    pub memory_mb: Option<i32>,

    /// Compute resources of the memcached container. Defaults to requests of cpu 100m and memory 128Mi.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::common::deserialize_resources"
    )]
    #[schemars(schema_with = "crate::common::resources_schema")]
    pub resources: Option<ResourceRequirements>,
}

/// What a Memcached reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// Names of the memcached pods, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Number of ready memcached pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub ready_replicas: Option<i32>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// Standard conditions: Ready, Available, Progressing and Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Requests as in the seed operator, so a node is never overcommitted by default.
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("100m".to_string())),
            ("memory".to_string(), Quantity("128Mi".to_string())),
        ])),
        ..Default::default()
    }
}

impl MemcachedSpec {
    pub fn size(&self) -> i32 {
        self.size.unwrap_or(DEFAULT_SIZE)
    }
    pub fn port(&self) -> i32 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
    pub fn image(&self) -> &str {
        self.image.as_deref().unwrap_or(DEFAULT_IMAGE)
    }
    pub fn memory_mb(&self) -> i32 {
        self.memory_mb.unwrap_or(DEFAULT_MEMORY_MB)
    }
    pub fn resources(&self) -> ResourceRequirements {
        self.resources.clone().unwrap_or_else(default_resources)
    }

    /// The spec with every default filled in.
    pub fn defaulted(&self) -> Self {
        Self {
            size: Some(self.size()),
            port: Some(self.port()),
            image: Some(self.image().to_string()),
            memory_mb: Some(self.memory_mb()),
            resources: Some(self.resources()),
        }
    }

    /// Every violation of the field rules, each with its path.
    pub fn validate(&self) -> FieldErrors {
        let mut errors = FieldErrors::new();
        if let Some(size) = self.size {
            check_range(
                &mut errors,
                "spec.size",
                size.into(),
                MIN_REPLICAS.into(),
                MAX_SIZE.into(),
            );
        }
        if let Some(port) = self.port {
            check_range(
                &mut errors,
                "spec.port",
                port.into(),
                MIN_PORT.into(),
                MAX_PORT.into(),
            );
        }
        if let Some(mb) = self.memory_mb {
            check_range(
                &mut errors,
                "spec.memoryMB",
                mb.into(),
                MIN_MEMORY_MB.into(),
                MAX_MEMORY_MB.into(),
            );
        }
        if let Some(image) = &self.image {
            check_image(&mut errors, image);
        }
        if let Some(resources) = &self.resources {
            crate::common::check_resources(&mut errors, "spec.resources", resources);
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> MemcachedSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_match_the_seed() {
        let d = MemcachedSpec::default().defaulted();
        assert_eq!(d.size, Some(1));
        assert_eq!(d.port, Some(11211));
        assert_eq!(d.memory_mb, Some(64));
        assert_eq!(d.image.as_deref(), Some(DEFAULT_IMAGE));
        let requests = d.resources.unwrap().requests.unwrap();
        assert_eq!(requests["cpu"].0, "100m");
        assert_eq!(requests["memory"].0, "128Mi");
        assert_eq!(
            spec(json!({"size": 0})).defaulted().size,
            Some(0),
            "0 is a value, not a missing field"
        );
    }

    #[test]
    fn every_violation_is_reported() {
        let m: Vec<String> = spec(json!({"size": 101, "port": 0, "memoryMB": 0, "image": "a b"}))
            .validate()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            m,
            vec![
                "spec.size: Invalid value: 101: must be between 0 and 100, inclusive",
                "spec.port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.memoryMB: Invalid value: 0: must be between 1 and 65536, inclusive",
                "spec.image: Invalid value: \"a b\": must be a container image reference such as registry.example.com/team/app:1.0 (lowercase repository, optional tag and digest)",
            ]
        );
        assert!(spec(json!({"size": 100, "port": 65535}))
            .validate()
            .is_empty());
        let m: Vec<String> =
            spec(json!({"resources": {"limits": {"memory": "lots"}, "requests": {"cpu": 1}}}))
                .validate()
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(m, vec!["spec.resources.limits.memory: Invalid value: \"lots\": must match the regular expression of a quantity, such as 250m or 64Mi"]);
        let err = crate::kind::Kind::Memcached
            .validate(
                &json!({"spec": {"resources": {"requests": {"cpu": 0.5}}}}),
                chrono::DateTime::UNIX_EPOCH,
            )
            .unwrap_err();
        assert_eq!(
            err[0].to_string(),
            "spec.resources: Invalid value: \"(value omitted)\": expected an integer or a string"
        );
    }
}
