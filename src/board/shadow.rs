//! Shadow boards (docs/configuration.md, `shadow_of` and `backfill_from`):
//! a board that is a candidate replacement of another, and the checks that
//! make it one. A shadow must be able to take the place of the board it
//! shadows for every reader: it keeps every view of that board, and it is
//! scoped if and only if that board is.

use chrono::DateTime;

use super::spec::{BoardError, BoardSpec};

/// What makes a board a shadow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shadow {
    /// The board it is a candidate replacement of.
    pub(crate) of: String,
    /// The event time (ms) its backfill replays the topics from; `None`:
    /// it follows live events only.
    pub(crate) backfill_from: Option<i64>,
}

/// The board's own shadow settings, checked on their own: `backfill_from`
/// is an RFC 3339 time and only goes with `shadow_of`.
pub(crate) fn own(
    b: &BoardSpec,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<Shadow>, BoardError> {
    let backfill_from = match b.backfill_from.as_deref() {
        None => None,
        Some(text) => {
            Some(parse_time(text).map_err(|m| BoardError::invalid(at("backfill_from"), m))?)
        }
    };
    match (&b.shadow_of, backfill_from) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(BoardError::invalid(
            at("backfill_from"),
            "only goes with `shadow_of`: a board is backfilled as the shadow of another",
        )),
        (Some(of), backfill_from) => Ok(Some(Shadow {
            of: of.clone(),
            backfill_from,
        })),
    }
}

/// An RFC 3339 time with its offset (`2026-11-01T00:00:00Z`), in ms.
fn parse_time(text: &str) -> Result<i64, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| {
            format!("{text:?} is not an RFC 3339 time with an offset ({e}), e.g. \"2026-11-01T00:00:00Z\"")
        })
}

/// What checking a shadow needs to know of a compiled board.
pub(crate) struct Outline<'a> {
    pub(crate) name: &'a str,
    pub(crate) shadow: Option<&'a Shadow>,
    pub(crate) scoped: bool,
    /// Its views' names (`day`, `all`, `win:3h`).
    pub(crate) views: Vec<String>,
}

