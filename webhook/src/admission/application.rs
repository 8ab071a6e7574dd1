//! The Application rules that need the cluster: its author may read every Secret and ConfigMap
//! its environment takes values from; advice about its IngressClass and about another Ingress
//! that serves the same host and path, named only to an author who may get it.
use kubesteer_api::access::Access;
use kubesteer_api::field::FieldError;
use kubesteer_api::ApplicationSpec;

use super::{ask_all, permitted, read_spec, Admitting, Rules};
use crate::cluster::Cluster;

impl Rules for ApplicationSpec {
    async fn check<C: Cluster>(&self, on: &mut Admitting<'_, C>) {
        let (state, request, spec) = (on.state, on.request, self);
        let (errors, warnings) = (&mut *on.errors, &mut *on.warnings);
        let me = (on.namespace, on.name);
        let old = request
            .old_object
            .as_ref()
            .and_then(read_spec::<ApplicationSpec>);
        if let Some(refused) =
            spec.path_type_refused(old.as_ref(), state.implementation_specific_paths)
        {
            errors.push(refused);
        }
        let required = spec.required_access(me.0, old.as_ref());
        let (cluster, user) = (&state.cluster, &request.user_info);
        let answers = ask_all(state, request, &required).await;
        for ((path, access), answer) in required.iter().zip(answers) {
            permitted(request, path, access, answer, errors);
        }
        let Some(ingress) = spec.ingress.as_ref().filter(|_| errors.is_empty()) else {
            return;
        };
        if let Some(host) = spec.new_host(old.as_ref()).filter(|_| !state.host_sharing) {
            if let Some((ns, name)) = cluster.host_owner(host, me.0) {
                // Named only to an author who may read that Ingress.
                let readable = state
                    .permissions
                    .check(cluster, user, &Access::get_ingress(&ns, &name))
                    .await
                    == Ok(true);
                let owner = format!("{ns}/{name}");
                errors.push(kubesteer_api::application::host_taken(
                    host,
                    readable.then_some(owner.as_str()),
                ));
                return;
            }
            // Last of the rules that deny, so that a claim is made only for an object admitted.
            match cluster.claim_host(host, me.0, request.dry_run).await {
                Ok(None) => {}
                Ok(Some(by)) => {
                    errors.push(kubesteer_api::application::host_claimed(host, &by));
                    return;
                }
                Err(e) => {
                    errors.push(FieldError::forbidden(
                        "spec.ingress.host",
                        format!("could not check which namespace host {host:?} belongs to: {e}"),
                    ));
                    return;
                }
            }
        }
        if let Some(class) = &ingress.class_name {
            if cluster.ingress_class_exists(class) == Some(false) {
                warnings.push(format!(
                "spec.ingress.className: no IngressClass {class:?} exists in this cluster; no Ingress controller serves the Ingress until one does"
            ));
            }
        }
        let path = ingress.path();
        for (ns, name) in cluster.ingresses_serving(&ingress.host, path, me) {
            let access = Access::get_ingress(&ns, &name);
            // An Ingress the author may not read is not named, nor is it said that it exists.
            if state.permissions.check(cluster, user, &access).await == Ok(true) {
                warnings.push(format!(
                "spec.ingress.host: Ingress {ns}/{name} already serves host {:?} path {path:?}; the Ingress controller picks one of them",
                ingress.host
            ));
            }
        }
    }
}
