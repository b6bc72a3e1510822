//! One reply of a Redis pipeline, converted to the type a read expects
//! ([`reply`]); shared by the reads of boards and of periods.

use redis::Value;

use crate::sink::store::{StoreError, server_error};

/// Reply `i` of a pipeline, converted; an error reply is an error.
pub(super) fn reply<T: redis::FromRedisValue>(
    replies: &[Value],
    i: usize,
) -> Result<T, StoreError> {
    let value = replies.get(i).cloned().unwrap_or(Value::Nil);
    if let Some(e) = server_error(&value) {
        return Err(e);
    }
    redis::from_redis_value(value).map_err(|e| StoreError::Protocol(e.to_string()))
}
