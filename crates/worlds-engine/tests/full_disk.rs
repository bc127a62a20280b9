//! A full disk under the file and hybrid stores, on a real size-limited filesystem (a tmpfs
//! the test mounts; it needs root, as CI has). Writes fail with `STORAGE_FULL`, nothing that
//! was acknowledged is lost, and — on the file store — the world goes on by itself once space
//! is freed; the hybrid store goes on after a restart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use worlds_engine::prelude::*;
use worlds_engine::store::{FileStore, HybridStore, RunStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{ErrorKind, ResolveData};

/// A tmpfs of `size` mounted for the test, unmounted when dropped.
struct Disk {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl Disk {
    /// `None` (with a note) where mounting is not allowed: a developer machine without root.
    /// CI runs as root, and there a refusal fails the test.
    fn mount(size: &str) -> Option<Disk> {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .output()
            .expect("run mount");
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must be able to mount a tmpfs (run as root): {why}"
            );
            eprintln!("skipped: cannot mount a tmpfs here ({why}); run as root");
            return None;
        }
        Some(Disk { _dir: dir, mount })
    }

    fn path(&self) -> &Path {
        &self.mount
    }

    /// Fills the disk with a file of zeros until the filesystem refuses more.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.mount.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
        filler
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

fn note() -> Activity<u64, String> {
    activity("note", |_ctx: ActivityContext, n: u64| async move {
        // A result of some size, so the disk fills in a few runs.
        Ok::<_, StepError>(format!("{n}:{}", "x".repeat(2000)))
    })
}

fn notes(step: &Activity<u64, String>) -> Workflow<u64, usize> {
    let step = step.clone();
    workflow("notes", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move {
            let first = ctx.run(&step, n).await?;
            ctx.sleep("1m").await?;
            let second = ctx.run(&step, n + 1).await?;
            Ok::<_, WorkflowError>(first.len() + second.len())
        }
    })
}

fn world_on(store: Arc<dyn Store>) -> TestWorldOptions {
    TestWorldOptions {
        store: Some(store),
        autostart: false,
        ..TestWorldOptions::default()
    }
}

/// Starts runs until the disk refuses one; returns the acknowledged run ids and the refusal.
async fn start_until_full(t: &TestWorld, flow: &Workflow<u64, usize>) -> (Vec<String>, WorldError) {
    let mut acked = Vec::new();
    for n in 0..10_000 {
        match t.execute(flow, n, WorkflowOptions::default()).await {
            Ok(run) => acked.push(run.id.clone()),
            Err(e) => return (acked, e),
        }
        t.settle().await;
    }
    panic!("the disk never filled up");
}

/// A started world over `store` with the `notes` workflow, five runs in flight, then the disk
/// filled under them and runs started until one is refused. Returns the world, the
/// acknowledged runs, the refusal and the filler file.
async fn fill_under_runs(
    disk: &Disk,
    store: Arc<dyn Store>,
) -> (TestWorld, Vec<String>, WorldError, PathBuf) {
    let t = TestWorld::with_options(world_on(store)).await;
    let step = note();
    let flow = notes(&step);
    t.register(&step).unwrap().register(&flow).unwrap();
    t.world().start().await.unwrap();
    let mut acked = Vec::new();
    for n in 0..5 {
        let run = t.execute(&flow, n, WorkflowOptions::default()).await;
        acked.push(run.unwrap().id.clone());
    }
    t.settle().await;
    let filler = disk.fill();
    let (more, refused) = start_until_full(&t, &flow).await;
    acked.extend(more);
    assert_eq!(refused.kind(), ErrorKind::StorageFull, "{refused}");
    (t, acked, refused, filler)
}

/// Drives every run in `acked` to its end and checks each completed.
async fn all_complete(t: &TestWorld, acked: &[String]) {
    for id in acked {
        let state = t.run_until_complete(id, "1h").await.unwrap();
        assert_eq!(
            state.status,
            RunStatus::Completed,
            "{id}: {:?}",
            state.error
        );
    }
}

