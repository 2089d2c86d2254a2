//! The simulator against the real upstream's documented samples
//! (`tests/data/upstream-examples.json`, a copy of `shared/upstream-examples.json`):
//! every endpoint with a success sample answers a `data` of the same outline (key
//! names and JSON types, a few levels deep).

mod support;

use serde_json::Value;

/// The documented samples, keyed by the catalogue's path templates.
const EXAMPLES: &str = include_str!("data/upstream-examples.json");

/// Samples that are not evidence for their own endpoint: (path, the endpoint whose
/// sample it copies). The test checks that each still is such a copy.
const COPIED_SAMPLES: &[(&str, &str)] = &[(
    "/stock/board/info/{code}",
    "/stock/performance/ten-years/latest/{code}",
)];

/// Object levels of `data` compared key by key (`data` itself is level 1); deeper
/// values are compared by type only.
const MAX_DEPTH: usize = 4;

/// Array items compared against the sample's element.
const ITEMS_CHECKED: usize = 3;

/// The JSON type of a value, with every number one type.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Compares the outline of `got` with the sample `expected`, adding one line per
/// difference to `out`. Rules: null on either side matches anything (the upstream's
/// tables are nullable); a `"..."` item (the docs' "more of the same") is dropped; an
/// empty sample array or object matches any array or object; array items are
/// compared with the sample's first element.
fn compare(at: &str, expected: &Value, got: &Value, depth: usize, out: &mut Vec<String>) {
    if expected.is_null() || got.is_null() {
        return;
    }
    if kind(expected) != kind(got) {
        out.push(format!(
            "{at}: expected {}, got {}",
            kind(expected),
            kind(got)
        ));
        return;
    }
    match (expected, got) {
        (Value::Object(want), Value::Object(have)) if !want.is_empty() && depth <= MAX_DEPTH => {
            for (key, value) in want {
                match have.get(key) {
                    Some(g) => compare(&format!("{at}.{key}"), value, g, depth + 1, out),
                    None => out.push(format!("{at}.{key}: expected {}, got nothing", kind(value))),
                }
            }
            for key in have.keys().filter(|k| !want.contains_key(*k)) {
                out.push(format!(
                    "{at}.{key}: expected nothing, got {}",
                    kind(&have[key])
                ));
            }
        }
        (Value::Array(want), Value::Array(have)) => {
            let Some(element) = want.iter().find(|v| v.as_str() != Some("...")) else {
                return;
            };
            if have.is_empty() {
                out.push(format!("{at}: expected items, got an empty array"));
            }
            for (i, item) in have.iter().take(ITEMS_CHECKED).enumerate() {
                compare(&format!("{at}[{i}]"), element, item, depth, out);
            }
        }
        _ => {}
    }
}

/// What to do with one entry of the examples file.
enum Plan {
    /// Compare the answer to `request` with `sample` (a success `data`).
    Check { request: String, sample: Value },
    /// No success sample: why.
    Skip(String),
}

/// The request target relative to `/api/v1` of a sample's `request` line.
fn target_of(request: &str) -> String {
    let path = request
        .strip_prefix("GET ")
        .expect("every sample request is a GET");
    path.strip_prefix("/api/v1")
        .expect("sample requests carry /api/v1")
        .to_owned()
}

fn plan(path: &str, entry: &Value, all: &serde_json::Map<String, Value>) -> Plan {
    if let Some((_, original)) = COPIED_SAMPLES.iter().find(|(p, _)| *p == path) {
        assert_eq!(
            entry["example"], all[*original]["example"],
            "{path}'s sample is no longer a copy of {original}'s: check it again"
        );
        return Plan::Skip(format!("the sample is a copy of {original}'s"));
    }
    let request = target_of(
        entry["request"]
            .as_str()
            .expect("every entry has a request"),
    );
    let example = match &entry["example"] {
        Value::Null => match &entry["successor"] {
            // The old flow paths answer in their successor's shape.
            Value::Null => return Plan::Skip("no sample".into()),
            successor => &successor["example"],
        },
        example => example,
    };
    match (&example["success"], &example["data"]) {
        (Value::Bool(false), _) => Plan::Skip(format!("failure sample: {}", example["message"])),
        (_, Value::String(_)) => Plan::Skip("placeholder instead of data".into()),
        (_, data) => Plan::Check {
            request,
            sample: data.clone(),
        },
    }
}

