//! The errors of a read: [`ReadError`], and [`BadParam`], the one that names
//! a request parameter that cannot be served (docs/http-api.md), so the HTTP
//! API answers 400 with the parameter and `rankflow top` says which option is
//! wrong.

use crate::archive::read::ArchiveReadError;
use crate::sink::store::StoreError;

/// A request parameter that cannot be served. `param` is its name as the
/// client wrote it (`limit`, `period`, `limt`...), and `message` says what is
/// wrong in a sentence that also names it, so the text alone is enough.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BadParam {
    pub param: String,
    pub message: String,
}

impl BadParam {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> BadParam {
        BadParam {
            param: param.into(),
            message: message.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no board named {0:?}")]
    UnknownBoard(String),
    #[error("board {board:?} has no view {view:?} (it has: {known})")]
    UnknownView {
        board: String,
        view: String,
        known: String,
    },
    /// The caller's fault: a parameter out of range or not applicable.
    #[error("{0}")]
    BadRequest(BadParam),
    #[error("member {member:?} is not on this board")]
    MemberNotFound { member: String },
    /// A period other than the current one with neither a key in Redis
    /// nor a complete copy in the archive.
    #[error("period {period} of board {board}{scope} had no events")]
    NoEvents {
        board: String,
        period: String,
        /// ` (scope "s")` for scoped boards, else empty.
        scope: String,
    },
    /// No reader yet: Redis has not been reached since start-up. Temporary,
    /// unlike a configuration fault.
    #[error("not connected to Redis yet; try again shortly")]
    NotReady,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveReadError),
}

impl ReadError {
    pub(super) fn bad(param: &str, message: impl Into<String>) -> ReadError {
        ReadError::BadRequest(BadParam::new(param, message))
    }
}
