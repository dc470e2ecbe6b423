//! The webhook's TLS without a person: the leader keeps the CA and serving certificate in the
//! webhook's Secret, and the configuration's `caBundle` trusting them
//! ([`certificate_keeper`], deciding with `crate::core::webhook_certificate`). Every replica serves
//! what the Secret holds (`admission::secret_certificate`).

pub mod certificate_keeper;
