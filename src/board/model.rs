//! Compiled boards: the `[[board]]` tables of the config turned, once at
//! start-up, into expressions, views (periods with retention, windows),
//! aggregate, tie-break and timezone. Every mistake is reported with the
//! board's name and number and the field (and column, for expressions).

use std::collections::{HashMap, HashSet};

use chrono_tz::Tz;

use super::duration::{Span, add_span, parse_span};
use super::layout::{FieldOrder, Layout, MAX_FIELDS};
use super::period::{PeriodKind, period_of};
// Re-exported: callers outside the folder name the enums through `model` too.
pub(crate) use super::ranking::{Aggregate, Order, TieBreak};
use super::score::{MAX_EXACT, MAX_TIE_TS, TieKey};
use super::shadow::{self, Outline, Shadow};
use super::spec::{BoardError, BoardSpec, FieldSpec, Globals};
use super::window::WindowSpec;
use crate::event::EventType;
use crate::expr::{Expect, Program};

/// Retention used when a board does not set one for a period kind.
pub(crate) const DEFAULT_RETENTION: [(PeriodKind, &str); 5] = [
    (PeriodKind::Hour, "2d"),
    (PeriodKind::Day, "35d"),
    (PeriodKind::Week, "10w"),
    (PeriodKind::Month, "13mo"),
    (PeriodKind::Year, "3y"),
];

/// One view of a board: a calendar period or a sliding window.
#[derive(Debug, Clone)]
pub(crate) enum ViewSpec {
    Period {
        kind: PeriodKind,
        /// How long after its end a period's key lives; `None` for `all`.
        retention: Option<Span>,
        /// For an archived view (docs/history.md): the grace in ms after a
        /// period's end at which it closes. Its keys then carry no expiry
        /// until the archiver has copied them.
        close_after: Option<i64>,
    },
    Window(WindowSpec),
}

impl ViewSpec {
    /// The view as named in the API and CLI: `day`, `all`, `win:3h`.
    pub(crate) fn name(&self) -> String {
        match self {
            ViewSpec::Period { kind, .. } => kind.name().to_string(),
            ViewSpec::Window(w) => w.view(),
        }
    }
}

/// A compiled board.
#[derive(Debug)]
pub struct Board {
    /// The board's `name` (docs/configuration.md): unique among boards, the
    /// `{board}` of the API's paths and part of every key.
    pub name: String,
    pub(crate) event: EventType,
    pub(crate) filter: Option<Program>,
    pub(crate) member: Program,
    pub(crate) score: Program,
    pub(crate) scope: Option<Program>,
    pub(crate) views: Vec<ViewSpec>,
    pub(crate) aggregate: Aggregate,
    pub(crate) tie: TieBreak,
    pub(crate) order: Order,
    pub(crate) tie_key: TieKey,
    pub(crate) tz: Tz,
    /// Set for a composite board (`order_by`, docs/score-encoding.md). Then `score`,
    /// `aggregate` and `order` are those of its first field.
    pub(crate) composite: Option<Composite>,
    /// Board option `dense_ranks`: views keep the dense-rank index `K:v`
    /// on the write path. Default: on for composite boards only. The index
    /// costs the write path 2–9 µs of Redis per event at 2,000-event
    /// batches, while a dense read without it walks about 4 µs
    /// per distinct value above the member (BENCHMARKS.md, "The dense-rank
    /// index: write cost against read cost"), so it pays only where clients
    /// read dense ranks deep and often; composite boards have no walk.
    pub(crate) dense_ranks: bool,
    /// Board option `scope_slot = "board"`: every scope of the board lives
    /// in the board's cluster slot (`{prefix}:{board}@<scope>:<view>`).
    pub(crate) board_slot: bool,
    /// Board option `scope_registry`: scope values kept per view for
    /// `scope=*` (0 for unscoped boards, or when turned off).
    pub(crate) scope_registry: u64,
    /// Set for a shadow board (`shadow_of`, docs/configuration.md).
    pub(crate) shadow: Option<Shadow>,
    /// The name in the board's Redis keys (docs/redis-layout.md): its
    /// `stored_as`, or else its name. Differs from `name` for a board that
    /// took over the keys of the shadow promoted in its place
    /// (docs/rebuilds.md, "Making it permanent").
    pub(crate) stored: String,
}

/// Periods of one kind a moderation action visits at most (an hourly
/// board kept a year is 8,760).
pub(crate) const MAX_LIVE_PERIODS: usize = 10_000;

/// Scope values a scoped board's registry keeps per view by default.
pub(crate) const DEFAULT_SCOPE_REGISTRY: u64 = 10_000;

/// One compiled `order_by` field.
#[derive(Debug)]
pub(crate) struct CompiledField {
    pub(crate) score: Program,
    pub(crate) filter: Option<Program>,
}

