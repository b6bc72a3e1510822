//! Reading boards back (docs/http-api.md): locating a view's key for a board, scope
//! and period, trimming a window to the clock before reading it, and turning
//! stored members and scores into entries with true values and 1-based
//! ranks. Shared by the HTTP API and `rankflow top`, so the bounds on a read
//! (docs/http-api.md: [`MAX_LIMIT`], [`MAX_OFFSET`], [`MAX_RADIUS`], in [`query`])
//! and the errors that name a bad parameter ([`BadParam`], in [`error`]) live
//! here, and are enforced here, whatever the caller checked before.
//!
//! A past period is read from Redis while its key exists and from the
//! archive (docs/history.md) once it is gone, with the same JSON but for
//! `"source"`; a past period found in neither never had events (404).
//! Every read takes a rank style (docs/http-api.md, [`RankStyle`]): ordinal ranks
//! come from `ZRANGE`/`ZRANK` as before; competition and dense ranks, and
//! lists of members ([`Reader::members`]), from the read script of
//! [`styled`], numbered by [`ranks::Styler`] (the one place a board kind's
//! notion of "equal values" turns into ranks); archived periods carry all
//! three ranks. The list of a view's periods is in [`periods`].
//!
//! This file only declares the parts and re-exports what callers use; no
//! part imports from it. Shared types live in leaf modules: [`error`],
//! [`query`], [`answer`], [`plan`] (one union to compute), [`view`] and
//! [`reply`]. [`Reader`] is in [`handle`]; [`reads`], [`styled`] and
//! [`periods`] add its reads. [`locate`] finds a query's key; rolling views
//! are planned in [`union`], unions of scopes in [`scopes`], and both are
//! computed in [`compute`] (large ones in slices, [`build`]).

mod answer;
mod build;
mod compute;
mod diff;
mod error;
mod handle;
mod locate;
mod periods;
mod plan;
mod query;
pub mod ranks;
mod reads;
mod reply;
mod scopes;
mod script;
mod served;
mod serving;
mod shared;
mod sheet;
mod styled;
pub(crate) mod union;
mod view;

pub use answer::{Entry, List, Source};
pub use answer::{MemberEntry, MemberList};
pub use compute::Unions;
pub use diff::{DiffList, Difference, Side};
pub use error::BadParam;
pub use error::ReadError;
pub use handle::Reader;
pub use locate::check;
pub use periods::{PeriodInfo, PeriodList, periodic_view};
pub(crate) use query::{MAX_LIMIT, MAX_OFFSET, MAX_RADIUS, out_of_range};
pub use query::{Query, ScopeUnion};
pub use ranks::RankStyle;
pub(crate) use sheet::{MAX_SHARED, Near, Sheet, Styles, fitting};
pub use union::UnionOffer;
