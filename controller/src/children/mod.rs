//! The children of an owner (its Deployment, Service, ...): how they are built, how they are
//! cached, and how they are made so: apply only what differs (drift), and never take over an object
//! this owner does not control (`NameConflict`).
mod apply;
mod build;
mod cache;
mod pods;
mod store;
mod unseen;

pub use apply::*;
pub use build::*;
pub use cache::*;
pub use pods::{pods_cache, ListedPod, PodsCache, PodsWriter, WatchedPod};
pub use store::{packed_store, PackedStore, PackedWriter};
pub use unseen::{Unseen, UNSEEN_FOR};
