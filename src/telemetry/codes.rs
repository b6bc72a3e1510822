//! The bounded vocabularies of rankflow's telemetry: what happened to an
//! event ([`Outcome`]), why a message went to the dead-letter topic
//! ([`DlqReason`]) and what kind of Redis failure occurred
//! ([`RedisErrorKind`]). Each enum holds the one list of its codes: the
//! decoder, the dead-letter headers, the metric labels, the series created
//! at start-up and the docs all take them from here (a test checks
//! docs/metrics.md against these lists).

/// What happened to one message (docs/metrics.md, label `outcome` of
/// `rankflow_events_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// Changed at least one board.
    Applied,
    /// Matched no board (event type or filter).
    Filtered,
    /// Could not be decoded or evaluated: went to the dead-letter topic.
    Invalid,
    /// Every view it would change is past its retention or out of its window.
    Late,
    /// Its member is hidden from every board it would change: kept aside
    /// for a restore (docs/moderation.md).
    Hidden,
    /// Its member was erased from every board it would change: it changed
    /// nothing.
    Erased,
    /// It failed a check (docs/checks.md): it went to the quarantine topic
    /// and changed nothing.
    Quarantined,
}

impl Outcome {
    pub(crate) const ALL: [Outcome; 7] = [
        Outcome::Applied,
        Outcome::Filtered,
        Outcome::Invalid,
        Outcome::Late,
        Outcome::Hidden,
        Outcome::Erased,
        Outcome::Quarantined,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Filtered => "filtered",
            Outcome::Invalid => "invalid",
            Outcome::Late => "late",
            Outcome::Hidden => "hidden",
            Outcome::Erased => "erased",
            Outcome::Quarantined => "quarantined",
        }
    }
}

/// Why a message is sent to the dead-letter topic: the `rankflow-error`
/// header and the `reason` label of `rankflow_dlq_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DlqReason {
    /// `too_large`: the message is larger than `kafka.max_event_bytes`.
    TooLarge,
    /// `invalid_utf8`: the message is not UTF-8.
    InvalidUtf8,
    /// `invalid_json`: the message is not JSON (or is nested too deeply).
    InvalidJson,
    /// `not_object`: the message is JSON, but not an object.
    NotObject,
    /// `unknown_type`: its `type` is not gift, score or play.
    UnknownType,
    /// `schema`: it fails its type's JSON Schema (also a missing `type`).
    Schema,
    /// `future_ts`: its `ts` is more than `max_future_skew` ahead of the clock.
    FutureTs,
    /// `expression`: a rule of a board that consumes it failed on it.
    Expression,
}

impl DlqReason {
    pub(crate) const ALL: [DlqReason; 8] = [
        DlqReason::TooLarge,
        DlqReason::InvalidUtf8,
        DlqReason::InvalidJson,
        DlqReason::NotObject,
        DlqReason::UnknownType,
        DlqReason::Schema,
        DlqReason::FutureTs,
        DlqReason::Expression,
    ];

    /// The stable code (header value, metric label).
    pub fn code(self) -> &'static str {
        match self {
            DlqReason::TooLarge => "too_large",
            DlqReason::InvalidUtf8 => "invalid_utf8",
            DlqReason::InvalidJson => "invalid_json",
            DlqReason::NotObject => "not_object",
            DlqReason::UnknownType => "unknown_type",
            DlqReason::Schema => "schema",
            DlqReason::FutureTs => "future_ts",
            DlqReason::Expression => "expression",
        }
    }

    #[cfg(test)]
    pub(crate) fn from_code(code: &str) -> Option<DlqReason> {
        DlqReason::ALL.into_iter().find(|r| r.code() == code)
    }
}

impl std::fmt::Display for DlqReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// A Redis failure's kind: the `kind` label of `rankflow_redis_errors_total`
/// and whether waiting can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RedisErrorKind {
    /// Connection refused, reset or dropped.
    Io,
    /// No answer within `redis.response_timeout_ms`.
    Timeout,
    /// Redis no longer had rankflow's scripts: it restarted or failed over.
    Noscript,
    /// `WAIT` saw fewer replicas than `redis.wait_replicas`.
    Replication,
    /// `LOADING`: Redis is loading its data set.
    Loading,
    /// `BUSY`: a script is running too long.
    Busy,
    /// `TRYAGAIN`: a slot is migrating (cluster).
    Tryagain,
    /// `MASTERDOWN`: a replica lost its primary.
    Masterdown,
    /// `CLUSTERDOWN`: the cluster is down.
    Clusterdown,
    /// `OOM`: Redis reached `maxmemory`.
    Oom,
    /// Authentication or permission refused (`NOAUTH`, `WRONGPASS`, `NOPERM`).
    Auth,
    /// `WRONGTYPE`: a key under the prefix is not of the type rankflow
    /// wrote; another program writes there. Not retriable.
    Wrongtype,
    /// Another error reply from the server.
    Server,
    /// A reply rankflow did not expect.
    Protocol,
    /// Another client-side failure.
    Client,
}

