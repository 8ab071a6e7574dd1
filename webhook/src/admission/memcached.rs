//! Memcached has no rule that needs the cluster. Its image meets the image policy as the image of
//! every kind that runs pods does: `image_refused` in the parent module, before any kind's
//! [`Rules`].
use kubesteer_api::field::FieldErrors;
use kubesteer_api::MemcachedSpec;

use super::{Admitting, Rules};
use crate::cluster::Cluster;

impl Rules for MemcachedSpec {
    async fn check<C: Cluster>(
        &self,
        _on: &Admitting<'_, C>,
        _errors: &mut FieldErrors,
        _warnings: &mut Vec<String>,
    ) {
    }
}
