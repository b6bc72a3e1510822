//! Why a message is not a valid event: [`DecodeError`], the dead-letter
//! reason of each variant, and the shortening of the offending value a
//! message quotes.

use crate::telemetry::DlqReason;

/// Why a message is not a valid event.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("message of {size} bytes is larger than the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("message is not valid UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    #[error("message is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("message is JSON but not an object")]
    NotObject,
    #[error("unknown event type {0:?} (expected gift, score or play)")]
    UnknownType(String),
    #[error("{0}")]
    Schema(String),
}

impl DecodeError {
    /// Why the message goes to the dead-letter topic.
    pub fn reason(&self) -> DlqReason {
        match self {
            DecodeError::TooLarge { .. } => DlqReason::TooLarge,
            DecodeError::Utf8(_) => DlqReason::InvalidUtf8,
            DecodeError::Json(_) => DlqReason::InvalidJson,
            DecodeError::NotObject => DlqReason::NotObject,
            DecodeError::UnknownType(_) => DlqReason::UnknownType,
            DecodeError::Schema(_) => DlqReason::Schema,
        }
    }
}

/// Messages quote the offending value; a 10 KB id would make a 10 KB
/// header and log line, so keep them readable.
pub(super) fn shorten(mut message: String) -> String {
    if message.len() > 300 {
        let mut cut = 300;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}
