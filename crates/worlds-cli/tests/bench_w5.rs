//! `worlds bench --workload w5` as a user runs it: the built binary kills its own child process
//! with SIGKILL halfway through, recovers, and reports no re-executed recorded step. Small
//! sizes, no timing assertions.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_worlds"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run worlds")
}

#[test]
fn w5_recovers_without_re_executing_recorded_steps() {
    for backend in ["hybrid", "file"] {
        let output = bench(&[
            "--workload",
            "w5",
            "--backend",
            backend,
            "--n",
            "200",
            "--k",
            "5",
            "--workers",
            "16",
            "--json",
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{backend}: {stderr}");
        let line = String::from_utf8(output.stdout).unwrap();
        let report: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(report["workload"], "W5", "{line}");
        assert_eq!(report["storage"], backend, "{line}");
        assert_eq!(
            (report["n"].as_u64(), report["k"].as_u64()),
            (Some(200), Some(5))
        );
        assert_eq!(report["reexecuted_steps"], 0, "{line}");
        assert!(report["wall_s"].as_f64().unwrap() > 0.0, "{line}");
        assert!(report["steps_per_s"].is_null(), "{line}");
    }
}

#[test]
fn w5_refuses_the_memory_backend() {
    let output = bench(&["--workload", "w5", "--backend", "memory"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("durable backend"), "{stderr}");
}
