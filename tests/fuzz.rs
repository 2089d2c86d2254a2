//! The demo against its own OpenAPI document: openapi-spec-validator checks the
//! served document is valid OpenAPI 3.1, then schemathesis fuzzes every operation
//! from it (no server errors, statuses, content types, headers and bodies as
//! documented, invalid input refused, valid input accepted). Both tools come from
//! `scripts/python-tools`, pinned, in a virtual environment under the target directory.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mdproxy::api::catalog::catalog;
use mdproxy::api::openapi::DOCUMENT_PATH;
use mdproxy::cache::market::SystemClock;
use mdproxy::config::Secret;
use mdproxy::demo::Demo;
use serde_json::Value;

/// The demo's client token (`mdproxy demo`'s default).
const TOKEN: &str = "demo-token";
/// Test cases per operation and phase: about a minute for all 72 on two cores.
const MAX_EXAMPLES: &str = "20";
/// Fixed, so a failure reproduces.
const SEED: &str = "20260307";
/// Bounds the whole fuzz run (the tools install on first use, then the run itself).
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// The `bin/` of the virtual environment, installing the tools when missing.
fn python_tools() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the tmp dir is inside the target dir");
    let out =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/python-tools"))
            .arg(target.join("pyenv"))
            .output()
            .unwrap();
    assert!(
        out.status.success(),
        "scripts/python-tools failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A fresh directory for one test's files (the tools also keep their state in it).
fn workdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The demo (simulated upstream and proxy, default configuration) on loopback
/// ports, with the simulator answering at once.
async fn demo() -> Demo {
    mdproxy::demo::start(
        "127.0.0.1:0",
        "",
        Secret::new(TOKEN),
        0,
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
}

/// Fetches the document from the proxy, without a token, into `dir`.
async fn save_document(demo: &Demo, dir: &Path) -> (PathBuf, Value) {
    let url = format!("{}{DOCUMENT_PATH}", demo.proxy.base_url());
    let bytes = support::client()
        .get(url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let path = dir.join("openapi.json");
    std::fs::write(&path, &bytes).unwrap();
    (path, serde_json::from_slice(&bytes).unwrap())
}

/// Runs a tool to its end within [`RUN_LIMIT`] and fails the test, showing all it
/// printed, when it does not exit 0.
async fn run(tool: &Path, args: &[&str], dir: &Path) {
    let mut command = tokio::process::Command::new(tool);
    command.args(args).current_dir(dir).kill_on_drop(true);
    let out = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{} ran past {RUN_LIMIT:?}", tool.display()))
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?} exited {}:\n{}\n{}",
        tool.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The operation id of the catalogue endpoint at `path`.
fn operation_id(doc: &Value, path: &str) -> String {
    doc["paths"][path]["get"]["operationId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// schemathesis' settings for single operations, from the catalogue:
/// - the stream never ends: read its first event (the snapshot), or give up after
///   half a second when none of its codes has a quote;
/// - a K-line range that ends before it starts is refused (400), and JSON Schema
///   cannot state a relation between two parameters, so valid-looking input may be
///   rejected there (every other check still runs).
fn per_operation_config(doc: &Value) -> String {
    let stream = catalog()
        .endpoints()
        .iter()
        .find(|e| e.streaming)
        .expect("the catalogue has the stream");
    let ranged: Vec<String> = catalog()
        .endpoints()
        .iter()
        .filter(|e| e.query_param("from").is_some() && e.query_param("to").is_some())
        .map(|e| format!("{:?}", operation_id(doc, &e.path)))
        .collect();
    format!(
        "[[operations]]\ninclude-operation-id = {:?}\nmax-stream-events = 1\nrequest-timeout = 0.5\n\n\
         [[operations]]\ninclude-operation-id = [{}]\nchecks.positive_data_acceptance.enabled = false\n",
        operation_id(doc, &stream.path),
        ranged.join(", ")
    )
}

/// The served document is valid OpenAPI 3.1 (openapi-spec-validator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_document_is_valid_openapi_3_1() {
    let bin = python_tools();
    let demo = demo().await;
    let dir = workdir("openapi-validate");
    let (path, _) = save_document(&demo, &dir).await;
    let document = path.to_str().unwrap();
    run(
        &bin.join("openapi-spec-validator"),
        &["--schema", "3.1", "--validation-errors", "all", document],
        &dir,
    )
    .await;
    demo.shutdown().await;
}

/// schemathesis, driven by the served document, finds no server error and no
/// answer that breaks the document, with every check it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_answers_as_its_document_says() {
    let bin = python_tools();
    let demo = demo().await;
    let dir = workdir("openapi-fuzz");
    let (path, doc) = save_document(&demo, &dir).await;
    let config = dir.join("schemathesis.toml");
    std::fs::write(&config, per_operation_config(&doc)).unwrap();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let base = demo.proxy.base_url();
    run(
        &bin.join("schemathesis"),
        &[
            "--config-file",
            config.to_str().unwrap(),
            "run",
            path.to_str().unwrap(),
            "--url",
            &base,
            "--header",
            &auth,
            "--max-examples",
            MAX_EXAMPLES,
            "--seed",
            SEED,
            "--workers",
            "1",
            "--request-timeout",
            "10",
            "--generation-database",
            "none",
            "--no-color",
        ],
        &dir,
    )
    .await;
    demo.shutdown().await;
}
