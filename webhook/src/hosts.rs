//! The host claims of [`kubesteer_api::application::hosts`], made and read through the apiserver:
//! [`HostClaim`]s, cluster-scoped. Nothing here reads a cache: a claim is created (etcd refuses a
//! second create of a name) or taken over by an update conditional on the resourceVersion read,
//! and whether a namespace serves a host is a LIST of its Applications.
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use kubesteer_api::application::hosts::{
    claim_name, covered_claim, covering_wildcard, Claim, HostClaim,
};
use kubesteer_api::Application;

/// The host claims, read and written through the apiserver.
#[derive(Clone)]
pub struct HostClaims {
    client: Client,
    claims: Api<HostClaim>,
}

/// What became of a claim this review wrote.
enum Took {
    /// Ours now: made by this review (`true`), or ours already, or taken over from a stale claim.
    Ours { made: bool },
    /// Another namespace holds it.
    Theirs,
}

impl HostClaims {
    pub fn new(client: Client) -> Self {
        Self {
            claims: Api::all(client.clone()),
            client,
        }
    }

    /// Claims `host` for `namespace`: Ok(None) when it is that namespace's now, Ok(Some(by))
    /// when another namespace holds `by` (the host itself, a wildcard that covers it, or a host
    /// that it, a wildcard, covers). With `dry_run` it only reads.
    pub async fn claim(
        &self,
        host: &str,
        namespace: &str,
        dry_run: bool,
    ) -> Result<Option<String>, String> {
        let name = claim_name(host)
            .ok_or_else(|| format!("host {host:?} is too long for a claim's name"))?;
        if let Some(by) = self.overlap(host, namespace).await? {
            return Ok(Some(by));
        }
        if dry_run {
            let theirs = self.holder(&name, namespace).await?.is_some();
            return Ok(theirs.then(|| host.to_string()));
        }
        let made = match self.take(&name, host, namespace).await? {
            Took::Theirs => return Ok(Some(host.to_string())),
            Took::Ours { made } => made,
        };
        // Again after writing ours: of two concurrent claims that overlap, each writes before
        // it reads, so at least one sees the other.
        if let Some(by) = self.overlap(host, namespace).await? {
            if made {
                // Not left to block the host for the in-flight time.
                let _ = self.claims.delete(&name, &DeleteParams::default()).await;
            }
            return Ok(Some(by));
        }
        Ok(None)
    }

    /// The claim `name` as another namespace holds it now, if any.
    async fn holder(&self, name: &str, namespace: &str) -> Result<Option<Claim>, String> {
        let current = self
            .claims
            .get_opt(name)
            .await
            .map_err(|e| format!("reading the host claim {name}: {e}"))?;
        match current.map(|c| c.claim()) {
            Some(claim) if claim.namespace != namespace && self.holds(&claim, name).await? => {
                Ok(Some(claim))
            }
            _ => Ok(None),
        }
    }

    /// Whether `claim` (named `name`) holds now: its namespace has an Application for the
    /// host, or it is in flight.
    async fn holds(&self, claim: &Claim, name: &str) -> Result<bool, String> {
        let now = Timestamp::now();
        if claim.fresh(now) {
            return Ok(true);
        }
        let host = host_of(name);
        let apps = Api::<Application>::namespaced(self.client.clone(), &claim.namespace)
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing the Applications of {}: {e}", claim.namespace))?;
        let serves = apps
            .items
            .iter()
            .any(|a| a.spec.ingress.as_ref().is_some_and(|i| i.host == host));
        Ok(claim.holds(now, serves))
    }

    /// The claim that overlaps `host` held by another namespace: for a host, the wildcard's
    /// that covers it; for a wildcard, any of the hosts it covers.
    async fn overlap(&self, host: &str, namespace: &str) -> Result<Option<String>, String> {
        if let Some(domain) = host.strip_prefix("*.") {
            let claims = self
                .claims
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing the host claims: {e}"))?;
            for held in claims.items {
                let name = held.name_any();
                let claim = held.claim();
                if covered_claim(&name, domain)
                    && claim.namespace != namespace
                    && self.holds(&claim, &name).await?
                {
                    return Ok(Some(host_of(&name)));
                }
            }
            return Ok(None);
        }
        let Some(wildcard) = covering_wildcard(host) else {
            return Ok(None);
        };
        let Some(name) = claim_name(&wildcard) else {
            return Ok(None);
        };
        Ok(self.holder(&name, namespace).await?.map(|_| wildcard))
    }

    /// Creates the claim `name`, or renews ours, or takes over a stale one.
    async fn take(&self, name: &str, host: &str, namespace: &str) -> Result<Took, String> {
        let fresh = HostClaim::of(host, namespace, Timestamp::now())
            .ok_or_else(|| format!("host {host:?} is too long for a claim's name"))?;
        match self.claims.create(&PostParams::default(), &fresh).await {
            Ok(_) => return Ok(Took::Ours { made: true }),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(format!("creating the host claim {name}: {e}")),
        }
        let read = |e: kube::Error| format!("reading the host claim {name}: {e}");
        let current = self.claims.get(name).await.map_err(read)?;
        let claim = current.claim();
        if claim.namespace != namespace && self.holds(&claim, name).await? {
            return Ok(Took::Theirs);
        }
        // Ours to renew, or stale: replaced only if nobody wrote it since it was read.
        let mut renewed = fresh;
        renewed.metadata.resource_version = current.metadata.resource_version.clone();
        match self
            .claims
            .replace(name, &PostParams::default(), &renewed)
            .await
        {
            Ok(_) => Ok(Took::Ours { made: false }),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Written meanwhile: by this namespace (another review) or by the one that got it.
                let now = self.claims.get(name).await.map_err(read)?.claim();
                if now.namespace == namespace {
                    Ok(Took::Ours { made: false })
                } else {
                    Ok(Took::Theirs)
                }
            }
            Err(e) => Err(format!("renewing the host claim {name}: {e}")),
        }
    }
}

/// The host a claim's name stands for (see [`claim_name`]).
fn host_of(name: &str) -> String {
    match (name.strip_prefix("w."), name.strip_prefix("h.")) {
        (Some(domain), _) => format!("*.{domain}"),
        (_, Some(host)) => host.to_string(),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_name_gives_back_its_host() {
        for host in ["shop.example.com", "*.example.com", "w.example.com"] {
            let name = claim_name(host).unwrap_or_default();
            assert_eq!(host_of(&name), host);
        }
    }
}