/// Checks each shadow against the board it shadows, once every board is
/// compiled; `at(i, field)` locates board `i`'s field.
pub(crate) fn check_all(
    boards: &[Outline<'_>],
    at: &dyn Fn(usize, &str) -> String,
) -> Result<(), BoardError> {
    for (i, b) in boards.iter().enumerate() {
        let Some(shadow) = b.shadow else {
            continue;
        };
        let field = at(i, "shadow_of");
        let Some(of) = boards.iter().find(|o| o.name == shadow.of) else {
            return Err(BoardError::invalid(
                field,
                format!("no board is named {:?}", shadow.of),
            ));
        };
        if of.name == b.name {
            return Err(BoardError::invalid(field, "names the board itself"));
        }
        if of.shadow.is_some() {
            return Err(BoardError::invalid(
                field,
                format!(
                    "`{}` is itself a shadow: shadow the board it shadows",
                    of.name
                ),
            ));
        }
        if of.scoped != b.scoped {
            let (is, not) = match of.scoped {
                true => ("scoped", "this board has no `scope`"),
                false => ("not scoped", "this board has a `scope`"),
            };
            return Err(BoardError::invalid(
                at(i, "scope"),
                format!(
                    "`{}` is {is} and {not}: a shadow must be read as the board it replaces",
                    of.name
                ),
            ));
        }
        if let Some(missing) = of.views.iter().find(|v| !b.views.contains(v)) {
            let field = if missing.starts_with("win:") {
                "windows"
            } else {
                "periods"
            };
            return Err(BoardError::invalid(
                at(i, field),
                format!(
                    "lacks the view `{missing}` of `{}`: a shadow keeps every view of the board it would replace",
                    of.name
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::board::BoardSet;
    use crate::board::model::compile_toml;

    use super::*;

    fn compile(boards: &str) -> Result<BoardSet, BoardError> {
        compile_toml(boards, None)
    }

    /// The board shadowed in every case below.
    const LIVE: &str = r#"
        [[board]]
        name = "coins"
        event = "gift"
        member = "receiver_id"
        score = "count * value"
        periods = ["day", "all"]
        windows = ["3h/1m"]
    "#;

    fn shadow(extra: &str) -> String {
        format!(
            "{LIVE}\n[[board]]\nname = \"coins_v2\"\nevent = \"gift\"\nmember = \"receiver_id\"\nscore = \"count * value * 2\"\n{extra}\n"
        )
    }

    #[test]
    fn a_shadow_compiles_with_its_backfill_time() {
        let set = compile(&shadow(
            "periods = [\"day\", \"all\", \"week\"]\nwindows = [\"3h/1m\"]\nshadow_of = \"coins\"\nbackfill_from = \"2026-11-01T08:00:00+08:00\"",
        ))
        .expect("compiles");
        let got = set.get("coins_v2").and_then(|b| b.shadow.clone());
        assert_eq!(
            got,
            Some(Shadow {
                of: "coins".into(),
                // 2026-11-01T00:00:00Z: 2025-11-01T00:00:00Z is
                // 1,761,955,200 s, and 2026 is 365 days (31,536,000 s) on.
                backfill_from: Some(1_793_491_200_000),
            })
        );
        assert_eq!(set.shadows().count(), 1);
        let live_only = compile(&shadow(
            "periods = [\"day\", \"all\"]\nwindows = [\"3h/1m\"]\nshadow_of = \"coins\"",
        ))
        .expect("compiles");
        assert_eq!(
            live_only.get("coins_v2").and_then(|b| b.shadow.clone()),
            Some(Shadow {
                of: "coins".into(),
                backfill_from: None
            })
        );
    }

    /// Each configuration must fail with a message that starts with its
    /// location and has its words.
    fn assert_mistakes(cases: &[(String, &str, &str)]) {
        for (config, location, words) in cases {
            let e = compile(config).expect_err(words).to_string();
            assert!(
                e.starts_with(location) && e.contains(words),
                "{e:?} should start with {location:?} and say {words:?}"
            );
        }
    }

    /// Each mistake, and the board, field and words its message must have
    /// (a hand-made table).
    #[test]
    fn mistakes_name_the_board_and_the_field() {
        let views = "periods = [\"day\", \"all\"]\nwindows = [\"3h/1m\"]\n";
        let cases: &[(String, &str, &str)] = &[
            (
                shadow(&format!("{views}shadow_of = \"coin\"")),
                "board `coins_v2` (#2), field `shadow_of`",
                "no board is named \"coin\"",
            ),
            (
                shadow(&format!("{views}shadow_of = \"coins_v2\"")),
                "board `coins_v2` (#2), field `shadow_of`",
                "names the board itself",
            ),
            (
                format!(
                    "{}\n[[board]]\nname = \"coins_v3\"\nevent = \"gift\"\nmember = \"receiver_id\"\nscore = \"1\"\n{views}shadow_of = \"coins_v2\"\n",
                    shadow(&format!("{views}shadow_of = \"coins\""))
                ),
                "board `coins_v3` (#3), field `shadow_of`",
                "`coins_v2` is itself a shadow",
            ),
            (
                shadow("periods = [\"day\", \"all\"]\nshadow_of = \"coins\""),
                "board `coins_v2` (#2), field `windows`",
                "lacks the view `win:3h` of `coins`",
            ),
            (
                shadow("periods = [\"all\"]\nwindows = [\"3h/1m\"]\nshadow_of = \"coins\""),
                "board `coins_v2` (#2), field `periods`",
                "lacks the view `day` of `coins`",
            ),
            (
                shadow(&format!(
                    "{views}scope = \"sender_id\"\nshadow_of = \"coins\""
                )),
                "board `coins_v2` (#2), field `scope`",
                "`coins` is not scoped and this board has a `scope`",
            ),
            (
                shadow(&format!("{views}backfill_from = \"2026-11-01T00:00:00Z\"")),
                "board `coins_v2` (#2), field `backfill_from`",
                "only goes with `shadow_of`",
            ),
            (
                shadow(&format!(
                    "{views}shadow_of = \"coins\"\nbackfill_from = \"2026-11-01 00:00\""
                )),
                "board `coins_v2` (#2), field `backfill_from`",
                "is not an RFC 3339 time",
            ),
        ];
        assert_mistakes(cases);
    }

    /// The board that took over a promoted shadow's keys (`stored_as`):
    /// its keys carry the shadow's name, and its mistakes are located (a
    /// hand-made table).
    #[test]
    fn a_board_stored_as_a_shadow_has_its_keys_and_its_mistakes_are_named() {
        let taken_over = LIVE.replace(
            "name = \"coins\"",
            "name = \"coins\"\nstored_as = \"coins_v2\"",
        );
        let set = compile(&taken_over).expect("compiles");
        let (i, board) = set.by_stored("coins_v2").expect("found by its keys");
        assert_eq!((i, board.name.as_str()), (0, "coins"));
        assert_eq!(board.tag(Some("a")), "coins_v2:a");
        assert!(set.by_stored("coins").is_none());
        let other = "\n[[board]]\nname = \"other\"\nevent = \"gift\"\nmember = \"receiver_id\"\nscore = \"1\"\nperiods = [\"all\"]\n";
        let cases: &[(String, &str, &str)] = &[
            (
                LIVE.replace(
                    "name = \"coins\"",
                    "name = \"coins\"\nstored_as = \"Coins-2\"",
                ),
                "board `coins` (#1), field `stored_as`",
                "must match",
            ),
            (
                shadow(
                    "periods = [\"day\", \"all\"]\nwindows = [\"3h/1m\"]\nshadow_of = \"coins\"\nstored_as = \"x\"",
                ),
                "board `coins_v2` (#2), field `stored_as`",
                "a shadow keeps its own keys",
            ),
            (
                format!(
                    "{taken_over}{}",
                    other.replace("periods", "stored_as = \"coins_v2\"\nperiods")
                ),
                "board `other` (#2), field `stored_as`",
                "`coins_v2` names the keys of board `coins`",
            ),
            (
                format!(
                    "{}{other}",
                    LIVE.replace(
                        "name = \"coins\"",
                        "name = \"coins\"\nstored_as = \"other\""
                    )
                ),
                "board `coins` (#1), field `stored_as`",
                "`other` names the keys of board `other`",
            ),
        ];
        assert_mistakes(cases);
    }
}
