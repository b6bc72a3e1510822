//! Unions of scopes (docs/http-api.md): `scope=a&scope=b` (repeatable) or
//! `scope=*` reads several scopes of a scoped board as one board, on any of
//! its views, `last:<N><unit>` included. What such a request asks for is a
//! [`ScopeUnion`] (in [`super::query`]); this module owns its plan (the scope
//! instances' keys and the result key, [`plan`]) and, for `scope=*`, finding
//! the scopes from the views' registries when the union is computed
//! ([`resolve`]). Computing and caching is [`super::compute`]'s, as for
//! rolling views.
//!
//! The result key is under the board's own hash tag,
//! `{prefix}:{<board>}:u:<view id>:s:<which>` (`<which>` is `all`, or the
//! SHA-1 of the sorted list of scopes), with the `last:` part of a rolling
//! view when there is one. On a Redis Cluster every source must share that
//! slot, which only a board with `scope_slot = "board"` gives; other
//! boards answer 400 there (their scopes are spread over the cluster).
//! Periods whose keys are gone (expired, or archived and removed) count
//! as empty, as in a rolling view.

use std::collections::BTreeSet;

use super::error::ReadError;
use super::plan::{Registered, UnionPlan};
use super::query::ScopeUnion;
use super::union;
use super::view::view_of;
use crate::board::keys;
use crate::board::model::Board;
use crate::sink::store::{Store, StoreError};

/// Most board keys one union may read (scopes × periods).
pub(crate) const MAX_UNION_KEYS: usize = 50_000;

fn bad_scope(message: impl Into<String>) -> ReadError {
    ReadError::bad("scope", message)
}

/// The plan of the union of `which` scopes of `board` in `view` (a view of
/// the board or `last:<N><unit>`), and the period it shows.
pub(super) fn plan(
    prefix: &str,
    board: &Board,
    which: &ScopeUnion,
    view: &str,
    period: Option<&str>,
    now_ms: i64,
) -> Result<(UnionPlan, Option<String>), ReadError> {
    if board.scope.is_none() {
        return Err(bad_scope(format!(
            "board {:?} has no scope; scope= does not apply",
            board.name
        )));
    }
    if let Some(why) = union::unsupported(board) {
        return Err(bad_scope(why));
    }
    let (views, shown, window, part) = match union::parse(view) {
        Some(last) => {
            let last = last?;
            let (views, newest) = union::range(board, last, period, now_ms)?;
            let part = union::result_view(last, &newest);
            (views, Some(newest), false, part)
        }
        None => {
            let spec = board.view(view).ok_or_else(|| ReadError::UnknownView {
                board: board.name.clone(),
                view: view.to_string(),
                known: union::known_views(board),
            })?;
            let (id, shown, window) = view_of(spec, board, period, now_ms)?;
            let part = format!("u:{id}");
            (vec![id], shown, window, part)
        }
    };
    let result = keys::view_key(
        prefix,
        &board.stored,
        &format!("{part}:s:{}", digest(which)),
    );
    let mut plan = UnionPlan::new(board, result, Vec::new());
    plan.cross_slot = !board.board_slot;
    plan.param = "scope";
    match which {
        ScopeUnion::Listed(scopes) => {
            check_count(scopes.len() * views.len())?;
            let tags: Vec<String> = scopes.iter().map(|s| board.tag(Some(s))).collect();
            plan.sources = sources(prefix, &tags, &views);
            if window {
                plan.trims = tags;
            }
        }
        ScopeUnion::All => {
            if board.scope_registry == 0 {
                return Err(bad_scope(format!(
                    "board {:?} keeps no registry of its scopes (scope_registry = 0): list them, scope=a&scope=b",
                    board.name
                )));
            }
            plan.registered = Some(Registered {
                prefix: prefix.to_string(),
                board: board.name.clone(),
                stored: board.stored.clone(),
                board_slot: board.board_slot,
                keep: board.scope_registry,
                views: views
                    .iter()
                    .map(|v| {
                        (
                            v.clone(),
                            keys::scope_registry_key(prefix, &board.stored, v),
                        )
                    })
                    .collect(),
                window,
            });
        }
    }
    Ok((plan, shown))
}

/// Names the scopes of a union in its result key: `all`, or the SHA-1 of
/// the sorted scopes (one line each, escaped, so no two lists collide).
fn digest(which: &ScopeUnion) -> String {
    match which {
        ScopeUnion::All => "all".to_string(),
        ScopeUnion::Listed(scopes) => {
            let mut sorted: Vec<String> = scopes
                .iter()
                .map(|s| keys::escape_scope(s).replace('\n', "%0A"))
                .collect();
            sorted.sort();
            sha1_smol::Sha1::from(sorted.join("\n"))
                .digest()
                .to_string()
        }
    }
}

/// The key of every view of every instance, instance by instance.
fn sources(prefix: &str, tags: &[String], views: &[String]) -> Vec<String> {
    tags.iter()
        .flat_map(|t| views.iter().map(move |v| keys::view_key(prefix, t, v)))
        .collect()
}

fn check_count(keys: usize) -> Result<(), ReadError> {
    if keys > MAX_UNION_KEYS {
        return Err(bad_scope(format!(
            "this union would read {keys} board keys (scopes × periods); at most {MAX_UNION_KEYS}: name fewer scopes or a shorter range"
        )));
    }
    Ok(())
}

/// The sources and window instances of `plan`, reading the registries of
/// a `scope=*` union: the scopes any of its views registered.
pub(super) async fn resolve(
    store: &Store,
    plan: &UnionPlan,
) -> Result<(Vec<String>, Vec<String>), ReadError> {
    let Some(reg) = &plan.registered else {
        return Ok((plan.sources.clone(), plan.trims.clone()));
    };
    let reads = reg.views.iter().map(|(_, key)| {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(key).arg(0).arg(-1);
        async move { store.query::<Vec<String>>(&cmd).await }
    });
    let lists: Vec<Vec<String>> = futures::future::try_join_all(reads)
        .await
        .map_err(|e: StoreError| ReadError::from(e))?;
    let mut scopes = BTreeSet::new();
    for ((view, _), list) in reg.views.iter().zip(lists) {
        if list.len() as u64 > reg.keep {
            return Err(bad_scope(format!(
                "more than {} scope values have data in view {view} of board {:?} (its scope_registry), so scope=* would leave some out: list the scopes, or raise scope_registry",
                reg.keep, reg.board
            )));
        }
        scopes.extend(list);
    }
    check_count(scopes.len() * reg.views.len())?;
    let tags: Vec<String> = scopes
        .iter()
        .map(|s| keys::instance_tag_in(&reg.stored, Some(s), reg.board_slot))
        .collect();
    let views: Vec<String> = reg.views.iter().map(|(v, _)| v.clone()).collect();
    let sources = sources(&reg.prefix, &tags, &views);
    Ok((sources, if reg.window { tags } else { Vec::new() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_union_is_named_by_its_set_of_scopes() {
        let ab = digest(&ScopeUnion::Listed(vec!["a".into(), "b".into()]));
        let ba = digest(&ScopeUnion::Listed(vec!["b".into(), "a".into()]));
        assert_eq!(ab, ba, "order does not matter");
        assert_eq!(ab.len(), 40);
        let joined = digest(&ScopeUnion::Listed(vec!["a\nb".into()]));
        let split = digest(&ScopeUnion::Listed(vec!["a".into(), "b".into()]));
        assert_ne!(joined, split, "a newline in a scope is not a separator");
        assert_eq!(digest(&ScopeUnion::All), "all");
    }
}
