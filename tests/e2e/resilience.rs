//! The controller under crashes, an apiserver outage and an undecodable object.
mod crash;
mod outage;
mod poison;
