//! The fast path of the writer: appends to runs this store holds, checked against the state it
//! cached at its last write and written with one self-committing statement that applies only
//! if the run's row is still as cached.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use sqlx::PgConnection;
use worlds_engine::store::Appended;
use worlds_engine::{Event, WorldError};

use super::rows::Rows;
use super::{hook_position, Working};
use crate::PostgresStore;

impl PostgresStore {
    /// The fast path: the appends to runs this store holds and whose state it has cached
    /// (nearly all of them: a run's steps are recorded by its holder), checked against that
    /// state here and written with one statement that commits on its own (one round trip
    /// instead of four). The statement writes a run only if its row still has the `next_seq`
    /// and the lease epoch of the cached state; a run whose row moved (another process wrote
    /// to it, or took it over) writes nothing and its appends go to the locked transaction,
    /// as do appends that change hooks (their tokens are checked there) and any the cached
    /// state refuses (the row may have moved on).
    ///
    /// `flush` as for [`write_held`](Self::write_held). Returns, per append, its answer if the
    /// fast path settled it.
    pub(super) async fn try_fast(
        &self,
        conn: &mut PgConnection,
        work: &[(String, Vec<Event>)],
        flush: bool,
    ) -> Vec<Option<Result<Appended, WorldError>>> {
        let me = self.inner.member_id.clone();
        let mut results: Vec<Option<Result<Appended, WorldError>>> =
            work.iter().map(|_| None).collect();
        let mut by_run: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, (run_id, _)) in work.iter().enumerate() {
            by_run.entry(run_id.as_str()).or_default().push(i);
        }
        let no_tokens = FxHashMap::default();
        let mut runs: BTreeMap<String, Working> = BTreeMap::new();
        let mut accepted: FxHashMap<String, Vec<(usize, Appended)>> = FxHashMap::default();
        for (run_id, indexes) in by_run {
            let changes_hooks = indexes
                .iter()
                .any(|&i| work[i].1.iter().any(|e| hook_position(&e.kind).is_some()));
            if changes_hooks {
                continue;
            }
            let Some((next_seq, state_seq, epoch, state)) = self.take_cached_held(run_id) else {
                continue;
            };
            let mut one = BTreeMap::new();
            one.insert(
                run_id.to_owned(),
                Working::new((next_seq, state_seq), Some(me.clone()), epoch, state),
            );
            let mut answers = Vec::with_capacity(indexes.len());
            for &i in &indexes {
                match self.check_one(&me, &mut one, &no_tokens, run_id, work[i].1.clone()) {
                    Ok(appended) => answers.push((i, appended)),
                    Err(_) => break,
                }
            }
            if answers.len() < indexes.len() {
                continue;
            }
            runs.append(&mut one);
            accepted.insert(run_id.to_owned(), answers);
        }
        if !runs.values().any(|w| !w.events.is_empty()) {
            // Nothing to write (or nothing the fast path may write): all to the transaction.
            return results;
        }
        let written = match Rows::of(&runs) {
            Ok(rows) => self.write_held(conn, &me, &rows, flush).await,
            Err(e) => Err(e),
        };
        let written = match written {
            Ok(written) => written,
            Err(WorldError::Unavailable(message)) => {
                // The statement may have committed: every caller reads its run back.
                for answers in accepted.values() {
                    for (i, _) in answers {
                        results[*i] = Some(Err(WorldError::Unavailable(message.clone())));
                    }
                }
                return results;
            }
            // Nothing was written: the transaction takes them all.
            Err(_) => return results,
        };
        for (run_id, closed_streams) in written {
            let (Some(w), Some(answers)) = (runs.remove(&run_id), accepted.remove(&run_id)) else {
                continue;
            };
            self.committed(&me, &run_id, w, closed_streams);
            for (i, appended) in answers {
                results[i] = Some(Ok(appended));
            }
        }
        results
    }
}
