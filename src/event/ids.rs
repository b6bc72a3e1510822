//! The id rule the schemas cannot say: ids (and event ids) are 1 to
//! [`MAX_ID_BYTES`] bytes, counted in bytes where JSON Schema's `maxLength`
//! counts characters. Both decodes apply it.

use super::error::DecodeError;

/// Bytes an id may have (docs/events.md: strings of 1–128 bytes). JSON Schema's
/// `maxLength` counts characters, so the byte limit is checked here as well.
pub(crate) const MAX_ID_BYTES: usize = 128;

pub(super) fn check_id_bytes(field: &str, id: &str) -> Result<(), DecodeError> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(DecodeError::Schema(format!(
            "/{field}: id of {} bytes (ids are 1-{MAX_ID_BYTES} bytes)",
            id.len()
        )));
    }
    Ok(())
}
