//! The fault soak: a seeded workload and seeded faults on the chart's pods, checked as a
//! history (`make soak`; a short run is part of `make test`).
mod faults;
mod run;
mod workload;
