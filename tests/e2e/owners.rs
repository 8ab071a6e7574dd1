//! The controller and the kinds that own children (Application, Memcached, Welcome), end to end.
mod application;
pub(crate) mod debounce;
mod memcached;
mod name_conflict;
mod welcome;
