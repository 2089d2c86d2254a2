//! The OpenAPI document: served without a token at `/api/v1/openapi.json` (GET, HEAD,
//! `If-None-Match`), printed the same by `mdproxy openapi`, a 3.1 document listing
//! every catalogue path once with its parameters, the three auth forms, the
//! stream's `text/event-stream` and each answer's `data` typed from the documented
//! examples; a TypeScript client generated from it type-checks (scripts/ts-client).
//! Validation against the 3.1 schema and fuzzing are in `fuzz.rs`.

use crate::support;

use mdproxy_api::catalog::{Endpoint, KeyRole, Param, ParamKind, catalog};
use mdproxy_api::openapi::DOCUMENT_PATH;
use serde_json::Value;

/// The document as the proxy serves it, fetched without a token.
async fn served() -> Value {
    let env = support::start().await;
    let r = env.client.get(env.url(DOCUMENT_PATH)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(support::header(&r, "content-type"), "application/json");
    r.json().await.unwrap()
}

/// The operation of a catalogue endpoint.
fn operation<'d>(doc: &'d Value, endpoint: &Endpoint) -> &'d Value {
    &doc["paths"][endpoint.path.as_str()]["get"]
}

/// The documented parameter `name` in `location` of an operation, exactly once.
fn documented<'d>(op: &'d Value, name: &str, location: &str) -> &'d Value {
    let found: Vec<&Value> = op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == name && p["in"] == location)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{name} in {location} of {}",
        op["operationId"]
    );
    found[0]
}

/// `value`, or what it refers to when it is a `$ref` into the document.
fn resolve<'d>(doc: &'d Value, value: &'d Value) -> &'d Value {
    match value["$ref"].as_str() {
        Some(pointer) => doc.pointer(pointer.strip_prefix('#').unwrap()).unwrap(),
        None => value,
    }
}

/// What a documented parameter must say, given the catalogue's row.
fn check_parameter(doc: &Value, p: &Param, required: bool) {
    let schema = &doc["schema"];
    assert_eq!(doc["required"], required, "{}", p.name);
    let kind_type = match p.kind {
        ParamKind::Int { min, max } => {
            assert_eq!(
                (schema["minimum"].as_i64(), schema["maximum"].as_i64()),
                (Some(min), Some(max))
            );
            "integer"
        }
        ParamKind::Choice(values) => {
            assert_eq!(schema["enum"], serde_json::json!(values), "{}", p.name);
            "string"
        }
        ParamKind::Text { max_chars } => {
            assert_eq!(schema["maxLength"].as_u64(), Some(max_chars as u64));
            "string"
        }
        // An optional date given empty is absent: the empty string is valid too.
        ParamKind::Date if !required && p.empty_is_absent => {
            let pattern = schema["pattern"].as_str().unwrap();
            assert!(pattern.starts_with("^$|^"), "{}: {pattern}", p.name);
            "string"
        }
        ParamKind::Date => {
            assert_eq!(schema["format"], "date");
            "string"
        }
        _ => {
            assert!(
                schema["pattern"].as_str().unwrap().starts_with('^'),
                "{}",
                p.name
            );
            "string"
        }
    };
    assert_eq!(schema["type"], kind_type, "{}", p.name);
    match (p.default, p.kind) {
        (None, _) => assert!(schema.get("default").is_none(), "{}", p.name),
        (Some(d), ParamKind::Int { .. }) => assert_eq!(schema["default"].to_string(), d),
        (Some(d), _) => assert_eq!(schema["default"], d),
    }
    if p.role == KeyRole::Dropped {
        assert!(doc["description"].as_str().unwrap().contains("cache key"));
    }
}

/// The served document is OpenAPI 3.1 and lists every catalogue path exactly once:
/// 93 paths (the 91 documented GET endpoints and the two retired flows), one GET
/// operation each, with unique operation ids; and the refused POST (today.rs checks it).
#[tokio::test]
async fn document_is_openapi_3_1_listing_every_catalogue_path() {
    let doc = served().await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(doc["servers"][0]["url"], "/api/v1");
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(catalog().len(), 93);
    assert_eq!(paths.len(), 93 + mdproxy_api::catalog::REFUSED.len());
    let mut ids = Vec::new();
    for endpoint in catalog().endpoints() {
        let item = paths[&endpoint.path].as_object().unwrap();
        assert_eq!(
            item.keys().collect::<Vec<_>>(),
            ["get"],
            "{}",
            endpoint.path
        );
        let op = &item["get"];
        assert_eq!(op["summary"], endpoint.summary.as_str());
        assert_eq!(op["tags"][0], endpoint.group.as_str());
        ids.push(op["operationId"].as_str().unwrap().to_owned());
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), catalog().len(), "operation ids are unique");
}

