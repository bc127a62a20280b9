//! Leases and fencing between two stores on one schema: one claim per run, takeover after a
//! lapsed heartbeat with a higher epoch, the old holder's append refused; concurrent appends;
//! what a member starting up says about the runs a stopped member's lease still holds.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use worlds_engine::store::{EventStore, LeaseStore};
use worlds_engine::{ErrorKind, EventKind, Payload, WorldError};
use worlds_postgres::{PostgresOptions, PostgresStore};

use common::pair::Pair;

fn any(_: &str, _: Option<&str>) -> bool {
    true
}

#[tokio::test]
async fn only_one_store_claims_an_unowned_run_and_the_creator_holds_its_runs() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let own = pair.create(&pair.a).await;
    assert_eq!(pair.a.held_epoch(&own), Some(1));
    // Held by a live member: nobody claims it.
    assert!(pair.b.claim_runs(&any).await.unwrap().is_empty());
    assert!(pair.a.claim_runs(&any).await.unwrap().is_empty());

    // A run nobody holds: both claim at once, one gets it.
    let free = pair.create(&pair.a).await;
    sqlx::query("UPDATE runs SET owner = NULL WHERE run_id = $1")
        .bind(&free)
        .execute(&common::sql(&pair.schema))
        .await
        .unwrap();
    let (by_a, by_b) = tokio::join!(pair.a.claim_runs(&any), pair.b.claim_runs(&any));
    let (by_a, by_b) = (by_a.unwrap(), by_b.unwrap());
    assert_eq!(by_a.len() + by_b.len(), 1, "{by_a:?} {by_b:?}");
    let winner = if by_a.is_empty() { &pair.b } else { &pair.a };
    assert_eq!(
        winner.held_epoch(&free),
        Some(2),
        "every acquisition bumps the epoch"
    );
    // A workflow this process cannot run is left alone.
    sqlx::query("UPDATE runs SET owner = NULL WHERE run_id = $1")
        .bind(&free)
        .execute(&common::sql(&pair.schema))
        .await
        .unwrap();
    assert!(pair
        .b
        .claim_runs(&|_: &str, _: Option<&str>| false)
        .await
        .unwrap()
        .is_empty());
    pair.finish().await;
}

#[tokio::test]
async fn a_lapsed_holder_is_taken_over_and_its_append_is_refused_with_lease_lost() {
    let lease = Duration::from_millis(600);
    let Some(pair) = Pair::new(lease).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    pair.a
        .append(&run, vec![pair.schedule(&run, 0)])
        .await
        .unwrap();
    // A keeps its lease while its heartbeat runs.
    tokio::time::sleep(lease * 2).await;
    assert!(pair.b.claim_runs(&any).await.unwrap().is_empty());

    pair.a.stop_heartbeat();
    tokio::time::sleep(lease + Duration::from_millis(400)).await;
    assert_eq!(pair.b.claim_runs(&any).await.unwrap(), vec![run.clone()]);
    let epoch_a = pair.a.held_epoch(&run).unwrap();
    let epoch_b = pair.b.held_epoch(&run).unwrap();
    assert!(epoch_b > epoch_a, "{epoch_b} > {epoch_a}");
    // The old holder hears of the takeover when it looks for changes, and forgets the run (so
    // the engine lets go of it, and a wait for its result ends).
    assert_eq!(pair.a.external_changes().await.unwrap(), vec![run.clone()]);
    assert_eq!(pair.a.held_epoch(&run), None);

    let before = pair.b.history(&run, 0).await.unwrap().len();
    let refused = pair.a.append(&run, vec![pair.schedule(&run, 1)]).await;
    match refused {
        Err(WorldError::LeaseLost { run_id }) => assert_eq!(run_id, run),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    let err = WorldError::LeaseLost {
        run_id: run.clone(),
    };
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        pair.b.history(&run, 0).await.unwrap().len(),
        before,
        "nothing written"
    );
    assert_eq!(
        pair.a.held_epoch(&run),
        None,
        "the old holder forgets the run"
    );

    // The new holder appends. The old one stays fenced: having forgotten the run, it may only
    // deliver what comes from outside a run (here a cancellation), which the new holder sees
    // as an external change.
    pair.b
        .append(&run, vec![pair.schedule(&run, 1)])
        .await
        .unwrap();
    assert!(pair.b.external_changes().await.unwrap().is_empty());
    let late = pair.a.append(&run, vec![pair.schedule(&run, 2)]).await;
    assert!(
        matches!(late, Err(WorldError::LeaseLost { .. })),
        "{late:?}"
    );
    assert!(pair.b.external_changes().await.unwrap().is_empty());
    pair.a
        .append(&run, vec![pair.cancellation(&run)])
        .await
        .unwrap();
    assert_eq!(pair.b.external_changes().await.unwrap(), vec![run.clone()]);
    assert!(pair.b.external_changes().await.unwrap().is_empty());
    pair.finish().await;
}

