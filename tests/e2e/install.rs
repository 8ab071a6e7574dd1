//! The product as installed: the chart, its certificates, RBAC, monitoring and metrics, the image,
//! the release on the real node, the kubectl plugin and the README.
mod certificates;
mod chart;
mod flood;
mod image;
mod metrics;
mod monitoring;
mod platform;
mod plugin;
mod rbac;
mod readiness;
mod readme;
mod release;
mod savings;
mod sleep_patches;
