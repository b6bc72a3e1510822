//! The admin API's domain (docs/admin.md): who may act ([`tokens`]). The
//! HTTP side (routes, the 401 and 404 answers) is in `crate::api`; this
//! module knows nothing of HTTP.

pub mod tokens;

pub use tokens::Tokens;
