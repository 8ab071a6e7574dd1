//! What only the Scaler controller keeps, beside the [`Context`] every controller shares: the
//! claim index, the RESTMapper of its targets' kinds, the inventory of what selectors may pick,
//! the gate of the writes due at one boundary, and the answers about its authors' rights. A new one for each run of the controllers
//! (each leadership term), as the shared context is.
use std::ops::Deref;
use std::sync::Arc;

use kubesteer_api::scaler::claims::Claims;
use kubesteer_runtime::scale::RestMapper;

use super::acting::Acting;
use super::boundary::Gate;
use super::inventory::Inventory;
use super::rights::Rights;
use crate::Context;

/// The Scaler controller's context: the shared one, and the Scaler's own state.
pub struct ScalerContext {
    pub base: Arc<Context>,
    /// Which Scalers claim each target, kept from the Scaler watch; the oldest owns it.
    pub claims: Claims,
    /// Which resource a Scaler target's kind is, and whether it has `/scale`.
    pub mapper: Arc<RestMapper>,
    /// What Scaler selectors may pick, kept from watches.
    pub inventory: Inventory,
    /// Lets the Scalers' target writes due at a boundary go before what reports them.
    pub boundary: Gate,
    /// Whether the Scalers' authors still hold their rights, asked briefly kept.
    pub rights: Rights,
    /// Whose rights the writes to targets go with.
    pub acting: Arc<Acting>,
}

impl ScalerContext {
    pub fn new(base: Arc<Context>) -> Self {
        Self {
            mapper: Arc::new(RestMapper::new(base.client.clone())),
            claims: Claims::default(),
            inventory: Inventory::default(),
            boundary: Gate::default(),
            rights: Rights::default(),
            acting: Arc::new(Acting::own(base.client.clone())),
            base,
        }
    }

    /// This context, its writes to targets going through `acting`.
    pub fn acting(self, acting: Arc<Acting>) -> Self {
        Self { acting, ..self }
    }
}

/// The shared context's client, recorder, clock, caches and per-object state, as they are.
impl Deref for ScalerContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.base
    }
}
