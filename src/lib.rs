//! imagemap: "use image Y wherever image X is asked for" on Kubernetes.
//!
//! The library holds all logic; the `imagemap` binary is a thin command line over it.
//! [`core`] is the pure engine; the edges call it: [`operator`] (`imagemap run`), [`cli`]
//! (the other subcommands), [`registry`] (asking registries) and [`api_requests`]
//! (counting a client's requests); [`book`] renders the book's reference pages from the
//! definitions they document.

pub mod api_requests;
pub mod book;
pub mod cli;
pub mod core;
pub mod operator;
pub mod registry;
