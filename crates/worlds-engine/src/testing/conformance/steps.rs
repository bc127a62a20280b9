//! Conformance checks for [`StepStore`](crate::store::StepStore): a step by run and position, by its id, and a run's
//! steps a page at a time.

use super::*;

fn positions(steps: &[crate::model::ActivityState]) -> Vec<u32> {
    steps.iter().map(|s| s.position).collect()
}

/// Every page of a run's steps, following the cursors.
async fn all_pages(store: &dyn Store, run: &str, query: ListQuery) -> Vec<Vec<u32>> {
    let mut pages = Vec::new();
    let mut query = query;
    loop {
        let page = store.list_steps(run, &query).await.unwrap();
        pages.push(positions(&page.data));
        assert_eq!(page.has_more, page.cursor.is_some());
        match page.cursor {
            Some(cursor) => query = query.cursor(cursor),
            None => return pages,
        }
    }
}

/// A step is found by position and by its id (with its run, payloads kept or left out); a run's
/// steps come in command order, a page at a time either way, and unknown ids, runs and cursors
/// are refused.
pub async fn steps_are_found_by_id_and_listed_in_pages(store: Arc<dyn Store>) {
    let m = Maker::new();
    let run = m.create(&*store, "steps").await;
    let other = m.create(&*store, "steps").await;
    let (a, schedule_a) = m.step(0, "a");
    let (b, schedule_b) = m.step(1, "b");
    let (c, schedule_c) = m.step(2, "c");
    let (elsewhere, schedule_elsewhere) = m.step(0, "x");
    m.append(&*store, &run, vec![started(), schedule_a, schedule_b])
        .await
        .unwrap();
    m.append(&*store, &other, vec![started(), schedule_elsewhere])
        .await
        .unwrap();
    m.append(
        &*store,
        &run,
        vec![schedule_c, step_started(1), step_completed(1, json!("out"))],
    )
    .await
    .unwrap();

    let by_position = store.get_activity(&run, 1).await.unwrap();
    assert_eq!(
        (by_position.id.as_str(), by_position.name.as_str()),
        (b.as_str(), "b")
    );

    let found = store.get_step(&b, ResolveData::All).await.unwrap();
    assert_eq!(found.run_id, run);
    assert_eq!(found.step, by_position);
    assert_eq!(found.step.status, ActivityStatus::Completed);
    assert_eq!(found.step.input, Some(p(json!(1))));
    assert_eq!(found.step.output, Some(p(json!("out"))));
    let bare = store.get_step(&b, ResolveData::None).await.unwrap().step;
    assert_eq!((bare.input, bare.output), (None, None));
    assert_eq!(bare.status, ActivityStatus::Completed);
    let found = store.get_step(&elsewhere, ResolveData::All).await.unwrap();
    assert_eq!(
        (found.run_id.as_str(), found.step.name.as_str()),
        (other.as_str(), "x")
    );
    assert_eq!(
        store
            .get_step(&a, ResolveData::All)
            .await
            .unwrap()
            .step
            .position,
        0
    );
    assert!(is_not_found(
        &store.get_step(&m.ids.step_id(), ResolveData::All).await
    ));

    let all = store.list_steps(&run, &ListQuery::new()).await.unwrap();
    assert_eq!(positions(&all.data), [0, 1, 2]);
    assert!(!all.has_more && all.cursor.is_none());
    assert_eq!(all.data[1], by_position);
    assert_eq!(all.data[2].id, c);

    let two = ListQuery::new().limit(2);
    assert_eq!(
        all_pages(&*store, &run, two.clone()).await,
        [vec![0, 1], vec![2]]
    );
    let down = two.order(SortOrder::Descending);
    assert_eq!(all_pages(&*store, &run, down).await, [vec![2, 1], vec![0]]);
    let one = ListQuery::new().limit(1);
    assert_eq!(
        all_pages(&*store, &run, one).await,
        [vec![0], vec![1], vec![2]]
    );

    let bare = store
        .list_steps(&run, &ListQuery::new().resolve_data(ResolveData::None))
        .await
        .unwrap();
    assert!(bare
        .data
        .iter()
        .all(|s| s.input.is_none() && s.output.is_none()));
    assert_eq!(bare.data[1].status, ActivityStatus::Completed);

    assert!(is_not_found(
        &store.list_steps(&m.run_id(), &ListQuery::new()).await
    ));
    let nonsense = ListQuery::new().cursor("not a cursor");
    assert!(is_invalid(&store.list_steps(&run, &nonsense).await));
}
