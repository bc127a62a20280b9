//! Segment garbage collection: giving back the space the records of removed runs take in the
//! segments.
//!
//! The store keeps, per segment, its bytes, the bytes of records of removed runs in it (*dead*
//! bytes) and the bytes of its tombstones; and per run (one small entry each) the segments its
//! records sit in and their bytes there. Both are built while the segments are replayed on
//! open, and kept up by compaction as it moves records into a segment: a tombstone moved there
//! turns its run's bytes in every segment into dead bytes and drops the run's entry. (Only a
//! tombstone in a segment counts: one still in the WAL leaves the run's records live.)
//!
//! After each compaction, the background job rewrites at most one segment (the oldest worth
//! it): one whose dead bytes, plus the bytes of the tombstones it may drop, pass half of its
//! bytes. Its live records are written, in their order, to `segments/{n}.ndjson.tmp`, which is
//! synced and renamed over `segments/{n}.ndjson`, and the directory is synced; a segment left
//! with nothing is removed instead (the newest is kept, empty: compaction appends to it). The
//! segment keeps its number, so every run's records are still read in the order written.
//!
//! Which records of segment `n` are dead is read off the segment itself and the run entries: a
//! record is dead if a tombstone of its run follows it in the segment, or if its run's entry
//! (its incarnation since its last compacted tombstone) holds nothing in segment `n`. What was
//! dropped must come to the dead bytes counted for the segment; if it does not, nothing is
//! renamed and collection stops until the store is reopened.
//!
//! A tombstone is dropped only if no segment before this one holds a dead byte (so no record of
//! its run before it is left anywhere: a rewrite drops this segment's own) and its run has no
//! run log or streams left over from a removal a crash interrupted; else it is kept. Records
//! after a tombstone (the run created again with the same id) stay after it, since order is
//! kept. A tombstone kept for a leftover is not retried until the store is reopened.
//!
//! Crash safety: until the rename, the segment is untouched (a stale `.tmp` is deleted on
//! open); after it, either version reads back to the same runs, and the directory is synced
//! before the next rewrite, so a tombstone is never dropped while an older segment could still
//! come back with records before it. Rewrites hold the compaction lock and never run while
//! `state/wal.next.ndjson` exists: no compaction is in flight, so no compaction mark
//! (`state/compacting.json`) can name a length of the segment from before the rewrite (the next
//! compaction notes the new length).
//!
//! A read-only open racing a rewrite reads each segment either before or after it; it may see
//! a removed run again (its records read from an old copy, its tombstone dropped from a new
//! one) or refuse a run created again with the same id; opening again sees the directory as it
//! is.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::WorldError;
use crate::store::file::{
    io_error, log_path, read_whole_lines, rewrite_path, scan_headers_at, segment_number,
    segment_path, sync_dir,
};

use super::compact::{Disk, Segment};
use super::Inner;

/// Bytes of a segment read at a time while it is rewritten.
const CHUNK: usize = 8 << 20;

/// The segments one run's records sit in (oldest first), and their bytes in each. Segment
/// numbers and bytes are `u32` to keep the entry small: past `u32::MAX` segments collection
/// stops; bytes saturate (a run's bytes in one segment are far below 4 GiB).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Placement {
    /// One segment (by far the most common).
    One { segment: u32, bytes: u32 },
    /// Several.
    Many(Box<[(u32, u32)]>),
}

impl Placement {
    fn add(&mut self, at: u32, len: u32) {
        match self {
            Placement::One { segment, bytes } if *segment == at => {
                *bytes = bytes.saturating_add(len)
            }
            Placement::One { segment, bytes } => {
                *self = Placement::Many(Box::new([(*segment, *bytes), (at, len)]))
            }
            Placement::Many(all) => match all.last_mut() {
                Some((segment, bytes)) if *segment == at => *bytes = bytes.saturating_add(len),
                _ => {
                    // Rare (a run whose records span segments), so a boxed slice, not a Vec:
                    // the entry stays 16 bytes.
                    let mut grown = all.to_vec();
                    grown.push((at, len));
                    *all = grown.into_boxed_slice();
                }
            },
        }
    }

    fn holds(&self, at: u32) -> bool {
        match self {
            Placement::One { segment, .. } => *segment == at,
            Placement::Many(all) => all.iter().any(|(segment, _)| *segment == at),
        }
    }

