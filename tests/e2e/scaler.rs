//! The Scaler end to end: windows and cron, claims, conversion, re-apply, the v1alpha1 stash,
//! v1beta1 targets, storage migration.
mod conflict;
mod controller;
mod conversion;
mod reapply;
mod stash;
mod storage_migration;
mod v1beta1;
