//! `--follow-tags`: asking the registries which digest each followed tag points to now,
//! anonymously or with the entries of a Docker config file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use crate::core::local_registry::LocalRegistry;
use crate::registry::{
    CredentialSource, Credentials, Reach, Registries, RegistryCredentials, RegistryError,
};

/// What the registries answered for each followed reference.
pub type Digests = BTreeMap<String, Result<String, RegistryError>>;

/// The credentials in a Docker config file, and the entries that cannot be used.
pub fn read_registry_config(path: &Path) -> Result<(RegistryCredentials, Vec<String>), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    RegistryCredentials::parse(&bytes)
}

/// Asks the registries for the digest of each of `references`, with `credentials` (read
/// from the file named) when given; the cluster's `local` registry at its `host`.
pub fn ask_registries(
    references: &BTreeSet<String>,
    insecure: &[String],
    credentials: Option<(String, RegistryCredentials)>,
    local: Option<&LocalRegistry>,
) -> Digests {
    let fail_all = |why: &str| -> Digests {
        references
            .iter()
            .map(|r| {
                let cause = crate::registry::Cause::Unreachable(why.to_string());
                let e = RegistryError {
                    reference: r.clone(),
                    cause,
                    asked_as: None,
                    via: None,
                };
                (r.clone(), Err(e))
            })
            .collect()
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail_all(&format!("no async runtime: {e}")),
    };
    runtime.block_on(async {
        // On the user's own machine: any registry the rules name.
        let reach = Reach {
            insecure: insecure.to_vec(),
            ..Reach::default()
        };
        let registries = match Registries::new(reach, CredentialSource::Anonymous) {
            Ok(r) => r,
            Err(why) => return fail_all(&why),
        };
        if let Some((file, credentials)) = credentials {
            registries.use_credentials(CredentialSource::File(file), credentials);
        }
        registries.use_local_registry(local.cloned().map(Arc::new));
        let mut out = Digests::new();
        for reference in references {
            let digest = registries.digest(reference, &Credentials::InForce).await;
            out.insert(reference.clone(), digest);
        }
        out
    })
}