#[tokio::test]
async fn a_run_taken_over_is_never_vouched_for_by_the_old_holders_fresh_heartbeat() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    assert!(pair.a.lease_confirmed(&run));
    // Taken over while the holder was not looking (as when it was paused past its lease and
    // heard of the takeover before its first heartbeat after waking).
    sqlx::query("UPDATE runs SET owner = $2, epoch = epoch + 1 WHERE run_id = $1")
        .bind(&run)
        .bind(pair.b.member_id())
        .execute(&common::sql(&pair.schema))
        .await
        .unwrap();
    assert_eq!(pair.a.external_changes().await.unwrap(), vec![run.clone()]);
    // Its heartbeat is fresh and it has seen no lapse, yet the run is no longer its own.
    assert!(
        !pair.a.lease_confirmed(&run),
        "a fresh heartbeat vouches only for runs the member still holds"
    );
    assert!(matches!(
        pair.a.confirm_lease(&run).await,
        Err(WorldError::LeaseLost { .. })
    ));
    pair.finish().await;
}

#[tokio::test]
async fn concurrent_appends_never_share_a_seq_and_a_step_completes_once() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    pair.a
        .append(
            &run,
            vec![
                pair.schedule(&run, 0),
                pair.event(
                    &run,
                    EventKind::ActivityStarted {
                        position: 0,
                        attempt: 1,
                    },
                ),
            ],
        )
        .await
        .unwrap();
    let complete = |v: i64| {
        pair.event(
            &run,
            EventKind::ActivityCompleted {
                position: 0,
                attempt: 1,
                output: Payload::from(json!(v)),
            },
        )
    };
    // Two stores record the same step's completion at once: exactly one lands.
    let (one, two) = tokio::join!(
        pair.a.append(&run, vec![complete(1)]),
        pair.b.append(&run, vec![complete(2)])
    );
    assert_eq!(
        usize::from(one.is_ok()) + usize::from(two.is_ok()),
        1,
        "{one:?} {two:?}"
    );
    let refused = if one.is_ok() { two } else { one };
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::Conflict);

    // Many concurrent appends from both stores: the holder's land at dense, distinct seqs; the
    // other store's are refused, since it does not hold the run.
    let mut tasks = Vec::new();
    for i in 1..=20u32 {
        let store = if i % 2 == 0 {
            pair.a.clone()
        } else {
            pair.b.clone()
        };
        let event = pair.schedule(&run, i);
        let run = run.clone();
        tasks.push((
            i,
            tokio::spawn(async move { store.append(&run, vec![event]).await }),
        ));
    }
    let mut seqs = Vec::new();
    for (i, task) in tasks {
        let appended = task.await.unwrap();
        if i % 2 == 0 {
            seqs.push(appended.unwrap().events[0].seq);
        } else {
            assert!(
                matches!(appended, Err(WorldError::LeaseLost { .. })),
                "{appended:?}"
            );
        }
    }
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 10);
    let history = pair.a.history(&run, 0).await.unwrap();
    let all: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(all, (0..history.len() as u64).collect::<Vec<_>>());

    // The database itself refuses a second event at a taken position.
    let dup = sqlx::query("INSERT INTO events (run_id, seq, body) VALUES ($1, 0, '{}')")
        .bind(&run)
        .execute(&common::sql(&pair.schema))
        .await;
    assert!(dup.is_err());
    pair.finish().await;
}

#[tokio::test]
async fn an_unreachable_server_is_reported_with_host_and_port_quickly() {
    let started = std::time::Instant::now();
    let err = PostgresStore::connect(
        "postgres://postgres@127.0.0.1:1/test",
        PostgresOptions {
            connect_timeout: Duration::from_secs(2),
            ..PostgresOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}

#[tokio::test]
async fn a_schema_from_a_newer_build_is_refused_naming_both_versions() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let store = common::store(&schema, common::options(&schema)).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99, 'future', true, '\\x00', 0)",
    )
    .execute(&common::sql(&schema))
    .await
    .unwrap();
    store.stop_heartbeat();
    store.close().await.unwrap();
    let err = PostgresStore::connect(&common::url(), common::options(&schema))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("99")
            && text.contains(&format!("version {}", worlds_postgres::SCHEMA_VERSION)),
        "{text}"
    );
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    common::drop_schema(&schema).await;
}

