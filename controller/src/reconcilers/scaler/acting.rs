//! Whose rights the Scaler controller writes targets with. By default its own ServiceAccount's,
//! with the author's rights asked again while the Scaler acts ([`super::rights`]). With
//! `--impersonate-service-account NAME` (the chart's `controller.impersonation.serviceAccount`),
//! as Flux's controllers do for multi-tenancy: every write for a Scaler (a target's replicas and
//! record, its HPA's minReplicas, its ScaledObject's pause) is sent as the ServiceAccount `NAME`
//! of the Scaler's namespace, so the apiserver itself authorizes it against what that
//! namespace's owners granted. Reads still use the controller's own watches.
use std::collections::BTreeMap;
use std::sync::Mutex;

use kube::Client;

/// The client a Scaler's writes go through.
pub struct Acting {
    own: Client,
    /// The controller's configuration and the ServiceAccount to act as, when impersonating.
    impersonating: Option<(kube::Config, String)>,
    /// One client per namespace, made once.
    clients: Mutex<BTreeMap<String, Client>>,
}

impl Acting {
    /// Writes with the controller's own rights.
    pub fn own(client: Client) -> Self {
        Self {
            own: client,
            impersonating: None,
            clients: Mutex::default(),
        }
    }

    /// Writes as the ServiceAccount `account` of each Scaler's namespace; None acts as
    /// [`Acting::own`].
    pub fn impersonating(client: Client, config: kube::Config, account: Option<String>) -> Self {
        Self {
            impersonating: account
                .filter(|a| !a.is_empty())
                .map(|account| (config, account)),
            ..Self::own(client)
        }
    }

    /// The user a Scaler in namespace `ns` writes as, when it is not the controller itself.
    pub fn user(&self, ns: &str) -> Option<String> {
        let (_, account) = self.impersonating.as_ref()?;
        Some(format!("system:serviceaccount:{ns}:{account}"))
    }

    /// The client for the writes of a Scaler in namespace `ns`.
    pub fn client(&self, ns: &str) -> crate::Result<Client> {
        let (Some((config, _)), Some(user)) = (&self.impersonating, self.user(ns)) else {
            return Ok(self.own.clone());
        };
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| crate::Error::Cache("the impersonating clients' lock".into()))?;
        if let Some(client) = clients.get(ns) {
            return Ok(client.clone());
        }
        let mut config = config.clone();
        // The apiserver adds a ServiceAccount's groups itself.
        config.auth_info.impersonate = Some(user);
        let client = Client::try_from(config)?;
        clients.insert(ns.to_string(), client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_scaler_acts_as_the_account_of_its_own_namespace_only_when_asked_to() {
        let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        let client = || Client::try_from(config.clone()).unwrap();
        let own = Acting::own(client());
        assert_eq!(own.user("team"), None);
        let off = Acting::impersonating(client(), config.clone(), Some(String::new()));
        assert_eq!(off.user("team"), None);
        let on = Acting::impersonating(client(), config.clone(), Some("scaler".into()));
        assert_eq!(
            on.user("team").as_deref(),
            Some("system:serviceaccount:team:scaler")
        );
        assert!(on.client("team").is_ok());
        assert_eq!(on.clients.lock().unwrap().len(), 1);
    }
}
