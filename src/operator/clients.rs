//! The clients of a replica that runs without leader election, counting into one
//! [`ApiRequests`]: the operator's own, and one for evictions.

use kube::client::ClientBuilder;
use kube::{Client, Config};

use crate::api_requests::{ApiRequests, client_with_counter};

/// The operator's clients.
#[derive(Clone)]
pub struct OperatorClients {
    /// Every request but evictions (kube retries 429, 503 and 504 for it).
    pub client: Client,
    /// Evictions, which kube does not retry: a 429 is a PodDisruptionBudget's answer to act
    /// on (the API server asks for 10 s between tries, and kube would retry 15 times).
    pub evictions: Client,
}

impl OperatorClients {
    /// Both clients from `config`, and what counts their requests.
    pub fn new(config: Config) -> Result<(OperatorClients, ApiRequests), kube::Error> {
        let (client, requests) = client_with_counter(config.clone())?;
        let evictions = ClientBuilder::try_from(without_retry(config))?
            .with_layer(&requests.layer())
            .build();
        Ok((OperatorClients { client, evictions }, requests))
    }
}

/// `config` for a client that kube does not retry.
#[must_use]
pub fn without_retry(mut config: Config) -> Config {
    config.default_retry = false;
    config
}
