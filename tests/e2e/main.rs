//! kubesteer's end-to-end tests: one binary, a module per area and a file per subject, against
//! the real local control plane that `hack/e2e.sh` starts. `hack/e2e.sh` runs one file's tests at
//! a time (`-- scaler::conversion::`), as the tests of a file may share cluster-wide state
//! (the Scaler CRD's conversion, its storage version); a filter runs one area or one test:
//! `cargo test -p kubesteer-tests --test e2e -- install::`.
mod install;
mod owners;
mod resilience;
mod scaler;
mod soak;
mod webhook;
