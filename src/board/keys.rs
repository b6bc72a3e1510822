//! Redis key names (docs/redis-layout.md): `{prefix}:{<board>[:<scope>]}:<view>`, where the
//! braces are a Redis Cluster hash tag so every key of one board instance
//! (views, window helpers, offset fences) lives in one slot and one Lua call
//! may touch them all.
//!
//! A scoped board with `scope_slot = "board"` keeps every scope in its
//! board's slot instead, `{prefix}:{<board>}@<scope>:<view>`, so that a
//! union of its scopes (docs/http-api.md) is one call on a Redis Cluster. Code
//! names an instance by its *tag*: `board`, `board:<scope>` (the hash tag
//! content) or `board@<scope>` (the board-slot layout); board names have
//! neither `:` nor `@`, so the first of them tells the layout.
//!
//! Scope values are percent-escaped (`%` `{` `}` `:` only) so that no value
//! can end the hash tag early or add a key segment; everything else,
//! including spaces and emoji, is kept as given.

use std::borrow::Cow;

/// Escapes a scope value for use inside the hash tag.
pub fn escape_scope(scope: &str) -> Cow<'_, str> {
    if !scope.contains(['%', '{', '}', ':']) {
        return Cow::Borrowed(scope);
    }
    let mut out = String::with_capacity(scope.len() + 8);
    for c in scope.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Inverse of [`escape_scope`]; `None` for text it cannot have produced.
