//! The calls that hide, restore, erase or look up one member in one board
//! instance: the apply script's `move` mode (`lua/move.lua` documents the
//! layout and what each action does to a view and its twin). Built here,
//! beside the apply calls' encoding, because both bind a view's keys the
//! same way; sent by the admin actions (`crate::admin`).

use crate::board::keys;
use crate::board::model::Board;

use super::encode::{helper_keys, rule_codes};

/// What a move call does to the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveAction {
    /// From each view to its twin.
    Hide,
    /// From each twin back to its view.
    Restore,
    /// Out of both.
    Erase,
    /// Nothing: say where it is.
    Show,
}

impl MoveAction {
    fn code(self) -> &'static str {
        match self {
            MoveAction::Hide => "hide",
            MoveAction::Restore => "restore",
            MoveAction::Erase => "erase",
            MoveAction::Show => "show",
        }
    }
}

/// The EVALSHA of the apply script (`sha`) that moves `member` in the
/// instance `tag` of `board`, over `views` (id, window length) as
/// [`Board::live_views`] lists them, stamping the instance with
/// generation `stamp`, at clock `now`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn command(
    sha: &str,
    prefix: &str,
    board: &Board,
    tag: &str,
    views: &[(String, Option<i64>)],
    action: MoveAction,
    member: &str,
    stamp: i64,
    now: i64,
) -> redis::Cmd {
    let mut keys_out = vec![keys::fence_key(prefix, tag)];
    for twin in [false, true] {
        for (id, window) in views {
            let key = if twin {
                keys::twin_view_key(prefix, tag, id)
            } else {
                keys::view_key(prefix, tag, id)
            };
            let extra = helper_keys(board, &key, window.is_some(), false);
            keys_out.push(key);
            keys_out.extend(extra);
        }
    }
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(keys_out.len())
        .arg(&keys_out)
        .arg(now)
        .arg("move")
        .arg(action.code())
        .arg(member)
        .arg(stamp)
        .arg(1);
    for code in rule_codes(board) {
        cmd.arg(code);
    }
    cmd.arg(views.len());
    for (_, window) in views {
        match window {
            Some(length) => cmd.arg("w").arg(*length),
            None => cmd.arg("p").arg(0),
        };
    }
    cmd
}

/// A move call's reply: whether a window's trimming stopped at its budget
/// (send the call again), and per view where the member was before the
/// action: 0 nowhere, 1 in the view, 2 in its twin, 3 both.
pub(crate) fn parse_reply(value: &redis::Value) -> Option<(bool, Vec<u8>)> {
    let redis::Value::Array(items) = value else {
        return None;
    };
    let more = matches!(items.first(), Some(redis::Value::Int(1)));
    let Some(redis::Value::Array(found)) = items.get(1) else {
        // An instance without views answers an empty table, which Redis
        // sends as an empty array too.
        return Some((more, Vec::new()));
    };
    let held = found
        .iter()
        .map(|v| match v {
            redis::Value::Int(n) => u8::try_from(*n).ok(),
            _ => None,
        })
        .collect::<Option<Vec<u8>>>()?;
    Some((more, held))
}