/// Checks that every run in `acked` is recorded completed in `store` (reopened from disk).
async fn completed_on_disk(store: &impl RunStore, acked: &[String]) {
    for id in acked {
        let state = store.get_run(id, ResolveData::None).await.unwrap();
        assert_eq!(state.status, RunStatus::Completed, "{id} after reopening");
    }
}

#[tokio::test]
async fn a_full_disk_refuses_new_work_and_the_file_store_goes_on_once_space_is_freed() {
    let Some(disk) = Disk::mount("2m") else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(FileStore::open(disk.path()).unwrap());
    let (t, mut acked, refused, filler) = fill_under_runs(&disk, store).await;
    assert_eq!(refused.kind().code(), "STORAGE_FULL");
    assert!(refused.to_string().contains("disk is full"), "{refused}");
    // The sleeping runs wake to a disk that takes nothing: they wait, failing nothing.
    t.advance("2m").await;
    for id in &acked {
        let state = t.world().get_run(id, ResolveData::None).await.unwrap();
        assert!(
            !state.status.is_terminal() || state.status == RunStatus::Completed,
            "{id}: {}",
            state.status
        );
    }

    // Space returns: the world goes on by itself, and takes new work again.
    std::fs::remove_file(&filler).unwrap();
    t.advance("1s").await;
    all_complete(&t, &acked).await;
    let after = t
        .execute_by_name::<u64, usize>("notes", 99, WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&after.id, "1h").await.unwrap();
    acked.push(after.id.clone());
    t.world().shutdown().await.unwrap();
    drop(t);

    // Everything acknowledged is on disk, whole.
    completed_on_disk(&FileStore::open(disk.path()).unwrap(), &acked).await;
}

/// One start with a deadline of real time: the hybrid store holds a write the full disk
/// refused until the disk takes it, and its writer waits that long. `None` if it was still
/// waiting at the deadline (so not acknowledged).
async fn start_within(t: &TestWorld, n: u64) -> Option<Result<String, WorldError>> {
    let start = t.execute_by_name::<u64, usize>("notes", n, WorkflowOptions::default());
    match tokio::time::timeout(std::time::Duration::from_millis(300), start).await {
        Ok(started) => Some(started.map(|run| run.id.clone())),
        Err(_) => None,
    }
}

#[tokio::test]
async fn a_full_disk_under_the_hybrid_store_holds_its_writes_and_goes_on_once_space_is_freed() {
    let Some(disk) = Disk::mount("2m") else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(HybridStore::open(disk.path()).unwrap());
    let t = TestWorld::with_options(world_on(store)).await;
    let step = note();
    t.register(&step).unwrap().register(notes(&step)).unwrap();
    t.world().start().await.unwrap();
    let mut acked = Vec::new();
    for n in 0..5 {
        acked.push(start_within(&t, n).await.unwrap().unwrap());
    }
    t.settle().await;

    // The disk fills: the write it refuses is held (its writer waits), later ones are refused.
    let filler = disk.fill();
    let mut refused = None;
    for n in 5..10_000 {
        match start_within(&t, n).await {
            Some(Ok(id)) => acked.push(id),
            Some(Err(e)) => {
                refused = Some(e);
                break;
            }
            None => {}
        }
    }
    let refused = refused.expect("the full disk refused a start");
    assert_eq!(refused.kind(), ErrorKind::StorageFull, "{refused}");
    assert!(
        refused.to_string().contains("goes on by itself"),
        "{refused}"
    );

    // Space returns: the held writes land and new starts are taken, with no restart.
    std::fs::remove_file(&filler).unwrap();
    // The writer tries the held write again every quarter second.
    let mut last = None;
    for _ in 0..40 {
        match start_within(&t, 99).await {
            Some(Ok(id)) => {
                last = Some(Ok(id));
                break;
            }
            other => last = other,
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    match last {
        Some(Ok(id)) => acked.push(id),
        other => panic!("the store takes no start once the disk has space: {other:?}"),
    }
    t.advance("1s").await;
    all_complete(&t, &acked).await;
    t.world().shutdown().await.unwrap();
    drop(t);
    completed_on_disk(&HybridStore::open(disk.path()).unwrap(), &acked).await;
}
