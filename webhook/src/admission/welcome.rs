//! The Welcome rule that needs the cluster: its author may read the Secret it references.
use kubesteer_api::WelcomeSpec;

use super::{permitted, read_spec, Admitting, Rules};
use crate::cluster::Cluster;

impl Rules for WelcomeSpec {
    async fn check<C: Cluster>(&self, on: &mut Admitting<'_, C>) {
        let (state, request, spec, namespace) = (on.state, on.request, self, on.namespace);
        let errors = &mut *on.errors;
        let old = request
            .old_object
            .as_ref()
            .and_then(read_spec::<WelcomeSpec>);
        if let Some((path, access)) = spec.required_access(namespace, old.as_ref()) {
            let answer = state
                .permissions
                .check(&state.cluster, &request.user_info, &access)
                .await;
            permitted(request, &path, &access, answer, errors);
        }
    }
}
