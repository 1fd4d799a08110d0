//! The controllers' own Prometheus metrics: made and registered in one step, so that a
//! controller's constructor names each metric once.

use prometheus::{IntCounterVec, Opts, Registry};

/// A counter `name` (explained by `help`) partitioned by `labels`, registered in `registry`.
pub fn registered_counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let counter = IntCounterVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(counter.clone()))?;
    Ok(counter)
}
