//! The archive's part of a member action (docs/moderation.md): with an
//! `[archive] url`, a hide marks the member's archived rows hidden, a
//! restore clears the mark, an erasure deletes them
//! (`crate::archive::members`), and a member's state counts its archived
//! periods. One connection per action: actions are rare, and a fresh
//! connection never carries a broken one's state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::archive::connect::Target;
use crate::archive::copy::Archive;
use crate::archive::members::{self, ArchiveAction, ArchiveHolding};
use crate::archive::{ArchiveError, schema};

use super::report::{MemberAction, MemberError};

/// The archive a moderator changes.
#[derive(Debug, Clone)]
pub(crate) struct ArchiveStep {
    target: Target,
    /// The schema was brought to this version once: later actions of the
    /// process skip the check.
    migrated: Arc<AtomicBool>,
}

impl ArchiveStep {
    pub(crate) fn new(target: Target) -> ArchiveStep {
        ArchiveStep {
            target,
            migrated: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Connected, with the schema at this version (the columns the action
    /// needs may be newer than the archiver that last migrated; migrations
    /// only add, so once is enough).
    async fn connect(&self) -> Result<Archive, MemberError> {
        let mut archive = Archive::connect_to(&self.target).await.map_err(failed)?;
        if !self.migrated.load(Ordering::Acquire) {
            schema::migrate(archive.client()).await.map_err(failed)?;
            self.migrated.store(true, Ordering::Release);
        }
        Ok(archive)
    }

    /// Applies `action` to `member`'s archived rows of `boards`; answers
    /// how many archived periods changed.
    pub(crate) async fn apply(
        &self,
        action: MemberAction,
        member: &str,
        boards: &[String],
    ) -> Result<u64, MemberError> {
        let action = match action {
            MemberAction::Hide => ArchiveAction::Hide,
            MemberAction::Restore => ArchiveAction::Restore,
            MemberAction::Erase => ArchiveAction::Erase,
        };
        let mut archive = self.connect().await?;
        members::apply(archive.client(), action, member, boards)
            .await
            .map_err(failed)
    }

    /// Per board, the archived periods holding `member`.
    pub(crate) async fn holdings(
        &self,
        member: &str,
    ) -> Result<BTreeMap<String, ArchiveHolding>, MemberError> {
        let mut archive = self.connect().await?;
        members::holdings(archive.client(), member)
            .await
            .map_err(failed)
    }
}

fn failed(e: ArchiveError) -> MemberError {
    MemberError::Archive(e.to_string())
}
