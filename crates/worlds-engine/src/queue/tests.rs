use super::*;

use std::collections::HashSet;
use std::time::Duration;

use proptest::prelude::*;

fn entry(
    task: u32,
    run: &str,
    priority: i32,
    scheduled_at: Millis,
    queue: Option<&str>,
) -> QueueEntry<u32> {
    QueueEntry {
        task,
        run_id: Arc::from(run),
        priority,
        scheduled_at,
        task_queue: queue.map(Arc::from),
    }
}

fn tasks(entries: Vec<QueueEntry<u32>>) -> Vec<u32> {
    entries.into_iter().map(|e| e.task).collect()
}

fn pop_all(q: &TaskQueue<u32>, filter: QueueFilter<'_>) -> Vec<u32> {
    std::iter::from_fn(|| q.try_pop(filter).map(|e| e.task)).collect()
}

/// Checks that the indexes agree with `entries` and hold no empty sets.
fn assert_consistent<T>(q: &TaskQueue<T>) {
    let state = q.state.lock();
    let queued: usize =
        state.default_queue.len() + state.named.values().map(BTreeSet::len).sum::<usize>();
    assert_eq!(queued, state.entries.len());
    assert_eq!(
        state.by_run.values().map(|t| t.keys().len()).sum::<usize>(),
        state.entries.len()
    );
    assert!(state.named.values().all(|s| !s.is_empty()));
    for key in &state.default_queue {
        assert!(state.entries[key].task_queue.is_none());
    }
    for (name, set) in &state.named {
        for key in set {
            assert_eq!(state.entries[key].task_queue.as_deref(), Some(&**name));
        }
    }
    for (run, tasks) in &state.by_run {
        let keys = tasks.keys();
        assert!(!keys.is_empty(), "run {run} is indexed with no task");
        for key in keys {
            assert_eq!(state.entries[&key].run_id, *run);
        }
    }
}

