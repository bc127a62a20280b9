//! SIGTERM — what systemd, containers and orchestrators send — stops `worlds serve` as Ctrl-C
//! does: it stops accepting, answers every request in flight, and exits with status 0. A real
//! process, with 100 long polls in flight when the signal comes.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// The longest any wait may take before the test fails.
const BOUND: Duration = Duration::from_secs(30);

/// Long polls in flight when the signal comes.
const POLLS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_every_request_in_flight_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args([
            "serve",
            "--persistence",
            "file",
            "--addr",
            "127.0.0.1:0",
            "--dir",
        ])
        .arg(dir.path().join("world"))
        .env_remove("WORLDS_ENGINE_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let (key, addr) = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "exited early: {lines:?}"
        );
        lines.push(line.trim_end().to_owned());
        if line.starts_with("serving the API") {
            let url = line
                .split_whitespace()
                .find(|w| w.starts_with("http://"))
                .unwrap()
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned();
            let key = lines
                .iter()
                .find(|l| l.starts_with("wek_"))
                .expect("a key is made on first start")
                .clone();
            break (key, url);
        }
    };

    // Each long poll starts a checkout and waits for its result. The request asks to continue
    // before sending its body, and the server's `100 Continue` says its handler is reading it:
    // the request is in flight before the signal is sent.
    let body =
        r#"{"workflow":"checkout","input":{"id":"A-1","cents":1200,"sku":"SKU-1","quantity":1}}"#;
    let mut polls = Vec::new();
    for _ in 0..POLLS {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /v1/runs?wait_ms=20000 HTTP/1.1\r\nhost: test\r\nconnection: close\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        polls.push(stream);
    }
    for stream in &mut polls {
        let mut seen = Vec::new();
        timeout(BOUND, async {
            while !seen.ends_with(b"\r\n\r\n") {
                let mut byte = [0; 1];
                assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "closed: {seen:?}");
                seen.push(byte[0]);
            }
        })
        .await
        .expect("the server asks for the body");
        assert!(
            seen.starts_with(b"HTTP/1.1 100"),
            "{:?}",
            String::from_utf8_lossy(&seen)
        );
    }

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());

    // Every request in flight is answered: its body is read, its run started and waited for.
    let mut answers = Vec::new();
    for mut stream in polls {
        stream.write_all(body.as_bytes()).await.unwrap();
        answers.push(tokio::spawn(async move {
            let mut raw = Vec::new();
            let _ = timeout(BOUND, stream.read_to_end(&mut raw)).await;
            String::from_utf8_lossy(&raw).into_owned()
        }));
    }
    let mut unanswered = 0;
    for answer in answers {
        let answer = answer.await.unwrap();
        let status = answer.split(' ').nth(1).unwrap_or("none").to_owned();
        if !matches!(status.as_str(), "200" | "201" | "202") {
            unanswered += 1;
            eprintln!("not answered: {answer:?}");
        }
    }
    assert_eq!(unanswered, 0, "of {POLLS} requests in flight");

    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    assert!(rest.contains("stopping (SIGTERM)"), "{rest}");
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
}
