//! `worlds bench --via http`: W1 and W2 driven through the world's HTTP API complete and say
//! so in their notes.

use std::process::Command;

#[test]
fn w1_and_w2_run_over_loopback_http() {
    for (workload, n) in [("w1", "20"), ("w2", "5")] {
        let out = Command::new(env!("CARGO_BIN_EXE_worlds"))
            .args([
                "bench",
                "--workload",
                workload,
                "--backend",
                "memory",
                "--via",
                "http",
                "--n",
                n,
                "--k",
                "2",
                "--json",
            ])
            .env_remove("WORLDS_ENGINE_DATABASE_URL")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            report["notes"].as_str().unwrap().contains("HTTP"),
            "{report}"
        );
        assert_eq!(report["n"].as_u64(), Some(n.parse().unwrap()));
    }
}
