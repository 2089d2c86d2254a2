//! The demo against its own OpenAPI document: openapi-spec-validator checks the
//! served document is valid OpenAPI 3.1, then schemathesis fuzzes every operation
//! from it (no server errors, statuses, content types, headers and bodies as
//! documented, invalid input refused, valid input accepted). Both tools come from
//! `scripts/python-tools`, pinned, in a virtual environment under the target directory.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mdproxy::demo::Demo;
use mdproxy_api::catalog::catalog;
use mdproxy_api::openapi::DOCUMENT_PATH;
use mdproxy_config::Secret;
use mdproxy_market::SystemClock;
use serde_json::Value;

/// The demo's client token (`mdproxy demo`'s default).
const TOKEN: &str = "demo-token";
/// Test cases per operation in the fuzzing phase (the examples and coverage phases
/// make as many as they need).
const MAX_EXAMPLES: &str = "20";
/// schemathesis' phases, split between two runs of about the same length (Nov 30:
/// examples 4 s and coverage 91 s; fuzzing 74 s; stateful has no links to follow
/// in this document).
const PHASES: [&str; 2] = ["examples,coverage", "fuzzing,stateful"];
/// Fixed, so a failure reproduces.
const SEED: &str = "20260307";
/// Bounds the whole fuzz run (the tools install on first use, then the run itself).
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// What both tests start from: the tools, the demo (simulated upstream and proxy,
/// default configuration, the simulator answering at once) on loopback ports, and a
/// fresh directory holding the document as the proxy serves it without a token.
struct Setup {
    bin: PathBuf,
    demo: Demo,
    /// The tools' working directory (they keep their state in it).
    dir: PathBuf,
    /// `dir/openapi.json`.
    document: PathBuf,
    doc: Value,
}

async fn setup(name: &str) -> Setup {
    let bin = support::python_tools();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    let clock = Arc::new(SystemClock);
    let options = mdproxy::demo::DemoOptions {
        listen: "127.0.0.1:0".into(),
        admin_listen: String::new(),
        token: Secret::new(TOKEN),
        admin_token: Secret::new("fuzz-admin"),
        cors_origins: Vec::new(),
        latency_ms: 0,
    };
    let demo = mdproxy::demo::start(&options, clock).await.unwrap();
    let url = format!("{}{DOCUMENT_PATH}", demo.proxy.base_url());
    let response = support::client().get(url).send().await.unwrap();
    let bytes = response.bytes().await.unwrap();
    let document = dir.join("openapi.json");
    std::fs::write(&document, &bytes).unwrap();
    Setup {
        bin,
        demo,
        dir,
        document,
        doc: serde_json::from_slice(&bytes).unwrap(),
    }
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
/// - a range that ends before it starts is refused (400), one of two parameters may
///   be required (topic-subject's subjectKey or subjectId), and the bare earnings
///   forecast is refused upstream: JSON Schema cannot state a relation between
///   parameters, so valid-looking input may be rejected there (every other check
///   still runs);
/// - the refused download's only answer is `501` by design, which schemathesis
///   counts as a server error: not fuzzed (tests/today.rs checks it).
fn per_operation_config(doc: &Value) -> String {
    let stream = catalog()
        .endpoints()
        .iter()
        .find(|e| e.streaming)
        .expect("the catalogue has the stream");
    let ranged: Vec<String> = catalog()
        .endpoints()
        .iter()
        .filter(|e| {
            let pair = |a, b| e.query_param(a).is_some() && e.query_param(b).is_some();
            // The earnings forecast: every parameter is optional in the docs, yet
            // their sample of the bare request is the upstream's refusal.
            pair("from", "to")
                || pair("startDate", "endDate")
                || !e.one_of.is_empty()
                || e.path == "/stock/earnings-forecast"
        })
        .map(|e| format!("{:?}", operation_id(doc, &e.path)))
        .collect();
    let refused: Vec<String> = mdproxy_api::catalog::REFUSED
        .iter()
        .map(|(path, _)| {
            format!(
                "{:?}",
                doc["paths"][*path]["post"]["operationId"].as_str().unwrap()
            )
        })
        .collect();
    format!(
        "[[operations]]\ninclude-operation-id = {:?}\nmax-stream-events = 1\nrequest-timeout = 0.5\n\n\
         [[operations]]\ninclude-operation-id = [{}]\nchecks.positive_data_acceptance.enabled = false\n\n\
         [[operations]]\ninclude-operation-id = [{}]\nenabled = false\n",
        operation_id(doc, &stream.path),
        ranged.join(", "),
        refused.join(", ")
    )
}

/// The served document is valid OpenAPI 3.1 (openapi-spec-validator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the Python tools: scripts/test installs them and runs the ignored tests"]
async fn served_document_is_valid_openapi_3_1() {
    let s = setup("openapi-validate").await;
    let document = s.document.to_str().unwrap();
    let args = ["--schema", "3.1", "--validation-errors", "all", document];
    run(&s.bin.join("openapi-spec-validator"), &args, &s.dir).await;
    s.demo.shutdown().await;
}

/// schemathesis, driven by the served document, finds no server error and no
/// answer that breaks the document, with every check it has.
///
/// Its phases run as two processes at once, [`PHASES`]: schemathesis is Python,
/// one core's work whatever `--workers` says (two workers took as long as one), and
/// it was the last test of the binary to end, with the other core idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the Python tools: scripts/test installs them and runs the ignored tests"]
async fn demo_answers_as_its_document_says() {
    let s = setup("openapi-fuzz").await;
    let config = s.dir.join("schemathesis.toml");
    std::fs::write(&config, per_operation_config(&s.doc)).unwrap();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let base = s.demo.proxy.base_url();
    let args = |phases| {
        [
            "--config-file",
            config.to_str().unwrap(),
            "run",
            s.document.to_str().unwrap(),
            "--phases",
            phases,
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
        ]
    };
    let [first, second] = PHASES.map(args);
    let tool = s.bin.join("schemathesis");
    tokio::join!(run(&tool, &first, &s.dir), run(&tool, &second, &s.dir));
    s.demo.shutdown().await;
}
