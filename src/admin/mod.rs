//! The admin API's domain (docs/admin.md): who may act ([`tokens`]), the
//! member actions ([`members`]: hide, restore, erase; what they take and
//! answer in [`report`]; their part in the PostgreSQL archive in
//! `archived`; the record rebuilt from the audit topic after Redis lost it
//! in [`recover`]), promoting a shadow board in place of its board
//! ([`promote`]) and their audit trail ([`audit`]). The HTTP side
//! (routes, the 401 and 404 answers) is in `crate::api`, the command line
//! in `crate::cli`; this module knows nothing of either.

mod archived;
pub mod audit;
pub mod members;
pub mod promote;
mod record;
pub mod recover;
pub mod report;
pub mod tokens;

pub use audit::{Audit, AuditEntry, AuditError};
pub use members::Moderator;
pub use promote::{PromoteError, Promotion};
pub use report::{ActionRequest, Holding, MemberAction, MemberError, MemberReport};
pub use tokens::Tokens;
