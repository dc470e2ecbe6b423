//! The watch toolkit both sides use: a watch feeding a cache and a stream of its events
//! ([`cache_events`]), whether a cache has listed ([`listed`]), watches per namespace
//! re-listed one namespace at a time ([`scoped_watches`]), the backoff of a failing watch
//! ([`watch_backoff`]), and what is told to whoever listens now ([`teller`]).

pub mod cache_events;
pub mod listed;
pub mod scoped_watches;
pub mod teller;
pub mod watch_backoff;
