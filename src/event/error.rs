//! Why a message is not a valid event: [`DecodeError`], the dead-letter
//! reason of each variant, and the shortening of the offending value a
//! message quotes.

use crate::telemetry::DlqReason;

/// Why a message is not a valid event.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The message is larger than `kafka.max_event_bytes`; refused before
    /// it is parsed (`too_large`).
    #[error("message of {size} bytes is larger than the limit of {max} bytes")]
    TooLarge {
        /// The message's size, in bytes.
        size: usize,
        /// `kafka.max_event_bytes`.
        max: usize,
    },
    /// The message is not UTF-8 (`invalid_utf8`).
    #[error("message is not valid UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    /// The message is not JSON, or is nested too deeply (`invalid_json`).
    #[error("message is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The message is JSON but not an object (`not_object`).
    #[error("message is JSON but not an object")]
    NotObject,
    /// `type` names no event type (`unknown_type`); holds the name given.
    #[error("unknown event type {0:?} (expected gift, score or play)")]
    UnknownType(String),
    /// The object fails its type's schema (docs/events.md), `type` is
    /// missing, or an id or `ts` is out of its bounds (`schema`); the
    /// message names the field.
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