/// A composite board's fields: expressions, and the encoding of their
/// values (names, orders, aggregates) in the sorted set.
#[derive(Debug)]
pub(crate) struct Composite {
    pub(crate) fields: Vec<CompiledField>,
    pub(crate) layout: Layout,
}

impl Board {
    /// Whether views keep a per-member time hash (`K:t`). Composite boards
    /// keep their times in their field hash (`K:f`) instead.
    pub(crate) fn needs_time(&self) -> bool {
        self.composite.is_none()
            && (self.tie != TieBreak::None || self.aggregate == Aggregate::Last)
    }

    pub(crate) fn view(&self, name: &str) -> Option<&ViewSpec> {
        self.views.iter().find(|v| v.name() == name)
    }

    /// The tag of this board's instance for `scope` (see [`super::keys`]).
    pub(crate) fn tag(&self, scope: Option<&str>) -> String {
        super::keys::instance_tag_in(&self.stored, scope, self.board_slot)
    }

    /// Every concrete view of an instance that may hold data at `now`
    /// (ms), with `skew` (ms) of events from the future: `all`, each
    /// window (id, `Some(length)`), and per period kind every period from
    /// the one `skew` ahead back to the oldest whose retention has not
    /// ended (at most [`MAX_LIVE_PERIODS`] per kind). What a moderation
    /// action visits instead of scanning for keys.
    pub(crate) fn live_views(&self, now: i64, skew: i64) -> Vec<(String, Option<i64>)> {
        let mut out = Vec::new();
        for spec in &self.views {
            match spec {
                ViewSpec::Window(w) => out.push((w.view(), Some(w.length_ms))),
                ViewSpec::Period {
                    kind: PeriodKind::All,
                    ..
                } => out.push(("all".to_string(), None)),
                ViewSpec::Period {
                    kind, retention, ..
                } => {
                    let mut p = period_of(*kind, now.saturating_add(skew), self.tz);
                    for _ in 0..MAX_LIVE_PERIODS {
                        let Some(end) = p.end_ms else { break };
                        let alive = match retention {
                            Some(r) => add_span(end, r, self.tz) > now,
                            None => true,
                        };
                        if !alive {
                            break;
                        }
                        out.push((p.view(), None));
                        p = period_of(*kind, p.start_ms - 1, self.tz);
                    }
                }
            }
        }
        out
    }

    pub(crate) fn has_windows(&self) -> bool {
        self.views.iter().any(|v| matches!(v, ViewSpec::Window(_)))
    }

    /// Whether any view lives forever (`all`, or no retention): then the
    /// instance's fences must too.
    pub(crate) fn has_unbounded_view(&self) -> bool {
        self.views.iter().any(|v| {
            matches!(
                v,
                ViewSpec::Period {
                    retention: None,
                    ..
                }
            )
        })
    }

    /// The exact value range this board guarantees, for `rankflow check`.
    pub(crate) fn range_description(&self) -> String {
        if let Some(c) = &self.composite {
            let range = composite_range(c, self.tie);
            if !self.has_windows() {
                return range;
            }
            return format!("{range}; {}", c.layout.window_description());
        }
        let values = format!(
            "integer values exact in [-2^53, 2^53] = ±{}; larger totals are refused and counted, never rounded",
            MAX_EXACT as i64
        );
        match self.tie {
            TieBreak::None => values,
            _ => format!(
                "{values}; ties resolved to 1 ms for event times 1970-01-01 .. {} (tie key separate from the score)",
                chrono::DateTime::from_timestamp_millis(MAX_TIE_TS)
                    .map(|d| d
                        .format("%Y-%m-%d")
                        .to_string()
                        .trim_start_matches('+')
                        .to_string())
                    .unwrap_or_default()
            ),
        }
    }
}

fn composite_range(c: &Composite, tie: TieBreak) -> String {
    let fields: Vec<String> = c
        .layout
        .fields
        .iter()
        .map(|f| {
            format!(
                "{} ({:?} {:?}): integers exact in [-2^53, 2^53]",
                f.name, f.aggregate, f.order
            )
            .to_lowercase()
        })
        .collect();
    let tie = match tie {
        TieBreak::None => "then member".to_string(),
        t => format!(
            "then tie_break {} (to 1 ms), then member",
            format!("{t:?}").to_lowercase()
        ),
    };
    format!(
        "composite, ranked by {}; {tie}; a field without a value ranks after every value; non-integer or larger values are refused, never rounded",
        fields.join(", then ")
    )
}

/// All boards of a config, indexed by the event type they consume.
#[derive(Debug)]
pub struct BoardSet {
    /// The boards in the configuration's order: the order `/v1/boards` and
    /// `rankflow check` list them in.
    pub boards: Vec<Board>,
    by_event: [Vec<usize>; 3],
    pub(crate) key_prefix: String,
    pub(crate) future_skew_ms: i64,
}