#[tokio::test]
async fn a_visitor_joins_no_world_and_may_only_deliver_from_outside() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    // No schema there: refused, not created.
    let missing = common::fresh_schema();
    let err = PostgresStore::connect_visitor(&common::url(), common::options(&missing))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("worlds db migrate"), "{err}");

    let run = pair.create(&pair.a).await;
    let visitor = PostgresStore::connect_visitor(&common::url(), common::options(&pair.schema))
        .await
        .unwrap();
    let members: i64 = sqlx::query_scalar("SELECT count(*) FROM members")
        .fetch_one(&common::sql(&pair.schema))
        .await
        .unwrap();
    assert_eq!(members, 2, "the pair's members only");
    assert_eq!(visitor.history(&run, 0).await.unwrap().len(), 2);
    // It drives nothing: a step's record is refused; a child's result is delivered.
    let step = visitor.append(&run, vec![pair.schedule(&run, 0)]).await;
    assert!(
        matches!(step, Err(WorldError::LeaseLost { .. })),
        "{step:?}"
    );
    let child = pair.event(
        &run,
        EventKind::ChildWorkflowCompleted {
            position: 3,
            child_id: "wrun_child".into(),
            output: Payload::from(json!(1)),
        },
    );
    assert_eq!(
        visitor.append(&run, vec![child]).await.unwrap().events[0].seq,
        2
    );
    // It takes over nothing, not even a run nobody holds.
    pair.a.close().await.unwrap();
    assert!(visitor.claim_runs(&any).await.unwrap().is_empty());
    assert_eq!(pair.b.claim_runs(&any).await.unwrap(), vec![run.clone()]);
    visitor.close().await.unwrap();
    pair.finish().await;
}

/// An append the holder accepted at call time that cannot land where it was accepted (another
/// process wrote to the run first) poisons the run: the holder's reads of its own records and
/// its later appends answer `Unavailable` — the engine's cue to read the run back — until the
/// run's whole history is read back; then appends are checked against the database again.
#[tokio::test]
async fn an_accepted_append_that_cannot_land_poisons_the_run_until_it_is_read_back() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    // Another process delivers a cancellation; the holder has not looked for changes yet.
    pair.b
        .append(&run, vec![pair.cancellation(&run)])
        .await
        .unwrap();
    let accepted = pair
        .a
        .append_nowait(&run, vec![pair.schedule(&run, 0)])
        .await
        .expect("accepted against the state in memory");
    assert_eq!(accepted.events[0].seq, 2);

    let flushed = pair.a.wait_durable(&run).await;
    assert!(
        matches!(flushed, Err(WorldError::Unavailable(_))),
        "{flushed:?}"
    );
    let tip = pair.a.history_tip(&run, 0).await;
    assert!(matches!(tip, Err(WorldError::Unavailable(_))), "{tip:?}");
    let later = pair.a.append(&run, vec![pair.schedule(&run, 1)]).await;
    assert!(
        matches!(later, Err(WorldError::Unavailable(_))),
        "{later:?}"
    );

    // Read back whole: what landed is the other process's cancellation, not the lost append.
    let history = pair.a.history(&run, 0).await.unwrap();
    let kinds: Vec<&str> = history.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(
        kinds,
        ["workflow_queued", "workflow_started", "workflow_cancelled"]
    );
    // Checked against the database again: the run is cancelled.
    let after = pair.a.append(&run, vec![pair.schedule(&run, 1)]).await;
    assert_eq!(after.map(|_| ()).unwrap_err().kind(), ErrorKind::Conflict);
    pair.finish().await;
}

/// What a member starting up writes about the members that stopped without shutting down
/// (`kill -9`, a crash) and still hold unfinished runs: who, how many runs, and in how many
/// seconds their leases end and the runs are taken over. A member that shut down handed its
/// runs over at once and is not named.
#[tokio::test]
async fn a_member_starting_logs_how_long_a_stopped_members_runs_wait_for_its_lease() {
    let lease = Duration::from_secs(30);
    let Some(pair) = Pair::new(lease).await else {
        return;
    };
    // `a` holds three unfinished runs and stops without shutting down: its heartbeat stops,
    // its row and leases stay.
    for _ in 0..3 {
        pair.create(&pair.a).await;
    }
    pair.a.stop_heartbeat();
    // `b` holds two and shuts down.
    for _ in 0..2 {
        pair.create(&pair.b).await;
    }
    pair.b.close().await.unwrap();
    // 20 s of the 30 s lease have passed since the last heartbeat of every member left.
    sqlx::query("UPDATE members SET heartbeat_at = now() - interval '20 seconds'")
        .execute(&common::sql(&pair.schema))
        .await
        .unwrap();

    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || Sink(sink.clone()))
        .finish();
    let next = {
        let _log = tracing::subscriber::set_default(subscriber);
        common::store(
            &pair.schema,
            PostgresOptions {
                lease_duration: lease,
                ..common::options(&pair.schema)
            },
        )
        .await
    };
    let log = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
    let line = log
        .lines()
        .find(|l| l.contains(pair.a.member_id()))
        .unwrap_or_else(|| panic!("no line names the stopped member:\n{log}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(
        line.contains("holds 3 unfinished run(s)")
            && line.contains("taken over when its lease of 30.0 s ends, in "),
        "{line}"
    );
    let wait: f64 = line
        .split("ends, in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|secs| secs.parse().ok())
        .unwrap_or_else(|| panic!("no wait in {line}"));
    assert!((5.0..=10.0).contains(&wait), "{wait} s: {line}");
    assert!(
        !log.contains(pair.b.member_id()),
        "the member that shut down is named:\n{log}"
    );
    next.stop_heartbeat();
    next.close().await.unwrap();
    pair.finish().await;
}

/// A writer into a buffer the test reads.
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
