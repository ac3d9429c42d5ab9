//! Priority lanes: high, normal and low, FIFO within each, with O(1) cancellation.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// Which lane a request waits in. Higher lanes are served first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Priority {
    /// Admitted before any waiting normal or low request.
    High,
    /// The default lane.
    #[default]
    Normal,
    /// Admitted after high and normal ones, yet never starved (see the starvation guard).
    Low,
}

impl Priority {
    /// All lanes, highest first.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The lane's lowercase name: `high`, `normal` or `low`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::High => "high",
            Self::Normal => "normal",
            Self::Low => "low",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "high" | "h" => Ok(Self::High),
            "normal" | "n" | "default" => Ok(Self::Normal),
            "low" | "l" => Ok(Self::Low),
            other => Err(format!("'{other}' is not a priority: use high, normal or low")),
        }
    }
}

/// A waiter's place in its lane: its slab slot and its unique id (a slot can be reused).
pub(crate) type Ticket = (usize, u64);

/// Three FIFO lanes of tickets. Cancelled tickets stay behind as tombstones and are
/// skipped when they reach the front, so cancelling never scans a lane.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    lanes: [VecDeque<Ticket>; 3],
    live: [usize; 3],
}

impl Lanes {
    pub(crate) fn push(&mut self, priority: Priority, ticket: Ticket) {
        self.lanes[priority.index()].push_back(ticket);
        self.live[priority.index()] += 1;
    }

    /// Marks one live ticket of `priority` as gone (its tombstone is dropped later).
    pub(crate) fn forget(&mut self, priority: Priority, is_live: impl Fn(Ticket) -> bool) {
        let index = priority.index();
        self.live[index] -= 1;
        let lane = &mut self.lanes[index];
        // Compact when tombstones dominate, so a storm of cancellations cannot grow memory.
        if lane.len() > 64 && lane.len() > 4 * self.live[index] {
            lane.retain(|&ticket| is_live(ticket));
        }
    }

    /// The live front of each lane, dropping tombstones on the way.
    pub(crate) fn fronts(&mut self, is_live: impl Fn(Ticket) -> bool) -> [Option<Ticket>; 3] {
        self.lanes.each_mut().map(|lane| {
            while let Some(&ticket) = lane.front() {
                if is_live(ticket) {
                    return Some(ticket);
                }
                lane.pop_front();
            }
            None
        })
    }

    /// Removes the front of `priority`'s lane (the caller found it live there).
    pub(crate) fn pop_front(&mut self, priority: Priority) {
        self.lanes[priority.index()].pop_front();
        self.live[priority.index()] -= 1;
    }

    /// Live waiters per lane, highest first.
    pub(crate) fn counts(&self) -> [usize; 3] {
        self.live
    }

    pub(crate) fn total(&self) -> usize {
        self.live.iter().sum()
    }
}
