//! The reference model of composite boards (docs/score-encoding.md,
//! docs/configuration.md) that `tests/it/composite.rs` and
//! `tests/it/composite_windows.rs` check rankflow against. It is an independent
//! reference written here from the documented rules, never from rankflow's
//! code: random board definitions (1-4 fields, random rules, orders and
//! tie-breaks), each field's aggregate folded by hand over the events, and
//! the rank order sorted by hand. Also what both read back to compare with
//! it: a field map as values in field order, a view listed by the reader
//! with each member's own rank checked, and a scope listed by the API.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use rankflow::reader::{Entry, Reader};
use serde_json::{Value, json};

use super::{InProcess, get_json, query};

/// 2^53: the largest magnitude a composite field holds exactly.
pub const MAX: i64 = 1 << 53;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    Sum,
    Max,
    Min,
    Last,
}

/// One field as the test defines it: rule and whether higher is better.
#[derive(Debug, Clone, Copy)]
pub struct FieldDef {
    pub rule: Rule,
    pub desc: bool,
}

#[derive(Debug, Clone)]
pub struct BoardDef {
    pub name: String,
    pub fields: Vec<FieldDef>,
    /// "none", "earliest" or "latest".
    pub tie: &'static str,
}

/// A small deterministic generator (xorshift64*), so a failure replays.
pub struct Gen(pub u64);

impl Gen {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

impl BoardDef {
    pub fn random(g: &mut Gen, name: String) -> BoardDef {
        let n = 1 + g.below(4) as usize;
        let fields = (0..n)
            .map(|_| FieldDef {
                rule: [Rule::Sum, Rule::Max, Rule::Min, Rule::Last][g.below(4) as usize],
                desc: g.below(2) == 0,
            })
            .collect();
        let tie = ["none", "earliest", "latest"][g.below(3) as usize];
        BoardDef { name, fields, tie }
    }

    /// Sum fields read the small `s<i>` values (no overflow), the others
    /// `v<i>`, which include ±2^53.
    pub fn source(&self, i: usize) -> String {
        match self.fields[i].rule {
            Rule::Sum => format!("s{i}"),
            _ => format!("v{i}"),
        }
    }

    /// The `[[board]]` table of a `score` board on `user_id` with this
    /// definition's fields (`f0`, `f1`, …) and tie-break; `keeps` names
    /// what it keeps (`periods = …`, or `windows = …` and a timezone).
    pub fn toml(&self, keeps: &str) -> String {
        let fields: Vec<String> = self
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let rule = format!("{:?}", f.rule).to_lowercase();
                let order = if f.desc { "desc" } else { "asc" };
                let src = self.source(i);
                format!(
                    "  {{ field = \"f{i}\", score = \"{src}\", filter = \"has({src})\", aggregate = \"{rule}\", order = \"{order}\" }},"
                )
            })
            .collect();
        format!(
            "[[board]]\nname = \"{}\"\nevent = \"score\"\nmember = \"user_id\"\n{keeps}\ntie_break = \"{}\"\norder_by = [\n{}\n]\n",
            self.name,
            self.tie,
            fields.join("\n")
        )
    }
}

/// Sets random values on event `e` for the fields random boards read
/// ([`BoardDef::source`]): each `s<i>` (i < 4) half the time, small
/// (-3..=3, so no sum overflows); each `v<i>` half the time, one of
/// `extremes` or small (-2..=2): of 10 equally likely draws, the first
/// `extremes.len()` pick an extreme.
pub fn random_fields(g: &mut Gen, e: &mut Value, extremes: &[i64]) {
    for i in 0..4 {
        if g.below(2) == 0 {
            e[format!("s{i}")] = json!(g.below(7) as i64 - 3);
        }
        if g.below(2) == 0 {
            let k = g.below(10) as usize;
            let v = match extremes.get(k) {
                Some(x) => *x,
                None => g.below(5) as i64 - 2,
            };
            e[format!("v{i}")] = json!(v);
        }
    }
}

/// The aggregate rules as docs/configuration.md states them, on (value, time):
/// sum adds and keeps the latest time; max/min keep the best value and the
/// earliest time it was reached; last keeps the value of the latest time
/// (the greater value on equal times).
pub fn fold(rule: Rule, acc: Option<(i64, i64)>, v: i64, t: i64) -> (i64, i64) {
    let Some((a, at)) = acc else { return (v, t) };
    match rule {
        Rule::Sum => (a + v, at.max(t)),
        Rule::Max if v > a || (v == a && t < at) => (v, t),
        Rule::Min if v < a || (v == a && t < at) => (v, t),
        Rule::Last if t > at || (t == at && v > a) => (v, t),
        _ => (a, at),
    }
}

