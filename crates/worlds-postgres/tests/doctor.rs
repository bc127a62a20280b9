//! `doctor()` and `lease_holder` on a real database: the report's figures and findings, judged
//! by the lease passed in.

mod common;

use std::time::Duration;

use common::pair::Pair;
use worlds_postgres::{FindingKind, HolderState, PostgresOptions, SchemaStatus, Severity};

#[tokio::test]
async fn the_report_counts_members_and_runs_and_judges_by_the_lease_given() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    let options = |lease| PostgresOptions {
        lease_duration: lease,
        ..common::options(&pair.schema)
    };
    let report = worlds_postgres::doctor(&common::url(), &options(Duration::from_secs(30)))
        .await
        .unwrap();
    let probe = report.probe.as_ref().unwrap();
    assert_eq!(
        probe.schema,
        SchemaStatus::At(worlds_postgres::SCHEMA_VERSION)
    );
    let health = report.health.as_ref().unwrap();
    assert_eq!(health.live_members(), 2);
    assert_eq!(health.unfinished, 1);
    assert_eq!(health.orphaned, 0);
    assert!(report.healthy(), "{:?}", report.findings);

    let holder = pair.a.lease_holder(&run).await.unwrap().unwrap();
    assert_eq!(holder.member_id, pair.a.member_id());
    assert_eq!(holder.state, HolderState::Live);

    // A member that recorded no lease of its own is judged by the lease given.
    pair.a.stop_heartbeat();
    pair.b.stop_heartbeat();
    sqlx::query("UPDATE members SET lease_ms = NULL, heartbeat_at = now() - interval '5 seconds'")
        .execute(&common::sql(&pair.schema))
        .await
        .unwrap();
    let short = worlds_postgres::doctor(&common::url(), &options(Duration::from_secs(1)))
        .await
        .unwrap();
    let health = short.health.as_ref().unwrap();
    assert_eq!(health.live_members(), 0);
    assert_eq!(health.orphaned, 1);
    let kinds: Vec<_> = short
        .findings
        .iter()
        .map(|f| (f.severity, f.kind))
        .collect();
    assert!(
        kinds.contains(&(Severity::Problem, FindingKind::NoLiveMember)),
        "{kinds:?}"
    );
    pair.finish().await;
}

#[tokio::test]
async fn a_missing_schema_and_a_silent_server_are_findings() {
    if !common::database_up().await {
        return;
    }
    let missing = common::fresh_schema();
    let report = worlds_postgres::doctor(&common::url(), &common::options(&missing))
        .await
        .unwrap();
    assert_eq!(report.probe.unwrap().schema, SchemaStatus::Missing);
    assert!(report.health.is_none());
    assert_eq!(report.findings[0].kind, FindingKind::SchemaMissing);

    let report = worlds_postgres::doctor(
        "postgres://postgres@127.0.0.1:1/test",
        &common::options(&missing),
    )
    .await
    .unwrap();
    assert!(report.probe.is_none());
    let finding = &report.findings[0];
    assert_eq!(finding.kind, FindingKind::Unreachable);
    assert!(finding.found.contains("127.0.0.1:1"), "{finding}");
    assert!(finding
        .action
        .as_deref()
        .unwrap()
        .starts_with("check that the server is running"));
}