pub(crate) fn unescape_scope(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3)?;
        out.push(match code {
            "25" => '%',
            "7B" => '{',
            "7D" => '}',
            "3A" => ':',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The tag of a board instance in the default layout: `board` or
/// `board:<escaped scope>`, the whole of its hash tag.
pub fn instance_tag(board: &str, scope: Option<&str>) -> String {
    instance_tag_in(board, scope, false)
}

/// The tag of a board instance; `board_slot`: the board keeps its scopes in
/// its own slot (`board@<escaped scope>`).
pub(crate) fn instance_tag_in(board: &str, scope: Option<&str>, board_slot: bool) -> String {
    match (scope, board_slot) {
        (Some(s), false) => format!("{board}:{}", escape_scope(s)),
        (Some(s), true) => format!("{board}@{}", escape_scope(s)),
        (None, _) => board.to_string(),
    }
}

/// A tag's board name, separator (`:`, `@` or none) and escaped scope.
fn split_tag(tag: &str) -> (&str, Option<(char, &str)>) {
    match tag.find([':', '@']) {
        Some(i) => {
            let sep = if tag.as_bytes()[i] == b'@' { '@' } else { ':' };
            (&tag[..i], Some((sep, &tag[i + 1..])))
        }
        None => (tag, None),
    }
}

/// Splits a tag back into board name and scope.
pub(crate) fn parse_tag(tag: &str) -> Option<(&str, Option<String>)> {
    match split_tag(tag) {
        (board, Some((_, scope))) => Some((board, Some(unescape_scope(scope)?))),
        (board, None) => Some((board, None)),
    }
}

/// The instance's keys without their view: `{board:scope}` or `{board}@scope`.
fn stem(tag: &str) -> String {
    match split_tag(tag) {
        (board, Some(('@', scope))) => format!("{{{board}}}@{scope}"),
        _ => format!("{{{tag}}}"),
    }
}

/// The content of an instance's hash tag: what Redis Cluster hashes.
pub(crate) fn slot_tag(tag: &str) -> &str {
    match split_tag(tag) {
        (board, Some(('@', _))) => board,
        _ => tag,
    }
}

/// Key of one view of a board instance, e.g. `rankflow:{star_fans:u42}:day:2026-11-21`
/// (`rankflow:{game_heat}@rpg:day:2026-11-21` in the board-slot layout).
pub fn view_key(prefix: &str, tag: &str, view: &str) -> String {
    format!("{prefix}:{}:{view}", stem(tag))
}

/// The instance's offset fences (docs/guarantees.md): `<topic>/<partition>` → offset.
/// The twin of a view key (docs/moderation.md): the same key with `~h`
/// right after the hash tag, so in the same slot, holding the members
/// hidden from the view. Board names have no `~`, and a scope value's
/// `~` stays inside the braces, so a twin never names another view.
pub(crate) fn twin_view_key(prefix: &str, tag: &str, view: &str) -> String {
    let stem = stem(tag);
    match stem.find('}') {
        Some(i) => format!("{prefix}:{}~h{}:{view}", &stem[..=i], &stem[i + 1..]),
        None => format!("{prefix}:{stem}~h:{view}"),
    }
}

/// Present while a union of one of `board`'s views, built by a read, may
/// still be served (it lives `[http] union_cache`): member actions wait
/// for it to go (docs/moderation.md).
pub(crate) fn unions_built_key(prefix: &str, board: &str) -> String {
    format!("{prefix}:unions:{board}")
}

/// The fleet's moderation record (docs/redis-layout.md): generation,
/// hidden members, keyed hashes of erased ones.
pub(crate) fn moderation_key(prefix: &str) -> String {
    format!("{prefix}:moderation")
}

/// Member actions under way (docs/redis-layout.md): a sorted set of the
/// members' keyed hashes, scored by when the entry lapses (ms), so an
/// action whose process died stops counting. The archiver copies no
/// period while an entry is live.
pub(crate) fn actions_key(prefix: &str) -> String {
    format!("{prefix}:moderation:actions")
}

/// The bucket of the member index holding the member whose keyed hash is
/// `hash_hex` (32 hex digits): one of 4,096, by the hash's first three
/// digits, so a batch's registrations take one `HSET` per bucket.
pub(crate) fn member_index_key(prefix: &str, hash_hex: &str) -> String {
    let bucket = hash_hex.get(..3).unwrap_or(hash_hex);
    format!("{prefix}:members:{{{bucket}}}")
}

/// Buckets of rate-check state: a batch's rate decisions take one script
/// call per bucket on a Redis Cluster.
pub(crate) const RATE_BUCKETS: u32 = 256;

/// A member's rate-check state for events of type `event`
/// (docs/redis-layout.md), e.g. `rankflow:rate:{f3}:score:u1`: the hash
/// tag is the member's bucket, the low byte of the 32-bit FNV-1a hash of
/// its id in two hex digits.
pub(crate) fn rate_key(prefix: &str, event: &str, member: &str) -> String {
    // Built by hand: a batch builds one per member, and `format!` with a
    // hex field cost several times as much.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bucket = rate_bucket(member) as usize;
    let mut key = String::with_capacity(prefix.len() + event.len() + member.len() + 12);
    key.push_str(prefix);
    key.push_str(":rate:{");
    key.push(char::from(HEX[(bucket >> 4) & 15]));
    key.push(char::from(HEX[bucket & 15]));
    key.push_str("}:");
    key.push_str(event);
    key.push(':');
    key.push_str(member);
    key
}

/// The bucket of a member's rate-check state: the low byte of the 32-bit
/// FNV-1a hash of its id.
pub(crate) fn rate_bucket(member: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in member.as_bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % RATE_BUCKETS
}

/// The lock of an action on the member whose keyed hash is `hash_hex`.
pub(crate) fn member_lock_key(prefix: &str, hash_hex: &str) -> String {
    format!("{prefix}:member-lock:{hash_hex}")
}

pub(crate) fn fence_key(prefix: &str, tag: &str) -> String {
    view_key(prefix, tag, "off")
}

/// The registry of the scopes that have data in one view of a scoped board
/// (docs/http-api.md, `scope=*`): a sorted set of escaped scope values scored by
/// when they were last registered, under the board's own hash tag, e.g.
/// `rankflow:{game_heat}:scopes:day:2026-11-21`.
pub(crate) fn scope_registry_key(prefix: &str, board: &str, view_id: &str) -> String {
    format!("{prefix}:{{{board}}}:scopes:{view_id}")
}

/// Registry of board instances that have windows, for the background trimmer.
pub(crate) fn window_registry_key(prefix: &str) -> String {
    format!("{prefix}:windows")
}

/// Lock that lets one consumer of the fleet run the background trim at a time.
pub(crate) fn trim_lock_key(prefix: &str) -> String {
    format!("{prefix}:trim-lock")
}

/// Partition positions applied to Redis: `<topic>/<partition>` → offset.
pub(crate) fn positions_key(prefix: &str) -> String {
    format!("{prefix}:positions")
}

/// A shadow board's backfill positions (docs/rebuilds.md), kept like the
/// live ones but apart from them.
pub(crate) fn backfill_positions_key(prefix: &str, board: &str) -> String {
    format!("{prefix}:positions~backfill:{board}")
}

/// A shadow board's backfill progress: `targets` (where the live consumers
/// were when the backfill began) and `done`.
pub(crate) fn backfill_key(prefix: &str, board: &str) -> String {
    format!("{prefix}:backfill:{board}")
}

/// Which board's data serves each promoted board (docs/rebuilds.md).
pub(crate) fn serving_key(prefix: &str) -> String {
    format!("{prefix}:serving")
}

/// Field naming a partition in fences and positions.
pub(crate) fn partition_field(topic: &str, partition: i32) -> String {
    format!("{topic}/{partition}")
}

/// The Redis Cluster slot of every key of an instance: CRC16 (XMODEM) of the
/// hash tag content, modulo 16384.
pub fn hash_slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &b in slot_tag(tag).as_bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Marker of a closed period (docs/history.md), beside its view key
/// (`K:closed`): set by the archiver before it reads the final standings;
/// the apply script finds it and counts every later update `late`.
pub(crate) fn closed_key(view_key: &str) -> String {
    helper(view_key, "closed")
}

/// Sorted set of the periods of archived views that have data, to be
/// archived once they close: member [`due_member`], score the close time in
/// ms. One key for the fleet (not under a board's hash tag), written before
/// the apply call that first touches a period, read by the archivers.
pub(crate) fn archive_due_key(prefix: &str) -> String {
    format!("{prefix}:archive:due")
}

/// The `[archive] grace` (ms) the scores of [`archive_due_key`] were last
/// computed with. An archiver that finds another grace configured
/// computes every close time again, so a changed grace applies to periods
/// written before the change too.
pub(crate) fn archive_grace_key(prefix: &str) -> String {
    format!("{prefix}:archive:grace")
}

/// Member of [`archive_due_key`]: the view key without its prefix,
/// `{<tag>}:<view id>`, e.g. `{star_fans:u42}:week:2026-W47`.
pub fn due_member(tag: &str, view_id: &str) -> String {
    format!("{{{tag}}}:{view_id}")
}

/// Splits a [`due_member`] into its tag and view id.
pub(crate) fn parse_due_member(member: &str) -> Option<(&str, &str)> {
    let rest = member.strip_prefix('{')?;
    let (tag, view_id) = rest.split_once("}:")?;
    Some((tag, view_id))
}

/// The dense-rank index of a view (`K:v`): a sorted set with one entry per
/// distinct value (composite boards: per tuple of all fields), in the
/// board's order, written by the apply script and read by the rank script.
pub(crate) fn dense_key(view_key: &str) -> String {
    helper(view_key, "v")
}

/// Helper key beside a view key (`K:t`, `K:log`...).
pub(crate) fn helper(view_key: &str, suffix: &str) -> String {
    format!("{view_key}:{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rate_keys_carry_the_members_fnv_bucket_in_two_hex_digits() {
        // Buckets worked out by hand (FNV-1a, 32 bits, low byte): "u1" is
        // 0xf3, "m13" is 0x08 (a leading zero).
        assert_eq!(
            rate_key("rankflow", "score", "u1"),
            "rankflow:rate:{f3}:score:u1"
        );
        assert_eq!(rate_key("p", "gift", "m13"), "p:rate:{08}:gift:m13");
        assert_eq!(rate_key("p", "play", ""), "p:rate:{c5}:play:");
    }

    #[test]
    fn keys_have_the_spec_shape() {
        assert_eq!(
            view_key(
                "rankflow",
                &instance_tag("star_fans", Some("u42")),
                "day:2026-11-21"
            ),
            "rankflow:{star_fans:u42}:day:2026-11-21"
        );
        assert_eq!(
            view_key("rankflow", &instance_tag("b", None), "all"),
            "rankflow:{b}:all"
        );
        assert_eq!(instance_tag("b", Some("a{b}:c%d")), "b:a%7Bb%7D%3Ac%25d");
        let heat = instance_tag_in("game_heat", Some("rpg"), true);
        assert_eq!(
            view_key("rankflow", &heat, "day:2026-11-21"),
            "rankflow:{game_heat}@rpg:day:2026-11-21"
        );
        assert_eq!(fence_key("rankflow", &heat), "rankflow:{game_heat}@rpg:off");
        assert_eq!(
            twin_view_key("rankflow", &heat, "day:2026-11-21"),
            "rankflow:{game_heat}~h@rpg:day:2026-11-21"
        );
        assert_eq!(
            twin_view_key("rankflow", &instance_tag("star_fans", Some("u~h")), "all"),
            "rankflow:{star_fans:u~h}~h:all"
        );
        assert_eq!(
            parse_tag("b:x@y").unwrap(),
            ("b", Some("x@y".to_string())),
            "the first separator decides"
        );
    }

    #[test]
    fn due_members_round_trip() {
        let tag = instance_tag("star_fans", Some("a}:b"));
        let m = due_member(&tag, "week:2026-W47");
        assert_eq!(m, "{star_fans:a%7D%3Ab}:week:2026-W47");
        assert_eq!(parse_due_member(&m), Some((tag.as_str(), "week:2026-W47")));
        assert_eq!(parse_due_member("star_fans:week"), None);
    }

    #[test]
    fn slots_match_redis_cluster() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(hash_slot("123456789"), 0x31C3);
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(hash_slot("bar"), 5061);
    }

    #[test]
    fn bad_escapes_are_rejected() {
        assert_eq!(unescape_scope("a%2"), None);
        assert_eq!(unescape_scope("a%41"), None);
        assert_eq!(unescape_scope("a%3Ab").as_deref(), Some("a:b"));
    }

    proptest! {
        #[test]
        fn escaping_round_trips_and_keeps_the_tag_whole(s in "\\PC{0,40}") {
            let e = escape_scope(&s);
            prop_assert!(!e.contains(['{', '}', ':']), "escaped scope {} keeps a delimiter", e);
            let back = unescape_scope(&e);
            prop_assert_eq!(back.as_deref(), Some(s.as_str()));
            let tag = instance_tag("b", Some(&s));
            let (board, scope) = parse_tag(&tag).unwrap();
            prop_assert_eq!(board, "b");
            prop_assert_eq!(scope.as_deref(), Some(s.as_str()));
            // The hash tag is exactly the text between the first `{` and the next `}`.
            let key = view_key("p", &tag, "all");
            let open = key.find('{').unwrap();
            let close = key[open..].find('}').unwrap() + open;
            prop_assert_eq!(&key[open + 1..close], tag.as_str());
            // In the board-slot layout the hash tag is the board alone,
            // and the tag still round-trips.
            let tag = instance_tag_in("b", Some(&s), true);
            prop_assert_eq!(parse_tag(&tag).unwrap(), ("b", Some(s.clone())));
            let key = view_key("p", &tag, "all");
            prop_assert!(key.starts_with("p:{b}@"), "{}", key);
            prop_assert!(key.ends_with(":all"), "{}", key);
            prop_assert_eq!(hash_slot(&tag), hash_slot("b"));
            prop_assert_eq!(key.matches('}').count(), 1, "{}", key);
        }
    }
}