/// Waits until the registered waiter counts reach the given values.
async fn wait_for_waiters<T>(
    q: &TaskQueue<T>,
    any: usize,
    default: usize,
    named: &[(&str, usize)],
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ready = {
            let state = q.state.lock();
            state.any_waiters == any
                && state.default_waiters == default
                && named
                    .iter()
                    .all(|(name, n)| state.named_waiters.get(*name).map_or(0, |w| w.count) == *n)
        };
        if ready {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waiters never registered"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn assert_no_waiters<T>(q: &TaskQueue<T>) {
    let state = q.state.lock();
    assert_eq!(state.any_waiters, 0);
    assert_eq!(state.default_waiters, 0);
    assert!(state.named_waiters.is_empty());
}

#[test]
fn ordering_priority_then_scheduled_then_fifo() {
    let q = TaskQueue::new();
    // (task, priority, scheduled_at) in push order.
    let table = [
        (1, 0, 100),
        (2, 5, 300),
        (3, 5, 100),
        (4, 0, 100),
        (5, -3, 0),
        (6, 5, 100),
        (7, 10, 999),
        (8, 0, 50),
    ];
    for (task, priority, scheduled_at) in table {
        q.push(entry(task, "r", priority, scheduled_at, None));
    }
    assert_eq!(pop_all(&q, QueueFilter::Any), vec![7, 3, 6, 2, 8, 1, 4, 5]);
    assert!(q.is_empty());
}

#[test]
fn task_keys_compare_in_queue_order() {
    let q = TaskQueue::new();
    let low = q.push(entry(1, "r", 0, 0, None));
    let high = q.push(entry(2, "r", 1, 0, None));
    let high_later = q.push(entry(3, "r", 1, 0, None));
    assert!(high < high_later);
    assert!(high_later < low);
}

#[test]
fn routing_by_task_queue() {
    let q = TaskQueue::new();
    q.push(entry(1, "r", 0, 0, None));
    q.push(entry(2, "r", 9, 0, Some("gpu")));
    q.push(entry(3, "r", 5, 0, None));
    q.push(entry(4, "r", 1, 0, Some("gpu")));
    q.push(entry(5, "r", 7, 0, Some("io")));
    assert_eq!(q.len_of(None), 2);
    assert_eq!(q.len_of(Some("gpu")), 2);
    assert_eq!(q.len_of(Some("io")), 1);
    assert_eq!(q.len_of(Some("missing")), 0);

    assert_eq!(q.try_pop(QueueFilter::Only("missing")), None);
    assert_eq!(q.try_pop(QueueFilter::Only("gpu")).unwrap().task, 2);
    assert_eq!(q.try_pop(QueueFilter::Default).unwrap().task, 3);
    // Any takes the global best across queues.
    assert_eq!(pop_all(&q, QueueFilter::Any), vec![5, 4, 1]);
    assert_consistent(&q);
    assert!(q.state.lock().named.is_empty(), "empty queues are dropped");
}

#[test]
fn filters_never_cross_queues() {
    let q = TaskQueue::new();
    for i in 0..10 {
        q.push(entry(
            i,
            "r",
            (i % 3) as i32,
            0,
            if i % 2 == 0 { Some("gpu") } else { None },
        ));
    }
    let gpu = pop_all(&q, QueueFilter::Only("gpu"));
    assert_eq!(gpu.len(), 5);
    assert!(gpu.iter().all(|t| t % 2 == 0));
    let default = pop_all(&q, QueueFilter::Default);
    assert_eq!(default.len(), 5);
    assert!(default.iter().all(|t| t % 2 == 1));
}

#[test]
fn remove_by_key() {
    let q = TaskQueue::new();
    let a = q.push(entry(1, "r1", 0, 0, Some("gpu")));
    let b = q.push(entry(2, "r1", 0, 0, None));
    assert_eq!(q.remove(a).unwrap().task, 1);
    assert_eq!(q.remove(a), None);
    assert_consistent(&q);
    assert_eq!(q.len_of(Some("gpu")), 0);
    assert_eq!(q.try_pop(QueueFilter::Any).unwrap().task, 2);
    assert_eq!(q.remove(b), None);
    assert_consistent(&q);
}

#[test]
fn remove_run_drops_exactly_that_run() {
    let q = TaskQueue::new();
    q.push(entry(1, "a", 0, 0, None));
    q.push(entry(2, "b", 3, 0, Some("gpu")));
    q.push(entry(3, "a", 5, 0, Some("gpu")));
    q.push(entry(4, "b", 1, 0, None));
    q.push(entry(5, "a", 1, 0, Some("io")));
    let removed = q.remove_run("a");
    assert_eq!(tasks(removed), vec![3, 5, 1], "returned in queue order");
    assert_consistent(&q);
    assert_eq!(q.len(), 2);
    assert_eq!(q.len_of(Some("io")), 0);
    assert!(!q.state.lock().by_run.contains_key("a"));
    assert!(q.remove_run("a").is_empty());
    assert!(q.remove_run("nope").is_empty());
    assert_eq!(pop_all(&q, QueueFilter::Any), vec![2, 4]);
    assert!(q.state.lock().by_run.is_empty());
}

#[test]
fn drain_returns_everything_in_order() {
    let q = TaskQueue::new();
    q.push(entry(1, "a", 0, 0, None));
    q.push(entry(2, "b", 2, 0, Some("gpu")));
    q.push(entry(3, "a", 1, 0, Some("io")));
    assert_eq!(tasks(q.drain()), vec![2, 3, 1]);
    assert!(q.is_empty());
    assert_consistent(&q);
    assert!(q.state.lock().by_run.is_empty());
}

#[test]
fn push_many_orders_like_push() {
    let q = TaskQueue::new();
    q.push_many((0..5).map(|i| entry(i, "r", i as i32 % 2, 0, None)));
    assert_eq!(pop_all(&q, QueueFilter::Any), vec![1, 3, 0, 2, 4]);
}

#[tokio::test]
async fn pop_returns_available_task_without_waiting() {
    let q = TaskQueue::new();
    q.push(entry(1, "r", 0, 0, Some("gpu")));
    assert_eq!(q.pop(QueueFilter::Only("gpu")).await.unwrap().task, 1);
    assert_no_waiters(&q);
}

#[tokio::test]
async fn close_returns_remaining_then_none() {
    let q = Arc::new(TaskQueue::new());
    q.push(entry(1, "r", 0, 0, None));
    q.push(entry(2, "r", 0, 0, Some("gpu")));
    q.close();
    assert!(q.is_closed());
    assert_eq!(q.pop(QueueFilter::Only("gpu")).await.unwrap().task, 2);
    assert_eq!(q.pop(QueueFilter::Only("gpu")).await, None);
    assert_eq!(q.pop(QueueFilter::Any).await.unwrap().task, 1);
    assert_eq!(q.pop(QueueFilter::Default).await, None);
    // Pushing after close still enqueues; pop does not wait.
    q.push(entry(3, "r", 0, 0, None));
    assert_eq!(q.pop(QueueFilter::Default).await.unwrap().task, 3);
    assert_eq!(q.pop(QueueFilter::Any).await, None);
    assert_no_waiters(&q);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn close_wakes_all_waiters() {
    let q = Arc::new(TaskQueue::<u32>::new());
    let mut handles = Vec::new();
    for filter in [
        QueueFilter::Any,
        QueueFilter::Default,
        QueueFilter::Only("gpu"),
    ] {
        for _ in 0..3 {
            let q = q.clone();
            let filter = match filter {
                QueueFilter::Only(_) => QueueFilter::Only("gpu"),
                f => f,
            };
            handles.push(tokio::spawn(async move { q.pop(filter).await }));
        }
    }
    wait_for_waiters(&q, 3, 3, &[("gpu", 3)]).await;
    q.close();
    for h in handles {
        let got = tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, None);
    }
    assert_no_waiters(&q);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_push_wakes_a_matching_waiter() {
    let q = Arc::new(TaskQueue::<u32>::new());
    let spawn = |filter: &'static str| {
        let q = q.clone();
        tokio::spawn(async move {
            let filter = match filter {
                "" => QueueFilter::Default,
                name => QueueFilter::Only(name),
            };
            q.pop(filter).await
        })
    };
    let gpu: Vec<_> = (0..4).map(|_| spawn("gpu")).collect();
    let default: Vec<_> = (0..4).map(|_| spawn("")).collect();
    wait_for_waiters(&q, 0, 4, &[("gpu", 4)]).await;

    // One push at a time: each must complete exactly one gpu waiter.
    for i in 0..4 {
        q.push(entry(i, "r", 0, 0, Some("gpu")));
        wait_for_waiters(&q, 0, 4, &[("gpu", 3 - i as usize)]).await;
    }
    let mut got = HashSet::new();
    for h in gpu {
        let e = tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(e.task_queue.as_deref(), Some("gpu"));
        assert!(got.insert(e.task));
    }
    assert!(
        default.iter().all(|h| !h.is_finished()),
        "default waiters ignore gpu tasks"
    );

    q.push_many((10..14).map(|i| entry(i, "r", 0, 0, None)));
    for h in default {
        let e = tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(e.task_queue, None);
        assert!(got.insert(e.task));
    }
    assert_eq!(got.len(), 8);
    assert!(q.is_empty());
    assert_no_waiters(&q);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_waiters_take_named_and_default_tasks() {
    let q = Arc::new(TaskQueue::<u32>::new());
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.pop(QueueFilter::Any).await })
        })
        .collect();
    wait_for_waiters(&q, 3, 0, &[]).await;
    q.push(entry(1, "r", 0, 0, Some("gpu")));
    q.push(entry(2, "r", 0, 0, None));
    q.push(entry(3, "r", 0, 0, Some("io")));
    let mut got: Vec<u32> = Vec::new();
    for h in handles {
        let e = tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .unwrap()
            .unwrap();
        got.push(e.unwrap().task);
    }
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 3]);
}

