//! One EVALSHA of `lua/apply.lua` and how calls are cut: a call carries
//! the encoded shares ([`crate::sink::encode`]) of several board instances
//! that share a slot (any instances on a single node), up to a bound on
//! updates so one script run stays short. The argument layout is
//! documented at the top of `apply.lua`; the two must change together.

use std::collections::BTreeMap;

use crate::board::keys;

/// Updates one call may carry: the script blocks Redis while it runs, so a
/// call is kept to a few milliseconds.
pub(crate) const MAX_UPDATES_PER_CALL: usize = 4000;

/// One board instance inside a call.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// Index of the instance in its batch (`u32::MAX` for trim-only calls).
    pub(crate) instance: u32,
    pub(crate) board: usize,
}

/// One EVALSHA of the apply script.
#[derive(Debug, Clone)]
pub struct Call {
    pub(crate) members: Vec<Member>,
    pub(crate) keys: Vec<String>,
    /// Text arguments, and one packed binary argument per view's updates.
    pub(crate) args: Vec<Vec<u8>>,
    /// (index into `args`, window length): the window cutoffs, `now - L`,
    /// filled in per attempt so a retried call uses the clock of its attempt.
    cutoffs: Vec<(usize, i64)>,
    /// Expiries this call sets, to remember once Redis acknowledged it.
    pub(crate) expiries: Vec<(String, i64)>,
    /// Updates the call carries.
    updates: usize,
    /// The moderation generation the calls were encoded with (the apply
    /// script refuses a call older than an instance's stamp); -1 for calls
    /// that route no member (trims).
    pub(crate) modgen: i64,
    /// Whether an instance has a window view or a composite rule: the
    /// script then defines what those need (`extras` in state.lua), which
    /// a call of plain and period views skips.
    extras: bool,
}

/// One instance's keys and arguments, ready to be appended to a call.
pub(crate) struct Encoded {
    pub(crate) member: Member,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Vec<u8>>,
    pub(crate) cutoffs: Vec<(usize, i64)>,
    pub(crate) expiries: Vec<(String, i64)>,
    pub(crate) updates: usize,
    /// [`Call`]'s `extras` for this instance.
    pub(crate) extras: bool,
}

/// Groups encoded instances into calls: same group key (slot, or one group
/// on a single node), at most [`MAX_UPDATES_PER_CALL`] updates per call
/// unless one instance alone has more.
pub(crate) fn pack(encoded: Vec<(u32, Encoded)>) -> Vec<Call> {
    let mut by_group: BTreeMap<u32, Vec<Call>> = BTreeMap::new();
    for (group, e) in encoded {
        let calls = by_group.entry(group).or_default();
        let fits = calls
            .last()
            .is_some_and(|c| c.updates + e.updates <= MAX_UPDATES_PER_CALL);
        if !fits {
            calls.push(Call {
                members: Vec::new(),
                keys: Vec::new(),
                args: Vec::new(),
                cutoffs: Vec::new(),
                expiries: Vec::new(),
                updates: 0,
                modgen: -1,
                extras: false,
            });
        }
        if let Some(c) = calls.last_mut() {
            let base = c.args.len();
            c.cutoffs
                .extend(e.cutoffs.into_iter().map(|(i, l)| (base + i, l)));
            c.members.push(e.member);
            c.expiries.extend(e.expiries);
            c.keys.extend(e.keys);
            c.args.extend(e.args);
            c.updates += e.updates;
            c.extras |= e.extras;
        }
    }
    by_group.into_values().flatten().collect()
}

/// How instances may share a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grouping {
    /// Single node: any instances together.
    Any,
    /// Redis Cluster: only instances of the same hash slot.
    BySlot,
}

pub(crate) fn group_of(grouping: Grouping, tag: &str) -> u32 {
    match grouping {
        Grouping::Any => 0,
        Grouping::BySlot => u32::from(keys::hash_slot(tag)),
    }
}

impl Call {
    /// Updates the call carries: its work for Redis.
    pub(crate) fn updates(&self) -> usize {
        self.updates
    }

    /// The EVALSHA command for this call at clock `now`.
    pub(crate) fn command(&self, sha: &str, now: i64) -> redis::Cmd {
        self.command_checking(sha, now, None)
    }

    /// [`Call::command`]; with `record` (the moderation record's key, on a
    /// single node only) the script also refuses the call when the record's
    /// generation is above the call's.
    pub(crate) fn command_checking(&self, sha: &str, now: i64, record: Option<&str>) -> redis::Cmd {
        let mut args: Vec<&[u8]> = self.args.iter().map(Vec::as_slice).collect();
        let cutoffs: Vec<String> = self
            .cutoffs
            .iter()
            .map(|(_, length)| now.saturating_sub(*length).to_string())
            .collect();
        for ((i, _), c) in self.cutoffs.iter().zip(&cutoffs) {
            args[*i] = c.as_bytes();
        }
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha)
            .arg(self.keys.len() + usize::from(record.is_some()))
            .arg(&self.keys);
        match record {
            Some(key) if self.modgen >= 0 => cmd.arg(key).arg(now).arg(format!("r{}", self.modgen)),
            Some(key) => cmd.arg(key).arg(now).arg(self.modgen),
            None => cmd.arg(now).arg(self.modgen),
        };
        match self.extras {
            true => cmd.arg(format!("x{}", self.members.len())),
            false => cmd.arg(self.members.len()),
        };
        cmd.arg(args);
        cmd
    }
}