impl RedisErrorKind {
    pub(crate) const ALL: [RedisErrorKind; 15] = [
        RedisErrorKind::Io,
        RedisErrorKind::Timeout,
        RedisErrorKind::Noscript,
        RedisErrorKind::Replication,
        RedisErrorKind::Loading,
        RedisErrorKind::Busy,
        RedisErrorKind::Tryagain,
        RedisErrorKind::Masterdown,
        RedisErrorKind::Clusterdown,
        RedisErrorKind::Oom,
        RedisErrorKind::Auth,
        RedisErrorKind::Wrongtype,
        RedisErrorKind::Server,
        RedisErrorKind::Protocol,
        RedisErrorKind::Client,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            RedisErrorKind::Io => "io",
            RedisErrorKind::Timeout => "timeout",
            RedisErrorKind::Noscript => "noscript",
            RedisErrorKind::Replication => "replication",
            RedisErrorKind::Loading => "loading",
            RedisErrorKind::Busy => "busy",
            RedisErrorKind::Tryagain => "tryagain",
            RedisErrorKind::Masterdown => "masterdown",
            RedisErrorKind::Clusterdown => "clusterdown",
            RedisErrorKind::Oom => "oom",
            RedisErrorKind::Auth => "auth",
            RedisErrorKind::Wrongtype => "wrongtype",
            RedisErrorKind::Server => "server",
            RedisErrorKind::Protocol => "protocol",
            RedisErrorKind::Client => "client",
        }
    }

    /// The kind of an error reply, from its first word.
    pub(crate) fn of_reply(message: &str) -> RedisErrorKind {
        match message.split_whitespace().next().unwrap_or("") {
            "LOADING" => RedisErrorKind::Loading,
            "BUSY" => RedisErrorKind::Busy,
            "TRYAGAIN" => RedisErrorKind::Tryagain,
            "MASTERDOWN" => RedisErrorKind::Masterdown,
            "CLUSTERDOWN" => RedisErrorKind::Clusterdown,
            "OOM" => RedisErrorKind::Oom,
            "NOSCRIPT" => RedisErrorKind::Noscript,
            "NOAUTH" | "WRONGPASS" | "NOPERM" => RedisErrorKind::Auth,
            "WRONGTYPE" => RedisErrorKind::Wrongtype,
            _ => RedisErrorKind::Server,
        }
    }

    /// Whether trying again later can succeed without anyone changing
    /// Redis or rankflow's configuration. Writes are retried either way
    /// (losing an event is not an option); this decides how loudly.
    pub(crate) fn is_retriable(self) -> bool {
        !matches!(
            self,
            RedisErrorKind::Auth
                | RedisErrorKind::Wrongtype
                | RedisErrorKind::Server
                | RedisErrorKind::Protocol
                | RedisErrorKind::Client
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for r in DlqReason::ALL {
            assert!(seen.insert(r.code()), "{r:?}");
            assert_eq!(DlqReason::from_code(r.code()), Some(r));
        }
        let mut seen = std::collections::HashSet::new();
        for k in RedisErrorKind::ALL {
            assert!(seen.insert(k.label()), "{k:?}");
        }
    }

    #[test]
    fn reply_kinds_follow_the_first_word() {
        assert_eq!(
            RedisErrorKind::of_reply("BUSY Redis is busy running a script"),
            RedisErrorKind::Busy
        );
        assert_eq!(
            RedisErrorKind::of_reply("NOPERM this user has no permissions"),
            RedisErrorKind::Auth
        );
        assert_eq!(RedisErrorKind::of_reply("ERR nope"), RedisErrorKind::Server);
        assert!(!RedisErrorKind::Auth.is_retriable());
        assert!(RedisErrorKind::Loading.is_retriable());
    }

    /// docs/metrics.md's tables list every code.
    #[test]
    fn the_metrics_doc_lists_every_code() {
        let doc = include_str!("../../docs/metrics.md");
        for r in DlqReason::ALL {
            assert!(
                doc.contains(&format!("| `{}` |", r.code())),
                "docs/metrics.md does not document dead-letter reason `{}`",
                r.code()
            );
        }
        for k in RedisErrorKind::ALL {
            assert!(
                doc.contains(&format!("| `{}` |", k.label())),
                "docs/metrics.md does not document Redis error kind `{}`",
                k.label()
            );
        }
    }
}