/// A waiter woken by `notify_one` but dropped before it runs must pass the
/// wake-up on, otherwise the other waiter would sleep next to a task.
#[tokio::test(flavor = "current_thread")]
async fn cancelled_waiter_passes_wake_up_on() {
    for filter in [
        QueueFilter::Any,
        QueueFilter::Default,
        QueueFilter::Only("gpu"),
    ] {
        let q = Arc::new(TaskQueue::<u32>::new());
        let first = {
            let q = q.clone();
            tokio::spawn(async move { q.pop(filter).await })
        };
        tokio::task::yield_now().await;
        let second = {
            let q = q.clone();
            tokio::spawn(async move { q.pop(filter).await })
        };
        tokio::task::yield_now().await;
        let queue = match filter {
            QueueFilter::Only(name) => Some(name),
            _ => None,
        };
        // Notifies `first` (registered first); it is aborted before it runs.
        q.push(entry(7, "r", 0, 0, queue));
        first.abort();
        let e = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("second waiter was not woken")
            .unwrap()
            .unwrap();
        assert_eq!(e.task, 7);
        assert!(first.await.unwrap_err().is_cancelled());
        assert_no_waiters(&q);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timed_out_pops_leave_no_registration() {
    let q = TaskQueue::<u32>::new();
    for filter in [
        QueueFilter::Any,
        QueueFilter::Default,
        QueueFilter::Only("gpu"),
    ] {
        let r = tokio::time::timeout(Duration::from_millis(5), q.pop(filter)).await;
        assert!(r.is_err());
    }
    assert_no_waiters(&q);
}

/// Mixed filters, tasks pushed in small bursts so that workers sleep in
/// between: every task is taken exactly once and none is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_filters_take_every_task_once() {
    const TASKS: u32 = 4_000;
    let q = Arc::new(TaskQueue::<u32>::new());
    let filters: [QueueFilter<'static>; 4] = [
        QueueFilter::Any,
        QueueFilter::Default,
        QueueFilter::Only("a"),
        QueueFilter::Only("b"),
    ];
    let mut workers = Vec::new();
    for filter in filters {
        for _ in 0..3 {
            let q = q.clone();
            workers.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(e) = q.pop(filter).await {
                    match filter {
                        QueueFilter::Default => assert_eq!(e.task_queue, None),
                        QueueFilter::Only(name) => assert_eq!(e.task_queue.as_deref(), Some(name)),
                        QueueFilter::Any => {}
                    }
                    got.push(e.task);
                }
                got
            }));
        }
    }
    let names = [None, Some("a"), Some("b"), Some("c")];
    for i in 0..TASKS {
        q.push(entry(i, "r", (i % 5) as i32, 0, names[(i % 4) as usize]));
        if i % 16 == 0 {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    // Every task must be consumed without closing the queue.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !q.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "tasks left behind: {}",
            q.len()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    q.close();
    let mut seen = HashSet::new();
    for w in workers {
        for task in w.await.unwrap() {
            assert!(seen.insert(task), "task {task} taken twice");
        }
    }
    assert_eq!(seen.len(), TASKS as usize);
    assert_no_waiters(&q);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn stress_producers_and_consumers() {
    const PRODUCERS: u32 = 4;
    const PER_PRODUCER: u32 = 2_500;
    let q = Arc::new(TaskQueue::<u32>::new());
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(e) = q.pop(QueueFilter::Any).await {
                    got.push(e.task);
                }
                got
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let q = q.clone();
            tokio::spawn(async move {
                for i in 0..PER_PRODUCER {
                    let id = p * PER_PRODUCER + i;
                    let queue = match id % 3 {
                        0 => None,
                        1 => Some("gpu"),
                        _ => Some("io"),
                    };
                    if i % 50 == 0 {
                        let batch =
                            (0..10).map(|j| entry(1_000_000 + id * 10 + j, "batch", 0, 0, queue));
                        q.push_many(batch);
                    }
                    q.push(entry(id, "r", (id % 7) as i32, i64::from(id % 11), queue));
                    if i % 100 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    q.close();
    let mut seen = HashSet::new();
    for c in consumers {
        let got = tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .unwrap()
            .unwrap();
        for task in got {
            assert!(seen.insert(task), "task {task} taken twice");
        }
    }
    let batches = PRODUCERS * PER_PRODUCER / 50 * 10;
    assert_eq!(seen.len(), (PRODUCERS * PER_PRODUCER + batches) as usize);
    assert!((0..PRODUCERS * PER_PRODUCER).all(|id| seen.contains(&id)));
    assert!(q.is_empty());
    assert_no_waiters(&q);
}

#[derive(Debug, Clone)]
enum Op {
    Push {
        run: u8,
        priority: i32,
        scheduled_at: Millis,
        queue: u8,
    },
    PushMany(Vec<(u8, i32, Millis, u8)>),
    Pop(u8),
    Remove(usize),
    RemoveRun(u8),
}

const QUEUES: [Option<&str>; 3] = [None, Some("a"), Some("b")];

fn op() -> impl Strategy<Value = Op> {
    let push = (0u8..4, -2i32..3, 0i64..4, 0u8..3);
    prop_oneof![
        4 => push.clone().prop_map(|(run, priority, scheduled_at, queue)| Op::Push { run, priority, scheduled_at, queue }),
        1 => proptest::collection::vec(push, 0..5).prop_map(Op::PushMany),
        3 => (0u8..4).prop_map(Op::Pop),
        1 => any::<usize>().prop_map(Op::Remove),
        1 => (0u8..5).prop_map(Op::RemoveRun),
    ]
}

/// Naive model: an unsorted Vec searched linearly for the best task.
#[derive(Default)]
struct Model {
    items: Vec<(i32, Millis, u64, u32, u8, u8)>, // priority, scheduled_at, seq, task, run, queue
    seq: u64,
}

impl Model {
    fn push(&mut self, task: u32, run: u8, priority: i32, scheduled_at: Millis, queue: u8) {
        self.items
            .push((priority, scheduled_at, self.seq, task, run, queue));
        self.seq += 1;
    }

    fn take_best(
        &mut self,
        keep: impl Fn(&(i32, Millis, u64, u32, u8, u8)) -> bool,
    ) -> Option<u32> {
        let (idx, _) = self
            .items
            .iter()
            .enumerate()
            .filter(|(_, it)| keep(it))
            .min_by_key(|(_, it)| (Reverse(it.0), it.1, it.2))?;
        Some(self.items.remove(idx).3)
    }

    fn sorted_tasks(&self) -> Vec<u32> {
        let mut items = self.items.clone();
        items.sort_by_key(|it| (Reverse(it.0), it.1, it.2));
        items.into_iter().map(|it| it.3).collect()
    }
}

fn run_name(run: u8) -> String {
    format!("run-{run}")
}

proptest! {
    #[test]
    fn matches_naive_model(ops in proptest::collection::vec(op(), 0..200)) {
        let q = TaskQueue::<u32>::new();
        let mut model = Model::default();
        let mut keys: Vec<(TaskKey, u32)> = Vec::new();
        let mut next_task = 0u32;
        for op in ops {
            match op {
                Op::Push { run, priority, scheduled_at, queue } => {
                    let key = q.push(entry(next_task, &run_name(run), priority, scheduled_at, QUEUES[queue as usize]));
                    model.push(next_task, run, priority, scheduled_at, queue);
                    keys.push((key, next_task));
                    next_task += 1;
                }
                Op::PushMany(batch) => {
                    let mut entries = Vec::new();
                    for (run, priority, scheduled_at, queue) in batch {
                        entries.push(entry(next_task, &run_name(run), priority, scheduled_at, QUEUES[queue as usize]));
                        model.push(next_task, run, priority, scheduled_at, queue);
                        next_task += 1;
                    }
                    q.push_many(entries);
                }
                Op::Pop(f) => {
                    let (filter, expected) = match f {
                        0 => (QueueFilter::Any, model.take_best(|_| true)),
                        1 => (QueueFilter::Default, model.take_best(|it| it.5 == 0)),
                        2 => (QueueFilter::Only("a"), model.take_best(|it| it.5 == 1)),
                        _ => (QueueFilter::Only("b"), model.take_best(|it| it.5 == 2)),
                    };
                    prop_assert_eq!(q.try_pop(filter).map(|e| e.task), expected);
                }
                Op::Remove(i) => {
                    if !keys.is_empty() {
                        let (key, task) = keys[i % keys.len()];
                        let expected = model.take_best(|it| it.3 == task);
                        prop_assert_eq!(q.remove(key).map(|e| e.task), expected);
                    }
                }
                Op::RemoveRun(run) => {
                    let mut expected = Vec::new();
                    while let Some(task) = model.take_best(|it| it.4 == run) {
                        expected.push(task);
                    }
                    prop_assert_eq!(tasks(q.remove_run(&run_name(run))), expected);
                }
            }
            prop_assert_eq!(q.len(), model.items.len());
            for (i, name) in QUEUES.iter().enumerate() {
                let n = model.items.iter().filter(|it| it.5 as usize == i).count();
                prop_assert_eq!(q.len_of(*name), n);
            }
            assert_consistent(&q);
        }
        prop_assert_eq!(tasks(q.drain()), model.sorted_tasks());
        assert_consistent(&q);
    }
}

/// Rough throughput check: `cargo test --release -- --ignored --nocapture bench`.
#[test]
#[ignore]
fn bench_push_pop() {
    const N: u32 = 1_000_000;
    let q = TaskQueue::<u32>::new();
    let start = std::time::Instant::now();
    for i in 0..N {
        let queue = if i % 4 == 0 { Some("gpu") } else { None };
        q.push(entry(
            i,
            "r",
            (i.wrapping_mul(2_654_435_761) % 16) as i32,
            i64::from(i % 1000),
            queue,
        ));
    }
    let pushed = start.elapsed();
    let start = std::time::Instant::now();
    let mut n = 0;
    while q.try_pop(QueueFilter::Any).is_some() {
        n += 1;
    }
    assert_eq!(n, N);
    println!("push {N}: {pushed:?}, pop {N}: {:?}", start.elapsed());
}

#[test]
fn best_priority_is_that_of_the_head_the_filter_sees() {
    let q = TaskQueue::new();
    assert_eq!(q.best_priority(QueueFilter::Any), None);
    q.push(entry(1, "a", 0, 10, None));
    q.push(entry(2, "b", 5, 20, Some("gpu")));
    q.push(entry(3, "c", -1, 5, None));
    assert_eq!(q.best_priority(QueueFilter::Any), Some(5));
    assert_eq!(q.best_priority(QueueFilter::Default), Some(0));
    assert_eq!(q.best_priority(QueueFilter::Only("gpu")), Some(5));
    assert_eq!(q.best_priority(QueueFilter::Only("cpu")), None);
    assert_eq!(q.len(), 3, "looking takes nothing");
}

/// `idle_taker`: more waiters able to take a task than tasks queued.
#[tokio::test]
async fn an_idle_taker_is_a_waiter_not_claimed_by_a_queued_task() {
    use futures::FutureExt;
    let q = TaskQueue::<u32>::new();
    // No waiter: nobody would take a task at once.
    assert!(!q.idle_taker(None));
    // One worker of the default pool waits (it takes any task).
    let mut any = Box::pin(q.pop(QueueFilter::Any));
    assert!((&mut any).now_or_never().is_none());
    assert!(q.idle_taker(None));
    assert!(q.idle_taker(Some("gpu")));
    // A worker of queue "gpu" waits too; then one task is queued: one waiter is left over.
    let mut gpu = Box::pin(q.pop(QueueFilter::Only("gpu")));
    assert!((&mut gpu).now_or_never().is_none());
    q.push(entry(1, "r1", 0, 0, None));
    assert!(q.idle_taker(Some("gpu")));
    // For the default queue only the `Any` waiter counts, and the queued task claims it.
    assert!(!q.idle_taker(None));
    // Two tasks queued, two waiters: each waiter has a task.
    q.push(entry(2, "r2", 0, 0, Some("gpu")));
    assert!(!q.idle_taker(Some("gpu")));
    drop((any, gpu));
    assert_no_waiters(&q);
}
