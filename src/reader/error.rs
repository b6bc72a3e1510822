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
    /// The parameter's name as the client wrote it: the JSON `"parameter"`
    /// of the 400.
    pub param: String,
    /// What is wrong, in a sentence that names the parameter: the JSON
    /// `"error"` of the 400.
    pub message: String,
}

impl BadParam {
    /// The parameter `param` is wrong, as `message` says.
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> BadParam {
        BadParam {
            param: param.into(),
            message: message.into(),
        }
    }
}

/// Why a read of a board cannot be answered; the HTTP API maps each case to
/// its status (docs/http-api.md), `rankflow top` prints the message.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No configured board has this name (404).
    #[error("no board named {0:?}")]
    UnknownBoard(String),
    /// The board has no such view, nor offers it as a rolling view (404).
    #[error("board {board:?} has no view {view:?} (it has: {known})")]
    UnknownView {
        /// The board's name.
        board: String,
        /// The view as asked for.
        view: String,
        /// The board's views and the rolling views it offers, comma
        /// separated, so the message says what would have worked.
        known: String,
    },
    /// The caller's fault: a parameter out of range or not applicable.
    #[error("{0}")]
    BadRequest(BadParam),
    /// The member asked for (`members/{member}`, `around/{member}`) has no
    /// entry in the view, period and scope read (404).
    #[error("member {member:?} is not on this board")]
    MemberNotFound {
        /// The member as asked for.
        member: String,
    },
    /// A period other than the current one with neither a key in Redis
    /// nor a complete copy in the archive.
    #[error("period {period} of board {board}{scope} had no events")]
    NoEvents {
        /// The board's name.
        board: String,
        /// The period id asked for.
        period: String,
        /// ` (scope "s")` for scoped boards, else empty.
        scope: String,
    },
    /// No reader yet: Redis has not been reached since start-up. Temporary,
    /// unlike a configuration fault.
    #[error("not connected to Redis yet; try again shortly")]
    NotReady,
    /// Redis failed the read (unreachable, timed out, an error reply):
    /// 503, logged.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The archive failed a read of a past period: 503 when a retry may
    /// succeed, 500 when PostgreSQL refused it (an operator must look).
    #[error(transparent)]
    Archive(#[from] ArchiveReadError),
}

impl ReadError {
    pub(super) fn bad(param: &str, message: impl Into<String>) -> ReadError {
        ReadError::BadRequest(BadParam::new(param, message))
    }
}
