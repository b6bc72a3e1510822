//! The moderation record's side of a member action (docs/moderation.md):
//! reading what it says of a member, writing the member's new state with
//! the generation raised after it, and the member's state in its index
//! entry.

use crate::board::keys;
use crate::moderation::{
    ERASED_PREFIX, ErasedEntry, GEN_FIELD, HIDDEN_PREFIX, HiddenEntry, KEY_FIELD,
};
use crate::sink::members::Entry;
use crate::sink::store::{Store, StoreError, server_error};

use super::report::{MemberAction, MemberError};

/// The record's entries about `member`: hidden entry, erased.
pub(crate) async fn read(
    store: &Store,
    prefix: &str,
    member: &str,
    hex: &str,
) -> Result<(Option<HiddenEntry>, bool), MemberError> {
    let record = keys::moderation_key(prefix);
    let replies = store
        .ordered(&[vec![
            redis::cmd("HGET")
                .arg(&record)
                .arg(format!("{HIDDEN_PREFIX}{member}"))
                .clone(),
            redis::cmd("HEXISTS")
                .arg(&record)
                .arg(format!("{ERASED_PREFIX}{hex}"))
                .clone(),
        ]])
        .await?;
    if let Some(e) = replies.iter().find_map(server_error) {
        return Err(e.into());
    }
    let hidden: Option<String> = match replies.first() {
        Some(v) => {
            redis::from_redis_value(v.clone()).map_err(|e| StoreError::Protocol(e.to_string()))?
        }
        None => None,
    };
    let erased = matches!(replies.get(1), Some(redis::Value::Int(1)));
    let hidden = hidden.and_then(|text| serde_json::from_str(&text).ok());
    Ok((hidden, erased))
}

/// What one action writes to the record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Change<'a> {
    pub(crate) action: MemberAction,
    pub(crate) member: &'a str,
    /// The member's keyed hash.
    pub(crate) hex: &'a str,
    /// Its hidden entry once done (`None`: visible or erased).
    pub(crate) entry: Option<&'a HiddenEntry>,
    pub(crate) actor: &'a str,
    pub(crate) now: i64,
}

impl<'a> Change<'a> {
    pub(crate) fn new(
        action: MemberAction,
        member: &'a str,
        hex: &'a str,
        entry: Option<&'a HiddenEntry>,
        actor: &'a str,
        now: i64,
    ) -> Change<'a> {
        Change {
            action,
            member,
            hex,
            entry,
            actor,
            now,
        }
    }
}

/// Step 1: the moderation record takes the member's new state, then its
/// generation is raised (in that order, on one key: a consumer that
/// reads the generation reads the state with it); answers the new
/// generation, the stamp of the moves. `key_id` fingerprints the
/// `erase_key` the record's hashes are made with.
pub(crate) async fn write(
    store: &Store,
    prefix: &str,
    key_id: &str,
    change: &Change<'_>,
) -> Result<i64, MemberError> {
    let (action, member, hex) = (change.action, change.member, change.hex);
    let (entry, actor, now) = (change.entry, change.actor, change.now);
    let record = keys::moderation_key(prefix);
    let hidden_field = format!("{HIDDEN_PREFIX}{member}");
    let mut cmds = Vec::new();
    match (entry, action) {
        (_, MemberAction::Erase) => {
            let erased = ErasedEntry {
                at: now,
                actor: actor.to_string(),
            };
            cmds.push(
                redis::cmd("HSET")
                    .arg(&record)
                    .arg(format!("{ERASED_PREFIX}{hex}"))
                    .arg(serde_json::to_string(&erased).unwrap_or_default())
                    .clone(),
            );
            cmds.push(redis::cmd("HDEL").arg(&record).arg(&hidden_field).clone());
        }
        (Some(e), _) => cmds.push(
            redis::cmd("HSET")
                .arg(&record)
                .arg(&hidden_field)
                .arg(serde_json::to_string(e).unwrap_or_default())
                .clone(),
        ),
        (None, _) => cmds.push(redis::cmd("HDEL").arg(&record).arg(&hidden_field).clone()),
    }
    Ok(raise(store, &record, cmds, key_id, now).await?)
}

/// Sends `cmds` (writes to the record `record`) followed by the record's
/// key fingerprint (if it has none) and a raised generation, in one
/// round trip; answers the new generation.
///
/// A record without a generation (new, or lost with Redis's data) starts
/// from `now_ms`, not from 0: consumers that kept running through a loss
/// of Redis's data hold a snapshot of the old record, whose generation is
/// a count of its actions, far below the clock. The first action after
/// the loss is then newer than what they hold, so their calls are refused
/// and they read the record again (docs/moderation.md).
pub(crate) async fn raise(
    store: &Store,
    record: &str,
    mut cmds: Vec<redis::Cmd>,
    key_id: &str,
    now_ms: i64,
) -> Result<i64, StoreError> {
    cmds.push(
        redis::cmd("HSETNX")
            .arg(record)
            .arg(KEY_FIELD)
            .arg(key_id)
            .clone(),
    );
    cmds.push(
        redis::cmd("HSETNX")
            .arg(record)
            .arg(GEN_FIELD)
            .arg(now_ms)
            .clone(),
    );
    cmds.push(
        redis::cmd("HINCRBY")
            .arg(record)
            .arg(GEN_FIELD)
            .arg(1)
            .clone(),
    );
    let replies = store.ordered(&[cmds]).await?;
    if let Some(e) = replies.iter().find_map(server_error) {
        return Err(e);
    }
    match replies.last() {
        Some(redis::Value::Int(g)) => Ok(*g),
        other => Err(StoreError::Protocol(format!(
            "HINCRBY of the moderation generation returned {other:?}"
        ))),
    }
}

/// Step 2's write to the member's index entry: its new state.
pub(crate) fn state_command(
    index: &Entry,
    action: MemberAction,
    entry: Option<&HiddenEntry>,
) -> redis::Cmd {
    let field = index.state_field();
    match (entry, action) {
        (_, MemberAction::Erase) => redis::cmd("HSET")
            .arg(&index.key)
            .arg(field)
            .arg("{\"state\":\"erased\"}")
            .clone(),
        (Some(e), _) => redis::cmd("HSET")
            .arg(&index.key)
            .arg(field)
            .arg(serde_json::to_string(e).unwrap_or_default())
            .clone(),
        (None, _) => redis::cmd("HDEL").arg(&index.key).arg(field).clone(),
    }
}