/// Every catalogue parameter is documented where it goes, with its type, bounds,
/// choices, required flag and default; nothing else is.
#[tokio::test]
async fn every_catalogue_parameter_is_documented() {
    let doc = served().await;
    for endpoint in catalog().endpoints() {
        let op = operation(&doc, endpoint);
        let count = op["parameters"].as_array().unwrap().len();
        assert_eq!(count, endpoint.path_params.len() + endpoint.query.len());
        for p in &endpoint.path_params {
            check_parameter(documented(op, p.name, "path"), p, true);
        }
        for p in endpoint.query {
            check_parameter(documented(op, p.name, "query"), p, p.required);
        }
    }
}

/// The three auth forms are declared and required as alternatives; the stream's
/// success is `text/event-stream`, every other one JSON in the envelope; errors are
/// in the error envelope.
#[tokio::test]
async fn auth_stream_and_errors_are_documented() {
    let doc = served().await;
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(
        (&schemes["bearer"]["type"], &schemes["bearer"]["scheme"]),
        (&"http".into(), &"bearer".into())
    );
    for (name, location) in [("apiKeyHeader", "header"), ("apiKeyQuery", "query")] {
        assert_eq!(schemes[name]["type"], "apiKey");
        assert_eq!(schemes[name]["in"], location);
        assert_eq!(schemes[name]["name"], "x-api-key");
    }
    assert_eq!(
        doc["security"],
        serde_json::json!([{ "bearer": [] }, { "apiKeyHeader": [] }, { "apiKeyQuery": [] }])
    );
    for endpoint in catalog().endpoints() {
        let op = operation(&doc, endpoint);
        let success = resolve(&doc, &op["responses"]["200"]);
        let content = success["content"].as_object().unwrap();
        let media = if endpoint.streaming {
            "text/event-stream"
        } else {
            "application/json"
        };
        assert_eq!(
            content.keys().collect::<Vec<_>>(),
            [media],
            "{}",
            endpoint.path
        );
        for status in ["400", "401", "404", "429", "502", "503", "504"] {
            assert!(
                op["responses"].get(status).is_some(),
                "{status} of {}",
                endpoint.path
            );
        }
    }
    let error = &doc["components"]["schemas"]["Error"];
    let codes = error["properties"]["error"]["properties"]["code"]["enum"]
        .as_array()
        .unwrap();
    for code in [
        "invalid_parameter",
        "unauthorized",
        "rate_limited",
        "overloaded",
    ] {
        assert!(codes.contains(&code.into()), "{code}");
    }
    for field in ["success", "data", "message", "error"] {
        assert!(
            error["required"]
                .as_array()
                .unwrap()
                .contains(&field.into()),
            "{field}"
        );
    }
}

/// The schema of an operation's successful `data`: what `success: true` carries,
/// beside the upstream's own failure relayed with 200.
fn data_schema<'d>(doc: &'d Value, path: &str) -> &'d Value {
    let op = &doc["paths"][path]["get"];
    let either = &op["responses"]["200"]["content"]["application/json"]["schema"]["oneOf"];
    assert_eq!(
        either[1]["$ref"], "#/components/schemas/UpstreamFailure",
        "{path}"
    );
    let success = &either[0];
    assert_eq!(success["properties"]["success"]["const"], true, "{path}");
    resolve(doc, &success["properties"]["data"])
}