    fn each(&self, mut f: impl FnMut(u32, u32)) {
        match self {
            Placement::One { segment, bytes } => f(*segment, *bytes),
            Placement::Many(all) => all.iter().for_each(|&(s, b)| f(s, b)),
        }
    }
}

/// What one segment holds, in bytes (newlines included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct SegmentBytes {
    /// Every record.
    pub(super) total: u64,
    /// Records of removed runs (their tombstone is in this or a later segment).
    pub(super) dead: u64,
    /// Tombstones.
    pub(super) tombstones: u64,
    /// Of the tombstones, those a rewrite kept although it could have dropped them (their run
    /// has leftovers): not counted as reclaimable again.
    pinned: u64,
}

/// What a [`HybridStore::collect_segment`](super::HybridStore::collect_segment) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedSegment {
    /// The segment's number.
    pub segment: u64,
    /// Its bytes before.
    pub before: u64,
    /// Its bytes after (0: removed, or emptied if it is the newest).
    pub after: u64,
}

/// The liveness of every segment's records (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Liveness {
    runs: HashMap<Box<str>, Placement>,
    segments: BTreeMap<u64, SegmentBytes>,
    /// Why collection stopped (until the store is reopened), if it did.
    off: Option<String>,
}

impl Liveness {
    /// Counts one record of `run_id`, `len` bytes, just put in segment `segment`.
    pub(super) fn record(&mut self, segment: u64, run_id: &str, len: u64, tombstone: bool) {
        let stats = self.segments.entry(segment).or_default();
        stats.total += len;
        if tombstone {
            stats.tombstones += len;
            if let Some(placement) = self.runs.remove(run_id) {
                placement.each(|at, bytes| {
                    self.segments.entry(u64::from(at)).or_default().dead += u64::from(bytes);
                });
            }
            return;
        }
        let Ok(at) = u32::try_from(segment) else {
            self.off = Some(format!("segment number {segment} is too large to track"));
            return;
        };
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        match self.runs.get_mut(run_id) {
            Some(placement) => placement.add(at, len),
            None => {
                self.runs.insert(
                    run_id.into(),
                    Placement::One {
                        segment: at,
                        bytes: len,
                    },
                );
            }
        }
    }

    /// The heap bytes of the run entries (the per-run cost): the table's slots and control
    /// bytes, each id's allocation and each spilled list of segments.
    pub(super) fn run_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(Box<str>, Placement)>() + 1;
        let mut bytes = self.runs.capacity() * slot;
        for (id, placement) in &self.runs {
            bytes += id.len();
            if let Placement::Many(all) = placement {
                bytes += std::mem::size_of_val(&**all);
            }
        }
        bytes
    }

    /// The oldest segment worth rewriting, and whether every segment before it is clean (holds
    /// no dead byte).
    fn candidate(&self) -> Option<(u64, bool)> {
        let mut earlier_clean = true;
        for (&number, stats) in &self.segments {
            let droppable = if earlier_clean {
                stats.tombstones - stats.pinned
            } else {
                0
            };
            let reclaimable = stats.dead + droppable;
            if reclaimable > 0 && reclaimable * 2 > stats.total {
                return Some((number, earlier_clean));
            }
            earlier_clean &= stats.dead == 0;
        }
        None
    }
}

/// What the second pass over a segment kept and dropped, in bytes.
#[derive(Debug, Default)]
struct Kept {
    live: u64,
    tombstones: u64,
    dropped_dead: u64,
    dropped_tombstones: u64,
    pinned: u64,
}

impl Inner {
    /// Rewrites or removes at most one segment (see the module docs). `None` if none needed it
    /// (or collection is off).
    pub(super) fn collect_segment(&self) -> Result<Option<CollectedSegment>, WorldError> {
        let mut disk = self.disk.lock();
        if disk.broken.is_some() || disk.on_disk.is_some() || disk.liveness.off.is_some() {
            return Ok(None);
        }
        // A compaction in flight (or one a crash interrupted, not finished yet) may have noted
        // a segment's length: leave the segments alone until it is done.
        if self.next_path.exists() {
            return Ok(None);
        }
        let Some((number, earlier_clean)) = disk.liveness.candidate() else {
            return Ok(None);
        };
        let result = self.rewrite(&mut disk, number, earlier_clean);
        if let Err(e) = &result {
            disk.liveness.off = Some(e.to_string());
        }
        result.map(Some)
    }

