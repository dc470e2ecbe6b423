//! The webhook's certificates when the leader keeps them in a Secret, without a person: a CA
//! of its own and a serving certificate it signs, renewed well before they end, and a CA
//! rotation during which the webhook configuration trusts both the old CA and the new. Pure:
//! what a certificate says ([`facts`]), the names it must be valid for ([`hosts`]), making
//! one ([`issue`]), and what to do next with what the Secret and the configuration hold
//! ([`plan`]).

pub mod facts;
pub mod hosts;
pub mod issue;
pub mod plan;

/// The Secret's keys: the CAs the configuration must trust (the one that signs first).
pub const CA_BUNDLE: &str = "ca.crt";
/// The signing CA's key.
pub const CA_KEY: &str = "ca.key";
/// The serving certificate every replica serves.
pub const CERT: &str = "tls.crt";
/// Its key.
pub const KEY: &str = "tls.key";
