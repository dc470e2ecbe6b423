//! Everything the operator and `imagemap resolve` say to registries, and read from them:
//! the digest a tag points to ([`Registries`], over a bounded client of our own), the
//! credentials they are asked with ([`credentials`]), and the push notifications they send
//! ([`push`]). Nothing here contacts a host the [`Reach`] does not allow, and nothing a
//! registry sends is kept, hashed or shown before it is bounded.

mod challenge;
mod client;
pub mod credentials;
mod error;
mod manifest_digest;
pub mod push;
mod registries;
mod token_cache;

pub use client::Reach;
pub use credentials::RegistryCredentials;
pub use error::{Cause, RegistryError, Role, Via};
pub use manifest_digest::{MANIFEST_LIMIT, TOKEN_LIMIT};
pub use registries::{CHECK_LIMIT, CredentialSource, Credentials, Registries};