    /// The newest segment's number, if there is one.
    fn newest_segment(disk: &Disk) -> Option<u64> {
        match &disk.segment {
            Some(segment) => Some(segment.number()),
            None => disk.newest.as_deref().and_then(segment_number),
        }
    }

    fn rewrite(
        &self,
        disk: &mut Disk,
        number: u64,
        earlier_clean: bool,
    ) -> Result<CollectedSegment, WorldError> {
        let path = segment_path(&self.segments, number);
        let stats = disk.liveness.segments[&number];
        let newest = Self::newest_segment(disk) == Some(number);
        // Even a segment counted wholly dead is read through: what is dropped is checked
        // against the count before anything is removed.
        let tmp = rewrite_path(&path);
        let kept = match self.write_live(disk, number, &path, &tmp, earlier_clean) {
            Ok(kept) => kept,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let after = kept.live + kept.tombstones;
        if kept.dropped_dead != stats.dead
            || after + kept.dropped_dead + kept.dropped_tombstones != stats.total
        {
            let _ = fs::remove_file(&tmp);
            return Err(WorldError::Internal(format!(
                "hybrid store: {} holds {} dead bytes of {} where {} of {} were counted; not rewriting segments until the store is reopened",
                path.display(),
                kept.dropped_dead,
                after + kept.dropped_dead + kept.dropped_tombstones,
                stats.dead,
                stats.total
            )));
        }
        if after == 0 && !newest {
            let _ = fs::remove_file(&tmp);
            remove_segment(&self.segments, &path)?;
            disk.liveness.segments.remove(&number);
        } else {
            fs::rename(&tmp, &path).map_err(|e| io_error("could not rename", &tmp, e))?;
            sync_dir(&self.segments)?;
            disk.liveness.segments.insert(
                number,
                SegmentBytes {
                    total: after,
                    dead: 0,
                    tombstones: kept.tombstones,
                    pinned: kept.pinned,
                },
            );
            if newest {
                // Compaction appends to the new file, from its new length.
                if disk.segment.is_some() {
                    disk.segment = Some(Segment::open(&self.segments, Some(&path))?);
                }
            }
        }
        tracing::info!(
            segment = %path.display(),
            before = stats.total,
            after,
            "hybrid store: rewrote a segment without the records of removed runs"
        );
        Ok(CollectedSegment {
            segment: number,
            before: stats.total,
            after,
        })
    }

    /// Writes the live records of segment `number` (at `path`) to `tmp`, synced; returns what
    /// it kept and dropped.
    fn write_live(
        &self,
        disk: &Disk,
        number: u64,
        path: &Path,
        tmp: &Path,
        earlier_clean: bool,
    ) -> Result<Kept, WorldError> {
        let at = u32::try_from(number).ok();
        // First pass: where each run's last tombstone in this segment is.
        let mut last_tombstone: HashMap<String, usize> = HashMap::new();
        let mut file = File::open(path).map_err(|e| io_error("could not read", path, e))?;
        let lines = read_whole_lines(&mut file, path, CHUNK, |bytes, base| {
            scan_headers_at(path, bytes, base, |offset, header| {
                if header.removed {
                    last_tombstone.insert(header.run_id.into_owned(), offset);
                }
                Ok(())
            })?;
            Ok(())
        })?;
        if lines.torn() {
            return Err(WorldError::Internal(format!(
                "hybrid store: {} has an incomplete line at byte offset {}; not rewriting it",
                path.display(),
                lines.end
            )));
        }
        // Second pass: the live records, in order.
        let mut out = std::io::BufWriter::with_capacity(
            1 << 20,
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(tmp)
                .map_err(|e| io_error("could not create", tmp, e))?,
        );
        let mut kept = Kept::default();
        let mut leftovers: HashMap<String, bool> = HashMap::new();
        let mut file = File::open(path).map_err(|e| io_error("could not read", path, e))?;
        read_whole_lines(&mut file, path, CHUNK, |bytes, base| {
            let mut failed = None;
            scan_headers_at(path, bytes, base, |offset, header| {
                let start = offset - base;
                let end = bytes[start..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |i| start + i + 1);
                let len = (end - start) as u64;
                let run_id: &str = &header.run_id;
                let keep = if header.removed {
                    let drop = earlier_clean && {
                        let left = *leftovers
                            .entry(run_id.to_owned())
                            .or_insert_with(|| self.has_leftovers(run_id));
                        if left {
                            kept.pinned += len;
                        }
                        !left
                    };
                    if drop {
                        kept.dropped_tombstones += len;
                    } else {
                        kept.tombstones += len;
                    }
                    !drop
                } else {
                    let live = at.is_some_and(|at| {
                        disk.liveness
                            .runs
                            .get(run_id)
                            .is_some_and(|placement| placement.holds(at))
                    }) && last_tombstone.get(run_id).is_none_or(|&t| t < offset);
                    if live {
                        kept.live += len;
                    } else {
                        kept.dropped_dead += len;
                    }
                    live
                };
                if keep {
                    if let Err(e) = out.write_all(&bytes[start..end]) {
                        failed = Some(e);
                    }
                }
                Ok(())
            })?;
            match failed {
                Some(e) => Err(io_error("could not write", tmp, e)),
                None => Ok(()),
            }
        })?;
        let file = out
            .into_inner()
            .map_err(|e| io_error("could not write", tmp, e.into_error()))?;
        file.sync_all()
            .map_err(|e| io_error("could not sync", tmp, e))?;
        Ok(kept)
    }

    /// True if `run_id` has a run log or streams on disk: left by a removal a crash
    /// interrupted (the next open deletes them for a run whose tombstone it finds), or not yet
    /// deleted by a removal in progress. Its tombstone must stay.
    fn has_leftovers(&self, run_id: &str) -> bool {
        log_path(&self.root.join("workflows"), run_id).exists()
            || self.root.join("streams").join(run_id).exists()
    }
}

/// Removes a segment that holds nothing live, and syncs the directory.
fn remove_segment(dir: &Path, path: &Path) -> Result<(), WorldError> {
    fs::remove_file(path).map_err(|e| io_error("could not remove", path, e))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_spills_only_past_one_segment() {
        assert_eq!(std::mem::size_of::<Placement>(), 16);
        let mut placement = Placement::One {
            segment: 1,
            bytes: 10,
        };
        placement.add(1, 5);
        assert_eq!(
            placement,
            Placement::One {
                segment: 1,
                bytes: 15
            }
        );
        placement.add(2, 7);
        assert!(placement.holds(1) && placement.holds(2) && !placement.holds(3));
        let mut all = Vec::new();
        placement.each(|s, b| all.push((s, b)));
        assert_eq!(all, vec![(1, 15), (2, 7)]);
    }

    #[test]
    fn a_tombstone_turns_its_runs_bytes_dead_and_a_new_run_starts_afresh() {
        let mut liveness = Liveness::default();
        liveness.record(1, "wrun_a", 100, false);
        liveness.record(1, "wrun_b", 50, false);
        liveness.record(2, "wrun_a", 30, false);
        liveness.record(2, "wrun_a", 20, true);
        liveness.record(2, "wrun_a", 40, false);
        assert_eq!(liveness.segments[&1].dead, 100);
        assert_eq!(liveness.segments[&2].dead, 30);
        assert_eq!(liveness.segments[&2].total, 90);
        assert_eq!(liveness.segments[&2].tombstones, 20);
        assert!(liveness.runs["wrun_a"].holds(2) && !liveness.runs["wrun_a"].holds(1));
        // Segment 1 is 2/3 dead.
        assert_eq!(liveness.candidate(), Some((1, true)));
    }

    /// Memory the run entries take: reported per run for 100 000 runs.
    #[test]
    fn run_entries_stay_small() {
        let mut liveness = Liveness::default();
        let runs = 100_000;
        for i in 0..runs {
            let id = format!("wrun_01J{i:023}");
            liveness.record(1 + i / 5_000, &id, 900, false);
        }
        let per_run = liveness.run_bytes() / runs as usize;
        eprintln!(
            "run entries: {} bytes for {runs} runs, {per_run} per run",
            liveness.run_bytes()
        );
        assert!(per_run < 128, "{per_run} bytes per run");
    }
}
