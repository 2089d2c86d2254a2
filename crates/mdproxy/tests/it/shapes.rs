//! The simulator against the real upstream's documented examples
//! (`docs/upstream-endpoints.json`, every documented endpoint): every documented
//! success example (parsed, or repaired where the docs cut it short) is compared with
//! the simulator's answer to the documented sample request, outline against outline
//! (key names and JSON types, a few levels deep).

use crate::support;

use serde_json::Value;

/// The documented list, with each endpoint's sample request and example answer.
const DOCS: &str = include_str!("../../../../docs/upstream-endpoints.json");

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

/// What to do with one documented endpoint.
enum Plan {
    /// Compare the answer to `request` with `sample` (a success `data`).
    Check { request: String, sample: Value },
    /// No success example to compare with: why, and the status the simulator
    /// answers the sample request with (`None`: no sample request to send).
    Skip { why: String, status: Option<u16> },
}

/// The request target relative to `/api/v1` of a documented sample request line.
fn target_of(request: &str) -> String {
    let path = request
        .strip_prefix("GET ")
        .expect("every sample request is a GET");
    path.strip_prefix("/api/v1")
        .expect("sample requests carry /api/v1")
        .to_owned()
}

/// Whether the docs generator read the example as it stands (or repaired one the
/// docs cut short).
fn is_readable(status: &str) -> bool {
    status == "parsed" || status.starts_with("repaired")
}

fn plan(entry: &Value, all: &[Value]) -> Plan {
    let path = entry["path"].as_str().unwrap();
    let status = entry["example_status"].as_str().unwrap_or_default();
    let example = &entry["example_response"];
    let request = entry["sample_request"].as_str().filter(|r| !r.is_empty());
    let skip = |why: String, status| Plan::Skip { why, status };
    if entry["method"] != "GET" || request.is_none() {
        return skip(format!("no sample request ({status})"), None);
    }
    let request = target_of(request.unwrap());
    if entry["example_notes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|n| n.as_str().is_some_and(|n| n.starts_with("removed")))
    {
        return skip(
            "retired from the docs: the upstream no longer serves it".into(),
            Some(404),
        );
    }
    if let Some((_, original)) = COPIED_SAMPLES.iter().find(|(p, _)| *p == path) {
        let copied = all.iter().find(|e| e["path"] == *original).unwrap();
        assert_eq!(
            *example, copied["example_response"],
            "{path}'s sample is no longer a copy of {original}'s: check it again"
        );
        return skip(format!("the sample is a copy of {original}'s"), Some(200));
    }
    match (is_readable(status), &example["success"], &example["data"]) {
        (true, Value::Bool(true), data) if !data.is_string() => Plan::Check {
            request,
            sample: data.clone(),
        },
        (_, Value::Bool(false), _) => {
            let message = example["message"].as_str().unwrap_or_default();
            // "Bad Request Exception" is the sample request refused; any other
            // message a transient failure of the sample's day.
            let status = if message == "Bad Request Exception" {
                400
            } else {
                200
            };
            skip(format!("failure sample: {message}"), Some(status))
        }
        _ => skip(format!("no readable data ({status})"), Some(200)),
    }
}

/// The JSON answer to `target` and its status.
async fn get(sim: &mdproxy_sim::SimHandle, client: &reqwest::Client, target: &str) -> (u16, Value) {
    support::sim_json(sim, client, target).await
}

/// Every documented success example's outline matches the simulator's answer to the
/// endpoint's documented sample request; the endpoints without one are listed with
/// the reason, their number is fixed, and the simulator still answers their sample
/// requests as the docs say (success, or the documented refusal).
#[tokio::test]
async fn simulator_answers_in_the_documented_shapes() {
    let docs: Vec<Value> = serde_json::from_str(DOCS).unwrap();
    let sim = mdproxy_sim::start(&support::sim_config(), support::saturday())
        .await
        .unwrap();
    let client = support::client();
    let mut diffs = Vec::new();
    let (mut checked, mut skipped) = (Vec::new(), Vec::new());
    for entry in &docs {
        let path = entry["path"].as_str().unwrap();
        match plan(entry, &docs) {
            Plan::Check { request, sample } => {
                let (status, v) = get(&sim, &client, &request).await;
                assert_eq!(status, 200, "{request}: {v}");
                assert_eq!(v["success"], true, "{request}");
                compare(
                    &format!("{request} data"),
                    &sample,
                    &v["data"],
                    1,
                    &mut diffs,
                );
                checked.push(path);
            }
            Plan::Skip { why, status } => {
                if let Some(expected) = status {
                    let request = target_of(entry["sample_request"].as_str().unwrap());
                    let (got, v) = get(&sim, &client, &request).await;
                    assert_eq!(got, expected, "{request}: {v}");
                    assert_eq!(v["success"], expected == 200, "{request}: {v}");
                }
                skipped.push(format!("{path}: {why}"));
            }
        }
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
    assert_eq!(
        docs.len(),
        94,
        "92 documented endpoints and the two retired flows"
    );
    // 80 readable success examples, one of them a copy; 7 failure samples, 3
    // placeholders, the stream and the download without a sample, the two retired
    // flows.
    assert_eq!(checked.len(), 79, "{checked:#?}");
    assert_eq!(skipped.len(), 15, "{skipped:#?}");
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