impl BoardSet {
    /// Compiles the `[[board]]` definitions with the global settings they
    /// depend on; every mistake names the board and field.
    pub(crate) fn compile(specs: &[BoardSpec], globals: &Globals) -> Result<BoardSet, BoardError> {
        let prefix = &globals.key_prefix;
        if prefix.is_empty() || prefix.contains(['{', '}']) {
            return Err(BoardError::KeyPrefix(prefix.clone()));
        }
        if specs.is_empty() {
            return Err(BoardError::NoBoards);
        }
        let mut boards = Vec::with_capacity(specs.len());
        let mut names = HashSet::new();
        for (i, b) in specs.iter().enumerate() {
            let board = compile_board(i + 1, b, globals)?;
            if !names.insert(board.name.clone()) {
                return Err(BoardError::invalid(
                    location(i + 1, &b.name, "name"),
                    "another board already has this name",
                ));
            }
            boards.push(board);
        }
        let outlines: Vec<Outline<'_>> = boards
            .iter()
            .map(|b| Outline {
                name: &b.name,
                shadow: b.shadow.as_ref(),
                scoped: b.scope.is_some(),
                views: b.views.iter().map(ViewSpec::name).collect(),
            })
            .collect();
        shadow::check_all(&outlines, &|i, field| {
            location(i + 1, &specs[i].name, field)
        })?;
        check_stored(&boards, specs)?;
        let mut by_event: [Vec<usize>; 3] = Default::default();
        for (i, b) in boards.iter().enumerate() {
            by_event[b.event.index()].push(i);
        }
        Ok(BoardSet {
            boards,
            by_event,
            key_prefix: prefix.clone(),
            future_skew_ms: globals.future_skew_ms,
        })
    }