/// The JSON answer to `target`, which must be 200.
async fn get(sim: &mdproxy::sim::SimHandle, client: &reqwest::Client, target: &str) -> Value {
    let (status, v) = support::sim_json(sim, client, target).await;
    assert_eq!(status, 200, "{target}: {v}");
    v
}

/// Every documented success sample's outline matches the simulator's answer to the
/// sample's own request; the skipped entries are listed with the reason, their
/// number is fixed, and the simulator still answers them with success.
#[tokio::test]
async fn simulator_answers_in_the_documented_shapes() {
    let examples: serde_json::Map<String, Value> = serde_json::from_str(EXAMPLES).unwrap();
    let sim = mdproxy::sim::start(&support::sim_config(), support::saturday())
        .await
        .unwrap();
    let client = support::client();
    let mut diffs = Vec::new();
    let (mut checked, mut skipped) = (Vec::new(), Vec::new());
    let mut successors = 0;
    for (path, entry) in &examples {
        let mut targets = Vec::new();
        match plan(path, entry, &examples) {
            Plan::Check { request, sample } => targets.push((request, sample)),
            Plan::Skip(why) => {
                skipped.push(format!("{path}: {why}"));
                if !entry["request"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("/sse")
                {
                    let request = target_of(entry["request"].as_str().unwrap());
                    let v = get(&sim, &client, &request).await;
                    assert_eq!(
                        v["success"], true,
                        "{request}: the simulator's guess answers"
                    );
                }
                continue;
            }
        }
        if let Some(successor) = entry.get("successor") {
            let request = target_of(successor["request"].as_str().unwrap());
            targets.push((request, successor["example"]["data"].clone()));
            successors += 1;
        }
        for (request, sample) in targets {
            let v = get(&sim, &client, &request).await;
            assert_eq!(v["success"], true, "{request}");
            compare(
                &format!("{request} data"),
                &sample,
                &v["data"],
                1,
                &mut diffs,
            );
        }
        checked.push(path.clone());
    }
    println!(
        "checked {} endpoints; skipped {}:",
        checked.len(),
        skipped.len()
    );
    for s in &skipped {
        println!("  {s}");
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    assert_eq!(checked.len() + skipped.len(), examples.len());
    assert_eq!(examples.len(), 72, "one entry per catalogue endpoint");
    // 72 entries: 7 failure samples, 3 placeholders, the stream without a sample and
    // one copied sample are skipped; the two old flow paths are checked against their
    // successors' samples, and so are the successors' own routes.
    assert_eq!(skipped.len(), 12, "{skipped:#?}");
    assert_eq!(checked.len(), 60);
    assert_eq!(successors, 2);
}

/// The comparison itself: what counts as a difference.
#[test]
fn outline_comparison_rules() {
    let sample: Value = serde_json::json!({
        "total": 1, "diff": [{ "a": 1, "b": "x", "c": null }, "..."], "empty": [], "obj": {}
    });
    let mut out = Vec::new();
    let same = serde_json::json!({
        "total": 2.5, "diff": [{ "a": 2, "b": "y", "c": [1] }], "empty": [{ "z": 1 }], "obj": { "k": 1 }
    });
    compare("data", &sample, &same, 1, &mut out);
    assert!(out.is_empty(), "{out:?}");
    let other =
        serde_json::json!({ "total": "1", "diff": [{ "a": 1, "d": 1 }], "empty": {}, "obj": {} });
    compare("data", &sample, &other, 1, &mut out);
    assert_eq!(
        out,
        [
            "data.diff[0].b: expected string, got nothing",
            "data.diff[0].c: expected null, got nothing",
            "data.diff[0].d: expected nothing, got number",
            "data.empty: expected array, got object",
            "data.total: expected number, got string",
        ]
    );
}
