//! The three event types ([`EventType`]) and what each one's JSON Schema
//! declares: its name, the schema text compiled into the binary, its
//! fields, and which of them are ids or integers. A leaf module: the
//! decodes (`check.rs`, `generic.rs`) and the decoded [`super::Event`]
//! name it without importing `event.rs`.

/// The three event types rules can consume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// `gift`: a viewer sends a gift to a streamer.
    Gift,
    /// `score`: a player finishes a game or a stage.
    Score,
    /// `play`: time spent in a game.
    Play,
}

impl EventType {
    /// Every type, in [`EventType::index`] order.
    pub const ALL: [EventType; 3] = [EventType::Gift, EventType::Score, EventType::Play];

    /// The name events carry in `type` and boards give as `event`.
    pub fn name(self) -> &'static str {
        match self {
            EventType::Gift => "gift",
            EventType::Score => "score",
            EventType::Play => "play",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.name() == s)
    }

    /// 0, 1 or 2: the slot of this type in per-type arrays (the compiled
    /// schemas, the boards indexed by the type they consume).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The schema text, compiled into the binary so validation cannot drift
    /// from the files users read.
    pub fn schema_text(self) -> &'static str {
        match self {
            EventType::Gift => include_str!("../../schemas/gift.schema.json"),
            EventType::Score => include_str!("../../schemas/score.schema.json"),
            EventType::Play => include_str!("../../schemas/play.schema.json"),
        }
    }

    /// Fields declared by this type's schema (for warnings about rules that
    /// read fields producers are not known to send).
    pub(crate) fn declared_fields(self) -> &'static [&'static str] {
        const COMMON: [&str; 3] = ["type", "event_id", "ts"];
        match self {
            EventType::Gift => &[
                COMMON[0],
                COMMON[1],
                COMMON[2],
                "sender_id",
                "receiver_id",
                "gift_id",
                "count",
                "value",
                "room_id",
            ],
            EventType::Score => &[
                COMMON[0],
                COMMON[1],
                COMMON[2],
                "user_id",
                "game_id",
                "points",
                "duration_ms",
                "revives",
                "cleared",
            ],
            EventType::Play => &[
                COMMON[0],
                COMMON[1],
                COMMON[2],
                "user_id",
                "game_id",
                "duration_ms",
            ],
        }
    }

    /// Id fields: an integer there is used as its decimal string.
    pub(super) fn id_fields(self) -> &'static [&'static str] {
        match self {
            EventType::Gift => &["sender_id", "receiver_id", "gift_id", "room_id"],
            EventType::Score | EventType::Play => &["user_id", "game_id"],
        }
    }

    /// Integer fields: `3.0` is an integer to JSON Schema, so it is stored as
    /// one and rules see the same kind whichever way the producer wrote it.
    pub(super) fn integer_fields(self) -> &'static [&'static str] {
        match self {
            EventType::Gift => &["count"],
            EventType::Score => &["points", "duration_ms", "revives"],
            EventType::Play => &["duration_ms"],
        }
    }
}