/// Every JSON endpoint's success has a named `data` schema; where the docs show a
/// successful example it is typed from it (keys, JSON types, arrays of rows), loose
/// where the upstream varies (numbers, nulls, optional keys); where they show only
/// a failure, a placeholder or a copied sample it is left open.
#[tokio::test]
async fn success_data_is_typed_from_the_documented_examples() {
    let doc = served().await;
    for endpoint in catalog().endpoints().iter().filter(|e| !e.streaming) {
        let schema = data_schema(&doc, &endpoint.path);
        assert!(schema.get("description").is_some(), "{}", endpoint.path);
    }
    let detail = data_schema(&doc, "/stock/detail/{code}");
    assert_eq!(detail["type"], serde_json::json!(["object", "null"]));
    let number = serde_json::json!({ "type": ["number", "null"] });
    assert_eq!(detail["properties"]["newPrice"], number);
    assert_eq!(
        detail["properties"]["name"],
        serde_json::json!({ "type": ["string", "null"] })
    );
    assert!(detail.get("required").is_none(), "keys are optional");
    let calendar = data_schema(&doc, "/market/trading-calendar");
    assert_eq!(calendar["type"], serde_json::json!(["array", "null"]));
    assert_eq!(calendar["items"]["type"], "object", "a row is never null");
    assert_eq!(
        calendar["items"]["properties"]["isTradingDay"],
        serde_json::json!({ "type": ["boolean", "null"] })
    );
    let indices = data_schema(&doc, "/market/indices");
    assert_eq!(
        indices["properties"]["diff"]["items"]["properties"]["changeRate"],
        number
    );
    for open in [
        "/stock/kline",
        "/market/hotmap",
        "/stock/board/info/{code}",
        "/market/flow",
    ] {
        let schema = data_schema(&doc, open);
        assert!(schema.get("type").is_none(), "{open}: {schema}");
    }
}

/// The document needs no token, answers HEAD without a body and `If-None-Match`
/// with 304, and refuses other methods.
#[tokio::test]
async fn document_is_public_and_revalidated() {
    let env = support::start().await;
    let path = format!("{}{DOCUMENT_PATH}", mdproxy_api::router::API_PREFIX);
    let get = support::raw_request(env.proxy.addr, "GET", &path, &[]).await;
    assert_eq!(get.status, 200);
    assert!(get.header("cache-control").unwrap().contains("max-age"));
    let etag = get.header("etag").unwrap().to_owned();
    let head = support::raw_request(env.proxy.addr, "HEAD", &path, &[]).await;
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(head.header("etag"), Some(etag.as_str()));
    let again =
        support::raw_request(env.proxy.addr, "GET", &path, &[("If-None-Match", &etag)]).await;
    assert_eq!((again.status, again.body.len()), (304, 0));
    let post = support::raw_request(env.proxy.addr, "POST", &path, &[]).await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
}

/// `mdproxy openapi` prints the document the proxy serves.
#[tokio::test]
async fn cli_prints_the_served_document() {
    let stdout = support::stdout_of(
        std::process::Command::new(env!("CARGO_BIN_EXE_mdproxy")).arg("openapi"),
    );
    let printed: Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(printed, served().await);
}

/// Bounds a run of scripts/ts-client (the tools are installed: it generates and checks).
const TS_CLIENT_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs scripts/ts-client on `program` in a fresh directory named `name`: generates
/// the TypeScript types of `mdproxy openapi` and type-checks the program with them.
async fn ts_client(program: &std::path::Path, name: &str) -> std::process::Output {
    let root = std::path::Path::new(support::ROOT);
    let work = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let mut command = tokio::process::Command::new(root.join("scripts/ts-client"));
    command
        .arg(program)
        .arg(&work)
        .env("MDPROXY", env!("CARGO_BIN_EXE_mdproxy"))
        .kill_on_drop(true);
    tokio::time::timeout(TS_CLIENT_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("scripts/ts-client ran past {TS_CLIENT_LIMIT:?}"))
        .unwrap()
}

/// A dashboard developer's typed client: openapi-typescript's types of the document
/// type-check `tests/ts/client.ts` (a stock's quote, the indices, the trading
/// calendar); the same program reading a field the document does not have fails
/// the check, naming the field.
#[tokio::test]
#[ignore = "needs npm's TypeScript tools: scripts/test installs them and runs the ignored tests"]
async fn a_typescript_client_type_checks_against_the_document() {
    let program = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ts/client.ts");
    let out = ts_client(&program, "ts-client").await;
    let printed = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert!(out.status.success(), "{}", printed(&out));

    let source = std::fs::read_to_string(&program).unwrap();
    let wrong = source.replace("price(quote?.newPrice)", "price(quote?.openPrice)");
    assert_ne!(wrong, source, "the program reads newPrice");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ts-client-wrong-src");
    std::fs::create_dir_all(&dir).unwrap();
    let wrong_program = dir.join("client.ts");
    std::fs::write(&wrong_program, wrong).unwrap();
    let out = ts_client(&wrong_program, "ts-client-wrong").await;
    assert!(!out.status.success(), "{}", printed(&out));
    assert!(
        printed(&out).contains("error TS2339: Property 'openPrice' does not exist"),
        "{}",
        printed(&out)
    );
}
