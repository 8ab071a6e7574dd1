//! Memcached has no rule that needs the cluster. Its image meets the image policy as the image of
//! every kind that runs pods does: `image_refused` in the parent module, before any kind's
//! [`Rules`].
use kubesteer_api::MemcachedSpec;

use super::Rules;

impl Rules for MemcachedSpec {}