/// Per member: each field's (value, time reached).
pub type Model = BTreeMap<String, Vec<Option<(i64, i64)>>>;

/// A member and its field values, in field order (`None`: no value).
pub type Row = (String, Vec<Option<i64>>);

/// Each member's fields over `events` (all of a board's, or those of a
/// window): an event with none of the board's fields leaves no member.
pub fn model<'a>(def: &BoardDef, events: impl IntoIterator<Item = &'a Value>) -> Model {
    let mut out: Model = BTreeMap::new();
    for e in events {
        let member = e["user_id"].as_str().unwrap_or_default().to_string();
        let t = e["ts"].as_i64().unwrap_or_default();
        let values: Vec<Option<i64>> = (0..def.fields.len())
            .map(|i| e[def.source(i)].as_i64())
            .collect();
        if values.iter().all(Option::is_none) {
            continue;
        }
        let state = out
            .entry(member)
            .or_insert_with(|| vec![None; def.fields.len()]);
        for (i, v) in values.into_iter().enumerate() {
            if let Some(v) = v {
                state[i] = Some(fold(def.fields[i].rule, state[i], v, t));
            }
        }
    }
    out
}

/// Members in rank order with their field values: fields in order (a
/// missing value after every value), then tie time (the latest of the
/// fields' times), then member bytes in the listing direction (descending
/// for a `desc` first field).
pub fn ranked(def: &BoardDef, m: &Model) -> Vec<Row> {
    let tie_time = |s: &Vec<Option<(i64, i64)>>| s.iter().flatten().map(|x| x.1).max().unwrap_or(0);
    let mut rows: Vec<_> = m.iter().collect();
    rows.sort_by(|(ma, a), (mb, b)| {
        for (i, f) in def.fields.iter().enumerate() {
            let c = match (a[i], b[i]) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(x), Some(y)) if f.desc => y.0.cmp(&x.0),
                (Some(x), Some(y)) => x.0.cmp(&y.0),
            };
            if c != Ordering::Equal {
                return c;
            }
        }
        let t = match def.tie {
            "earliest" => tie_time(a).cmp(&tie_time(b)),
            "latest" => tie_time(b).cmp(&tie_time(a)),
            _ => Ordering::Equal,
        };
        t.then_with(|| {
            if def.fields[0].desc {
                mb.as_bytes().cmp(ma.as_bytes())
            } else {
                ma.as_bytes().cmp(mb.as_bytes())
            }
        })
    });
    rows.into_iter()
        .map(|(m, s)| (m.clone(), s.iter().map(|x| x.map(|(v, _)| v)).collect()))
        .collect()
}

/// What the reader gives for a field map: values in field order.
pub fn field_values(fields: &Value, n: usize) -> Vec<Option<i64>> {
    (0..n).map(|i| fields[format!("f{i}")].as_i64()).collect()
}

/// What the API lists for one scope of a board's view: its rows in rank
/// order, `n` fields each, or `None` while it does not answer 200.
pub async fn api_rows(
    app: &InProcess,
    board: &str,
    view: &str,
    scope: &str,
    n: usize,
) -> Option<Vec<Row>> {
    let url = app.url(&format!(
        "/v1/boards/{board}/{view}/top?scope={scope}&limit=100"
    ));
    let (status, body) = get_json(&url).await;
    if status != 200 {
        return None;
    }
    Some(
        body["entries"]
            .as_array()?
            .iter()
            .map(|e| {
                (
                    e["member"].as_str().unwrap_or_default().to_string(),
                    field_values(&e["fields"], n),
                )
            })
            .collect(),
    )
}

/// One view of `def` as the reader lists it (the first 1000): its entries
/// (for their scores) and rows, after checking each listed member's own
/// rank and fields (found through K:f, without a scan) against the list.
pub async fn read_view(reader: &Reader, def: &BoardDef, view: &str) -> (Vec<Entry>, Vec<Row>) {
    let q = query(&def.name, view);
    let list = reader.top(&q, 0, 1000).await.expect("top");
    let n = def.fields.len();
    let rows: Vec<Row> = list
        .entries
        .iter()
        .map(|e| {
            let fields = serde_json::to_value(&e.fields).expect("fields serialize");
            (e.member.clone(), field_values(&fields, n))
        })
        .collect();
    for (rank, (member, want)) in rows.iter().enumerate() {
        let m = reader.member(&q, member).await.expect("member");
        let fields = serde_json::to_value(&m.fields).expect("fields");
        assert_eq!(m.rank, rank as u64 + 1, "{member} in {view} of {def:?}");
        assert_eq!(&field_values(&fields, n), want, "{member}");
    }
    (list.entries, rows)
}
