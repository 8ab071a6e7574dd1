//! The webhook's integration tests, one binary (one link, one run) sharing `common`: the fake
//! cluster, the fixtures in tests/data and the review invariants the fuzz target keeps too.
//! The connection flood is not here but in tests/flood.rs, its own process (it says why).
mod common;

mod apiserver_auth;
mod bodies;
mod conversion;
mod corpus;
mod drain;
mod fuzz;
mod handlers;
mod rotation;