    /// Boards that consume `kind`, in config order.
    pub(crate) fn for_event(&self, kind: EventType) -> &[usize] {
        &self.by_event[kind.index()]
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Board> {
        self.boards.iter().find(|b| b.name == name)
    }

    /// The board whose keys carry `stored` ([`Board::stored`]), with its
    /// index: what a key's hash tag names.
    pub(crate) fn by_stored(&self, stored: &str) -> Option<(usize, &Board)> {
        self.boards
            .iter()
            .enumerate()
            .find(|(_, b)| b.stored == stored)
    }

    /// The shadow boards, in configuration order.
    pub(crate) fn shadows(&self) -> impl Iterator<Item = &Board> {
        self.boards.iter().filter(|b| b.shadow.is_some())
    }

    /// The same boards, with only those that `consumes` selects taking
    /// events. Every board stays (indices, keys and reads are unchanged):
    /// the live consumers apply events to the boards that are not shadows,
    /// and each shadow's backfill consumer to its shadow alone.
    pub(crate) fn consuming(mut self, consumes: impl Fn(&Board) -> bool) -> BoardSet {
        let boards = &self.boards;
        for list in &mut self.by_event {
            list.retain(|&i| consumes(&boards[i]));
        }
        self
    }
}

/// No two boards may write the same keys: a board's `stored_as` names no
/// other board, and no earlier board's keys.
fn check_stored(boards: &[Board], specs: &[BoardSpec]) -> Result<(), BoardError> {
    for (i, b) in boards.iter().enumerate() {
        let clash = boards
            .iter()
            .enumerate()
            .find(|(j, o)| (*j < i && o.stored == b.stored) || (*j != i && o.name == b.stored));
        if let (Some((_, o)), Some(_)) = (clash, &specs[i].stored_as) {
            return Err(BoardError::invalid(
                location(i + 1, &b.name, "stored_as"),
                format!(
                    "`{}` names the keys of board `{}`: two boards cannot share keys",
                    b.stored, o.name
                ),
            ));
        }
    }
    Ok(())
}

fn location(number: usize, name: &str, field: &str) -> String {
    format!("board `{name}` (#{number}), field `{field}`")
}

/// Parses an IANA zone name; the message gives examples.
pub(crate) fn parse_tz(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>()
        .map_err(|_| format!("unknown IANA time zone {name:?} (e.g. \"UTC\", \"Asia/Shanghai\")"))
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= 64
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

fn compile_board(number: usize, b: &BoardSpec, globals: &Globals) -> Result<Board, BoardError> {
    let at = |field: &str| location(number, &b.name, field);
    if !valid_name(&b.name) {
        return Err(BoardError::invalid(
            at("name"),
            "must match ^[a-z][a-z0-9_]{0,63}$",
        ));
    }
    let event = EventType::parse(&b.event).ok_or_else(|| {
        BoardError::invalid(
            at("event"),
            format!("unknown event type {:?} (gift, score or play)", b.event),
        )
    })?;
    let expr = |field: &str, src: &str, expect: Expect| {
        Program::compile(src, expect).map_err(|e| {
            BoardError::invalid(
                at(field),
                format!("{} at column {} of {src:?}", e.message, e.position),
            )
        })
    };
    let filter = b
        .filter
        .as_deref()
        .map(|s| expr("filter", s, Expect::Bool))
        .transpose()?;
    let member = expr("member", &b.member, Expect::String)?;
    let composite = match &b.order_by {
        Some(fields) => Some(compile_composite(number, b, fields)?),
        None => None,
    };
    let score_src = score_source(number, b)?;
    let score = expr("score", score_src, Expect::Number)?;
    let scope = b
        .scope
        .as_deref()
        .map(|s| expr("scope", s, Expect::String))
        .transpose()?;
    let tz = match &b.timezone {
        Some(name) => parse_tz(name).map_err(|m| BoardError::invalid(at("timezone"), m))?,
        None => globals.timezone,
    };

    let archived = archived_periods(number, b, globals.archive_grace_ms)?;
    let views = compile_views(number, b, &archived)?;
    let (aggregate, order) = aggregate_and_order(b, composite.as_ref());
    let (board_slot, scope_registry) = scope_options(number, b)?;
    let shadow = shadow::own(b, &at)?;
    let stored = stored_name(b, &at)?;
    let dense_ranks = b.dense_ranks.unwrap_or(composite.is_some());
    Ok(Board {
        name: b.name.clone(),
        event,
        filter,
        member,
        score,
        scope,
        views,
        aggregate,
        tie: b.tie_break,
        order,
        tie_key: TieKey::for_board(b.tie_break, order),
        tz,
        composite: composite.map(|mut c| {
            c.layout.tie_key = TieKey::for_board(b.tie_break, order);
            c
        }),
        dense_ranks,
        board_slot,
        scope_registry,
        shadow,
        stored,
    })
}

/// The name in the board's keys: `stored_as`, which a shadow cannot have
/// (its backfill keeps its own keys), or its name.
fn stored_name(b: &BoardSpec, at: &dyn Fn(&str) -> String) -> Result<String, BoardError> {
    let Some(stored) = &b.stored_as else {
        return Ok(b.name.clone());
    };
    if !valid_name(stored) {
        return Err(BoardError::invalid(
            at("stored_as"),
            "must match ^[a-z][a-z0-9_]{0,63}$, like a board's name",
        ));
    }
    if b.shadow_of.is_some() {
        return Err(BoardError::invalid(
            at("stored_as"),
            "a shadow keeps its own keys; `stored_as` goes on the board that takes over a promoted shadow's keys (docs/rebuilds.md)",
        ));
    }
    Ok(stored.clone())
}

/// The scope layout options of a board: `(board_slot, scope_registry)`.
/// Both only mean something for a scoped board.
fn scope_options(number: usize, b: &BoardSpec) -> Result<(bool, u64), BoardError> {
    let at = |field: &str| location(number, &b.name, field);
    let scoped = b.scope.is_some();
    let board_slot = match b.scope_slot.as_deref() {
        None | Some("scope") => false,
        Some("board") => true,
        Some(other) => {
            return Err(BoardError::invalid(
                at("scope_slot"),
                format!(
                    "must be \"scope\" (each scope in its own cluster slot) or \"board\" (every scope in the board's slot), not {other:?}"
                ),
            ));
        }
    };
    if !scoped && (b.scope_slot.is_some() || b.scope_registry.is_some()) {
        let field = if b.scope_slot.is_some() {
            "scope_slot"
        } else {
            "scope_registry"
        };
        return Err(BoardError::invalid(
            at(field),
            "applies to scoped boards only: this board has no `scope`",
        ));
    }
    let registry = match (scoped, b.scope_registry) {
        (false, _) => 0,
        (true, None) => DEFAULT_SCOPE_REGISTRY,
        (true, Some(n)) if n <= 1_000_000 => n,
        (true, Some(n)) => {
            return Err(BoardError::invalid(
                at("scope_registry"),
                format!("{n} is over the limit of 1000000 scope values per view"),
            ));
        }
    };
    Ok((board_slot, registry))
}

/// The board's `score` expression: its own, or for a composite board its
/// first field's (which gives the sorted-set score). Exactly one of `score`
/// and `order_by` must be given.
fn score_source(number: usize, b: &BoardSpec) -> Result<&str, BoardError> {
    let at = |field: &str| location(number, &b.name, field);
    match (&b.score, &b.order_by) {
        (Some(s), None) => Ok(s),
        (None, Some(fields)) => Ok(fields
            .first()
            .and_then(|f| f.score.as_deref())
            .unwrap_or_default()),
        (Some(_), Some(_)) => Err(BoardError::invalid(
            at("score"),
            "is given as well as `order_by`: a composite board ranks by its fields; drop `score`",
        )),
        (None, None) => Err(BoardError::invalid(
            at("score"),
            "is missing: give `score`, or `order_by` for a composite board",
        )),
    }
}

/// The board's aggregate and rank order: as written (a `min` board ranks
/// ascending unless told otherwise), or a composite board's first field's.
fn aggregate_and_order(b: &BoardSpec, composite: Option<&Composite>) -> (Aggregate, Order) {
    if let Some(c) = composite {
        return (c.layout.fields[0].aggregate, c.layout.direction());
    }
    let aggregate = b.aggregate.unwrap_or_default();
    let order = b.order.unwrap_or(match aggregate {
        Aggregate::Min => Order::Asc,
        _ => Order::Desc,
    });
    (aggregate, order)
}

/// Whether `name` can name a composite field (and a JSON key).
fn valid_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= 32
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

/// Compiles `order_by`: 1..=4 fields, named once, each with its expression,
/// optional filter, aggregate and order. Settings that live per field are
/// refused at the board level, and so are the views composite boards do
/// not support yet.
fn compile_composite(
    number: usize,
    b: &BoardSpec,
    fields: &[FieldSpec],
) -> Result<Composite, BoardError> {
    let at = |field: &str| location(number, &b.name, field);
    if fields.is_empty() || fields.len() > MAX_FIELDS {
        return Err(BoardError::invalid(
            at("order_by"),
            format!(
                "has {} fields; a composite board ranks by 1 to {MAX_FIELDS}",
                fields.len()
            ),
        ));
    }
    for (key, given) in [
        ("aggregate", b.aggregate.is_some()),
        ("order", b.order.is_some()),
    ] {
        if given {
            return Err(BoardError::invalid(
                at(key),
                "is set per field on a composite board: move it into each `order_by` entry",
            ));
        }
    }
    let mut compiled = Vec::with_capacity(fields.len());
    let mut orders = Vec::with_capacity(fields.len());
    for (i, f) in fields.iter().enumerate() {
        let (c, o) = compile_field(&format!("{}[{i}]", at("order_by")), f)?;
        if orders.iter().any(|p: &FieldOrder| p.name == o.name) {
            return Err(BoardError::invalid(
                format!("{}[{i}].field", at("order_by")),
                format!("{:?} names another field as well", o.name),
            ));
        }
        compiled.push(c);
        orders.push(o);
    }
    Ok(Composite {
        fields: compiled,
        layout: Layout {
            fields: orders,
            tie_key: TieKey::None,
        },
    })
}

/// An expression that reads no attribute gives one value for every event:
/// one a composite field cannot hold would make every event invalid, so
/// `check` refuses it at `at`.
fn refuse_unholdable_constant(at: &str, score: &Program) -> Result<(), BoardError> {
    if !score.fields().is_empty() {
        return Ok(());
    }
    let why = match score.eval_number(&serde_json::Map::new()) {
        Ok(v) if super::layout::in_range(v) => return Ok(()),
        Ok(v) => format!("always gives {v}"),
        Err(e) => format!("always fails ({e})"),
    };
    Err(BoardError::invalid(
        at.to_string(),
        format!("{why}, which a composite field cannot hold: fields are integers in [-2^53, 2^53]"),
    ))
}

/// One `order_by` entry; `at` locates it (`board ... field `order_by`[i]`).
fn compile_field(at: &str, f: &FieldSpec) -> Result<(CompiledField, FieldOrder), BoardError> {
    let key = |k: &str| format!("{at}.{k}");
    if let Some(k) = f.unknown.keys().next() {
        return Err(BoardError::invalid(
            key(k),
            "unknown key (field, score, filter, aggregate, order)",
        ));
    }
    let name = f
        .field
        .clone()
        .ok_or_else(|| BoardError::invalid(key("field"), "is missing"))?;
    if !valid_field_name(&name) {
        return Err(BoardError::invalid(
            key("field"),
            format!("{name:?} must match ^[a-z][a-z0-9_]{{0,31}}$"),
        ));
    }
    let expr = |k: &str, src: &str, expect: Expect| {
        Program::compile(src, expect).map_err(|e| {
            BoardError::invalid(
                key(k),
                format!("{} at column {} of {src:?}", e.message, e.position),
            )
        })
    };
    let score_src = f
        .score
        .as_deref()
        .ok_or_else(|| BoardError::invalid(key("score"), "is missing"))?;
    let score = expr("score", score_src, Expect::Number)?;
    refuse_unholdable_constant(&key("score"), &score)?;
    let filter = f
        .filter
        .as_deref()
        .map(|s| expr("filter", s, Expect::Bool))
        .transpose()?;
    let aggregate = match f.aggregate.as_deref() {
        None | Some("sum") => Aggregate::Sum,
        Some("max") => Aggregate::Max,
        Some("min") => Aggregate::Min,
        Some("last") => Aggregate::Last,
        Some(other) => {
            return Err(BoardError::invalid(
                key("aggregate"),
                format!("unknown aggregate {other:?} (sum, max, min or last)"),
            ));
        }
    };
    let order = match f.order.as_deref() {
        None if aggregate == Aggregate::Min => Order::Asc,
        None | Some("desc") => Order::Desc,
        Some("asc") => Order::Asc,
        Some(other) => {
            return Err(BoardError::invalid(
                key("order"),
                format!("unknown order {other:?} (desc or asc)"),
            ));
        }
    };
    Ok((
        CompiledField { score, filter },
        FieldOrder {
            name,
            order,
            aggregate,
        },
    ))
}

/// The board's `archive` list: each archived period kind with the grace
/// after which its periods close. Only periods the board keeps, never
/// `all` (it never closes), and only with an `[archive] url`.
fn archived_periods(
    number: usize,
    b: &BoardSpec,
    grace: Option<i64>,
) -> Result<HashMap<PeriodKind, i64>, BoardError> {
    let mut out = HashMap::new();
    for (i, p) in b.archive.iter().enumerate() {
        let at = format!("{}[{i}]", location(number, &b.name, "archive"));
        let Some(grace) = grace else {
            return Err(BoardError::invalid(
                at,
                "archives a period but [archive] url is not set",
            ));
        };
        let kind = match PeriodKind::parse(p) {
            Some(PeriodKind::All) => {
                return Err(BoardError::invalid(
                    at,
                    "\"all\" never closes, so it cannot be archived",
                ));
            }
            Some(k) if b.periods.iter().any(|q| PeriodKind::parse(q) == Some(k)) => k,
            Some(_) => {
                return Err(BoardError::invalid(
                    at,
                    format!("period {p:?} is not in the board's periods"),
                ));
            }
            None => {
                return Err(BoardError::invalid(
                    at,
                    format!("unknown period {p:?} (hour, day, week, month or year)"),
                ));
            }
        };
        if out.insert(kind, grace).is_some() {
            return Err(BoardError::invalid(
                at,
                format!("period {p:?} is listed twice"),
            ));
        }
    }
    Ok(out)
}

/// The board's period views, with retention and, if archived, the grace
/// after which their periods close; names go into `seen`.
fn period_views(
    number: usize,
    b: &BoardSpec,
    archived: &HashMap<PeriodKind, i64>,
    seen: &mut HashSet<String>,
) -> Result<Vec<ViewSpec>, BoardError> {
    let at = |field: &str| location(number, &b.name, field);
    let mut views = Vec::new();
    for (i, p) in b.periods.iter().enumerate() {
        let kind = PeriodKind::parse(p).ok_or_else(|| {
            BoardError::invalid(
                format!("{}[{i}]", at("periods")),
                format!("unknown period {p:?} (hour, day, week, month, year, all)"),
            )
        })?;
        if !seen.insert(kind.name().to_string()) {
            return Err(BoardError::invalid(
                format!("{}[{i}]", at("periods")),
                format!("period {p:?} is listed twice"),
            ));
        }
        let retention = if kind == PeriodKind::All {
            None
        } else {
            let text = b
                .retention
                .get(kind.name())
                .map(String::as_str)
                .or_else(|| {
                    DEFAULT_RETENTION
                        .iter()
                        .find(|(k, _)| *k == kind)
                        .map(|(_, t)| *t)
                })
                .unwrap_or("35d");
            Some(parse_span(text).map_err(|e| {
                BoardError::invalid(
                    format!("{}.{}", at("retention"), kind.name()),
                    e.to_string(),
                )
            })?)
        };
        let close_after = archived.get(&kind).copied();
        if let (Some(grace), Some(r)) = (close_after, &retention)
            && r.min_ms() < grace
        {
            return Err(BoardError::invalid(
                format!("{}.{}", at("retention"), kind.name()),
                format!(
                    "is shorter than [archive] grace ({}): a period must not expire before it closes",
                    Span::Fixed { ms: grace }
                ),
            ));
        }
        views.push(ViewSpec::Period {
            kind,
            retention,
            close_after,
        });
    }
    Ok(views)
}

/// The board's views: its periods (with retention) and windows, each
/// named once.
fn compile_views(
    number: usize,
    b: &BoardSpec,
    archived: &HashMap<PeriodKind, i64>,
) -> Result<Vec<ViewSpec>, BoardError> {
    let at = |field: &str| location(number, &b.name, field);
    for key in b.retention.keys() {
        match PeriodKind::parse(key) {
            Some(PeriodKind::All) | None => {
                return Err(BoardError::invalid(
                    at("retention"),
                    format!(
                        "unknown key {key:?}: retention is set for hour, day, week, month or year"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    let mut seen = HashSet::new();
    let mut views = period_views(number, b, archived, &mut seen)?;
    for (i, w) in b.windows.iter().enumerate() {
        let spec = WindowSpec::parse(w)
            .map_err(|e| BoardError::invalid(format!("{}[{i}]", at("windows")), e.to_string()))?;
        if !seen.insert(spec.view()) {
            return Err(BoardError::invalid(
                format!("{}[{i}]", at("windows")),
                format!(
                    "another window of this board has length {} (views are named win:<length>)",
                    spec.label
                ),
            ));
        }
        views.push(ViewSpec::Window(spec));
    }
    if views.is_empty() {
        return Err(BoardError::invalid(
            at("periods"),
            "the board has no views: list at least one period or window",
        ));
    }
    Ok(views)
}

/// Compiles `[[board]]` tables written in TOML, in UTC with the prefix
/// `rankflow`, and `archive_grace_ms` as `[archive]` would give it (for
/// the board tests of this folder).
#[cfg(test)]
pub(crate) fn compile_toml(
    boards: &str,
    archive_grace_ms: Option<i64>,
) -> Result<BoardSet, BoardError> {
    #[derive(serde::Deserialize)]
    struct File {
        board: Vec<BoardSpec>,
    }
    let file: File = toml::from_str(boards).expect("board tables parse");
    let globals = Globals {
        timezone: Tz::UTC,
        key_prefix: "rankflow".into(),
        future_skew_ms: 300_000,
        archive_grace_ms,
    };
    BoardSet::compile(&file.board, &globals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(boards: &str) -> Result<BoardSet, BoardError> {
        compile_toml(boards, Some(600_000))
    }

    const GOOD: &str = r#"
        [[board]]
        name = "fans"
        event = "gift"
        member = "sender_id"
        score = "count * value"
        scope = "receiver_id"
        periods = ["day", "all"]
        windows = ["3h/1m"]
        tie_break = "earliest"
    "#;

    #[test]
    fn a_good_board_compiles() {
        let set = compile(GOOD).unwrap();
        let b = &set.boards[0];
        assert_eq!(b.views.len(), 3);
        assert_eq!(b.views[2].name(), "win:3h");
        assert!(b.needs_time());
        assert!(b.has_unbounded_view());
        assert_eq!(set.for_event(EventType::Gift), &[0]);
        assert!(set.for_event(EventType::Play).is_empty());
    }

    /// The default: only composite boards keep the index; either way the
    /// option, when given, decides.
    #[test]
    fn composite_boards_keep_a_dense_index_unless_told_otherwise() {
        let cases = [
            (GOOD, None, false),
            (GOOD, Some(true), true),
            (GOOD, Some(false), false),
            (STAGES, None, true),
            (STAGES, Some(false), false),
        ];
        for (board, option, want) in cases {
            let text = match option {
                None => board.to_string(),
                Some(on) => board.replace(
                    "tie_break",
                    &format!("dense_ranks = {on}\n        tie_break"),
                ),
            };
            let got = compile(&text).unwrap().boards[0].dense_ranks;
            assert_eq!(got, want, "option {option:?} on {text}");
        }
    }

    fn error(boards: &str) -> String {
        compile(boards).unwrap_err().to_string()
    }

    #[test]
    fn mistakes_name_the_board_field_and_position() {
        let e = error(&GOOD.replace("count * value", "count * "));
        assert!(e.contains("board `fans` (#1), field `score`"), "{e}");
        assert!(e.contains("column"), "{e}");
        let e = error(&GOOD.replace("\"day\"", "\"fortnight\""));
        assert!(e.contains("field `periods`[0]"), "{e}");
        let e = error(&GOOD.replace("name = \"fans\"", "name = \"Fans\""));
        assert!(e.contains("field `name`"), "{e}");
        let e = error(&GOOD.replace("3h/1m", "3h/7m"));
        assert!(e.contains("field `windows`[0]"), "{e}");
        let e = error(&format!("{GOOD}{GOOD}"));
        assert!(e.contains("(#2)") && e.contains("already"), "{e}");
        let e = error(&GOOD.replace("gift\"", "tip\""));
        assert!(e.contains("field `event`"), "{e}");
        let e = error(&GOOD.replace("tie_break = \"earliest\"", "retention = { all = \"1d\" }"));
        assert!(e.contains("field `retention`"), "{e}");
        let e = error(&GOOD.replace("tie_break = \"earliest\"", "timezone = \"Mars/Base\""));
        assert!(e.contains("field `timezone`"), "{e}");
    }

    #[test]
    fn archived_periods_are_checked_against_periods_grace_and_retention() {
        // The test globals have a 10-minute grace.
        let archived = |extra: &str| {
            GOOD.replace(
                "tie_break = \"earliest\"",
                &format!("tie_break = \"earliest\"\n{extra}"),
            )
        };
        let set = compile(&archived("archive = [\"day\"]")).unwrap();
        match &set.boards[0].views[0] {
            ViewSpec::Period { close_after, .. } => assert_eq!(*close_after, Some(600_000)),
            v => panic!("day view expected, got {v:?}"),
        }
        for (extra, field, says) in [
            ("archive = [\"all\"]", "`archive`[0]", "never closes"),
            (
                "archive = [\"week\"]",
                "`archive`[0]",
                "not in the board's periods",
            ),
            ("archive = [\"day\", \"day\"]", "`archive`[1]", "twice"),
            (
                "archive = [\"fortnight\"]",
                "`archive`[0]",
                "unknown period",
            ),
            (
                "archive = [\"day\"]\nretention = { day = \"5m\" }",
                "`retention`.day",
                "shorter than [archive] grace (10m)",
            ),
        ] {
            let e = error(&archived(extra));
            assert!(e.contains(field) && e.contains(says), "{extra}: {e}");
        }
        // A retention of months is never shorter than a grace of minutes.
        compile(&archived(
            "archive = [\"day\"]\nretention = { day = \"1mo\" }",
        ))
        .unwrap();
        // Without an [archive] url there is no grace: archiving is refused.
        let e = compile_toml(&archived("archive = [\"day\"]"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[archive] url is not set"), "{e}");
    }

    const STAGES: &str = r#"
        [[board]]
        name = "stage_clears"
        event = "score"
        member = "user_id"
        periods = ["day", "all"]
        tie_break = "earliest"
        order_by = [
          { field = "levels", score = "cleared ? 1 : 0", aggregate = "sum", order = "desc" },
          { field = "revives", score = "revives", aggregate = "sum", order = "asc" },
          { field = "first_clear", score = "ts", filter = "cleared", aggregate = "min", order = "asc" },
        ]
    "#;

    #[test]
    fn a_composite_board_compiles_with_its_fields_and_ranges() {
        let set = compile(STAGES).unwrap();
        let b = &set.boards[0];
        let c = b.composite.as_ref().expect("composite");
        let names: Vec<_> = c.layout.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["levels", "revives", "first_clear"]);
        assert_eq!(b.order, Order::Desc);
        assert_eq!(c.layout.fields[2].aggregate, Aggregate::Min);
        assert_eq!(c.layout.tie_key, TieKey::Descending);
        assert!(c.fields[2].filter.is_some());
        assert!(!b.needs_time(), "composite times live in K:f");
        let r = b.range_description();
        assert!(
            r.contains("levels (sum desc): integers exact in [-2^53, 2^53]")
                && r.contains("first_clear (min asc)")
                && r.contains("tie_break earliest"),
            "{r}"
        );
    }

    #[test]
    fn composite_mistakes_are_located_at_the_entry_and_key() {
        let more = r#" { field = "c", score = "1" }, { field = "d", score = "1" } ]"#;
        for (from, to, at, says) in [
            (
                "order = \"desc\" }",
                "order = \"desc\", weight = 2 }",
                "`order_by`[0].weight",
                "unknown key",
            ),
            (
                "field = \"revives\"",
                "field = \"Revives\"",
                "`order_by`[1].field",
                "^[a-z][a-z0-9_]{0,31}$",
            ),
            (
                "field = \"revives\"",
                "field = \"levels\"",
                "`order_by`[1].field",
                "names another field",
            ),
            (
                "aggregate = \"sum\", order = \"asc\"",
                "aggregate = \"avg\"",
                "`order_by`[1].aggregate",
                "unknown aggregate",
            ),
            (
                "order = \"asc\" },\n          { field = \"first",
                "order = \"up\" },\n          { field = \"first",
                "`order_by`[1].order",
                "unknown order",
            ),
            (
                "score = \"revives\"",
                "score = \"revives +\"",
                "`order_by`[1].score",
                "column",
            ),
            (
                "filter = \"cleared\"",
                "filter = \"1\"",
                "`order_by`[2].filter",
                "",
            ),
            ("\n        ]", more, "`order_by`", "has 5 fields"),
            (
                "tie_break",
                "score = \"points\"\ntie_break",
                "field `score`",
                "as well as `order_by`",
            ),
            (
                "tie_break",
                "aggregate = \"max\"\ntie_break",
                "field `aggregate`",
                "per field",
            ),
            (
                "tie_break",
                "order = \"asc\"\ntie_break",
                "field `order`",
                "per field",
            ),
        ] {
            let text = STAGES.replacen(from, to, 1);
            assert_ne!(text, STAGES, "{from} is in the board");
            let e = error(&text);
            assert!(
                e.contains("board `stage_clears` (#1)") && e.contains(at) && e.contains(says),
                "{to}: {e}"
            );
        }
        let e = error(&GOOD.replace("score = \"count * value\"", "order_by = []"));
        assert!(e.contains("`order_by`: has 0 fields"), "{e}");
        let e = error(&GOOD.replace("score = \"count * value\"", ""));
        assert!(
            e.contains("field `score`") && e.contains("is missing"),
            "{e}"
        );
    }

    #[test]
    fn min_boards_rank_ascending_by_default() {
        let set =
            compile(&GOOD.replace("tie_break = \"earliest\"", "aggregate = \"min\"")).unwrap();
        assert_eq!(set.boards[0].order, Order::Asc);
    }
}
