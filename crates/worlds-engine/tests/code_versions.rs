//! Code versions: a world given one records it in every run it accepts, and runs are listed by
//! the version that accepted them.

use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::WorkflowQueryFilter;

#[tokio::test]
async fn runs_record_the_code_version_that_accepted_them() {
    let hello = workflow("hello", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    let mut config = WorldConfig::memory();
    config.code_version = Some("2026.11.27".into());
    let t = TestWorld::with_config(config).await;
    t.register(&hello).unwrap();
    let run = t
        .execute(&hello, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.code_version.as_deref(), Some("2026.11.27"));

    let listed = t
        .list_runs(WorkflowQueryFilter::new().code_version("2026.11.27"))
        .await
        .unwrap();
    assert_eq!(listed.data.len(), 1);
    assert!(t
        .list_runs(WorkflowQueryFilter::new().code_version("2026.11.26"))
        .await
        .unwrap()
        .data
        .is_empty());

    // Without a version, runs record none.
    let plain = TestWorld::new().await;
    plain.register(&hello).unwrap();
    let run = plain
        .execute(&hello, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let state = plain.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.code_version, None);
}

#[test]
fn a_blank_code_version_is_refused() {
    for bad in ["", "   ", "a\0b", &"x".repeat(201)] {
        let mut config = WorldConfig::memory();
        config.code_version = Some(bad.to_owned());
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("code_version"), "{error}");
    }
}
