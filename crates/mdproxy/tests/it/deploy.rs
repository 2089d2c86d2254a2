//! The packaging in `deploy/`: the Kubernetes manifests are valid and agree with the
//! configuration they ship, their probes ask what the admin listener serves, the
//! container image's files agree with each other, the systemd unit is hardened, and
//! every metric the Grafana dashboard queries exists in a live `/metrics`.
//!
//! Beyond Rust this needs `systemd-analyze` (Debian's `systemd`, installed by
//! `scripts/test`) and the pinned Python tools of `scripts/python-tools`
//! (kubernetes-validate, with the Kubernetes schemas, and hadolint).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

const ROOT: &str = support::ROOT;

fn deploy(path: &str) -> PathBuf {
    Path::new(ROOT).join("deploy").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `command`; fails the test with its output unless it succeeds.
fn succeeds(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{command:?} failed:\n{text}");
    text
}

// ---------------------------------------------------------------------------------
// Kubernetes

/// The manifest files of `deploy/kubernetes`, sorted, kustomization included.
fn manifest_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy("kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

/// Every YAML document of `text` (empty documents skipped), as JSON values.
fn yaml_documents(text: &str, origin: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{origin}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// Every object of the manifests, by `Kind/name`; each has apiVersion, kind and
/// metadata.name.
fn objects() -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for file in manifest_files() {
        let origin = file.display().to_string();
        let docs = yaml_documents(&read(&file), &origin);
        assert!(!docs.is_empty(), "{origin}: no YAML document");
        for doc in docs {
            let field = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
            let api = field(&doc["apiVersion"]);
            let kind = field(&doc["kind"]);
            assert!(api.is_some(), "{origin}: a document without apiVersion");
            let kind = kind.unwrap_or_else(|| panic!("{origin}: a document without kind"));
            if kind == "Kustomization" {
                continue;
            }
            let name = field(&doc["metadata"]["name"])
                .unwrap_or_else(|| panic!("{origin}: a {kind} without metadata.name"));
            let key = format!("{kind}/{name}");
            assert!(all.insert(key.clone(), doc).is_none(), "{key} twice");
        }
    }
    all
}

fn object<'a>(all: &'a BTreeMap<String, Value>, key: &str) -> &'a Value {
    all.get(key).unwrap_or_else(|| {
        panic!(
            "deploy/kubernetes has no {key} (has {:?})",
            all.keys().collect::<Vec<_>>()
        )
    })
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

/// A Kubernetes memory quantity in bytes (`512Mi`, `1Gi`, `1000000`).
fn bytes_of(quantity: &str) -> u64 {
    let (digits, factor) = [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)]
        .iter()
        .find_map(|(suffix, f)| quantity.strip_suffix(suffix).map(|d| (d, *f)))
        .unwrap_or((quantity, 1));
    digits.parse::<u64>().unwrap() * factor
}

/// The port of a listen address such as `0.0.0.0:9091`.
fn port_of(listen: &str) -> u64 {
    let addr: std::net::SocketAddr = listen.parse().unwrap();
    u64::from(addr.port())
}

/// The ConfigMap's `mdproxy.toml`, as text and parsed.
fn shipped_config(all: &BTreeMap<String, Value>) -> (String, toml::Table) {
    let text = str_of(
        &object(all, "ConfigMap/mdproxy-config")["data"]["mdproxy.toml"],
        "ConfigMap data mdproxy.toml",
    )
    .to_owned();
    let table = toml::from_str(&text).expect("the ConfigMap's mdproxy.toml is TOML");
    (text, table)
}

fn mdproxy_container(all: &BTreeMap<String, Value>) -> &Value {
    let containers = &object(all, "Deployment/mdproxy")["spec"]["template"]["spec"]["containers"];
    containers
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "mdproxy")
        .expect("a container named mdproxy")
}

/// Every file parses, every object names itself, the set is complete, the
/// kustomization lists exactly the files, and kubernetes-validate accepts each object
/// against the Kubernetes schemas, strictly (no unknown field).
#[test]
#[ignore = "needs the Python tools (kubernetes-validate, hadolint): scripts/test installs them and runs the ignored tests"]
fn kubernetes_manifests_are_valid_and_complete() {
    let all = objects();
    for key in [
        "ConfigMap/mdproxy-config",
        "Deployment/mdproxy",
        "Service/mdproxy",
        "Service/mdproxy-admin",
        "PodDisruptionBudget/mdproxy",
        "Deployment/mdproxy-redis",
        "Service/mdproxy-redis",
    ] {
        object(&all, key);
    }

    // Security review: an empty secret.yaml among the resources overwrote, on every
    // `kubectl apply -k`, the Secret an operator had created out of band.
    let secrets: Vec<&String> = all.keys().filter(|k| k.starts_with("Secret/")).collect();
    assert!(
        secrets.is_empty(),
        "the Secret is created out of band (docs/deployment.md), never applied with the manifests: {secrets:?}"
    );

    let kustomization = yaml_documents(
        &read(&deploy("kubernetes/kustomization.yaml")),
        "kustomization.yaml",
    );
    let listed: BTreeSet<String> = kustomization[0]["resources"]
        .as_array()
        .expect("kustomization resources")
        .iter()
        .map(|r| str_of(r, "resource").to_owned())
        .collect();
    let files: BTreeSet<String> = manifest_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .filter(|f| f != "kustomization.yaml")
        .collect();
    assert_eq!(
        listed, files,
        "kustomization.yaml lists every manifest file"
    );

    let bin = support::python_tools();
    let mut validate = Command::new(bin.join("kubernetes-validate"));
    validate.args(["--strict", "--kubernetes-version", "1.30"]);
    for file in &files {
        validate.arg(deploy("kubernetes").join(file));
    }
    succeeds(&mut validate);
}

/// The Deployment agrees with the configuration it mounts: ports, the config path,
/// the grace period, memory for the cache, the tokens from the Secret, Redis, and the
/// sandbox; and `mdproxy check-config` accepts the file with the Deployment's
/// environment.
#[test]
fn deployment_agrees_with_its_configuration() {
    let all = objects();
    let (text, config) = shipped_config(&all);
    let deployment = object(&all, "Deployment/mdproxy");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = mdproxy_container(&all);

    // Ports: the named ports are the listeners, open beyond loopback.
    let listen = |section: &str| config[section]["listen"].as_str().unwrap().to_owned();
    let port_named = |name: &str| {
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
            .as_u64()
            .unwrap()
    };
    for (section, name) in [("server", "http"), ("admin", "admin")] {
        let addr = listen(section);
        assert!(
            addr.starts_with("0.0.0.0:") || addr.starts_with("[::]:"),
            "{section}.listen = {addr}: probes and Services cannot reach loopback"
        );
        assert_eq!(
            port_of(&addr),
            port_named(name),
            "{section}.listen vs port {name}"
        );
    }

    // The config is read from the mounted ConfigMap directory (no subPath: a subPath
    // mount never sees the ConfigMap change).
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let path = args[args.iter().position(|a| *a == "--config").unwrap() + 1];
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| Path::new(path).parent() == Some(Path::new(str_of(&m["mountPath"], "mountPath"))))
        .unwrap_or_else(|| panic!("no volume mounted on the directory of {path}"));
    assert!(mount["subPath"].is_null(), "{mount}");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["configMap"]["name"], "mdproxy-config");
    assert_eq!(Path::new(path).file_name().unwrap(), "mdproxy.toml");

    // Termination: the preStop sleep and the shutdown grace fit in the grace period.
    let grace_ms = config["server"]["shutdown_grace_ms"].as_integer().unwrap() as u64;
    let pre_stop = &container["lifecycle"]["preStop"]["exec"]["command"];
    assert_eq!(pre_stop[0], "sleep", "{pre_stop}");
    let sleep_ms: u64 = str_of(&pre_stop[1], "sleep seconds")
        .parse::<u64>()
        .unwrap()
        * 1000;
    let period_ms = pod["terminationGracePeriodSeconds"].as_u64().unwrap() * 1000;
    assert!(
        period_ms > sleep_ms + grace_ms,
        "terminationGracePeriodSeconds must exceed the preStop sleep plus server.shutdown_grace_ms"
    );

    // Memory: the limit holds the cache's RSS bound (scripts/soak.py's goal).
    let max_bytes = config["cache"]["max_bytes"].as_integer().unwrap() as u64;
    let bound = max_bytes + max_bytes / 4 + (64 << 20);
    let resources = &container["resources"];
    let limit = bytes_of(str_of(&resources["limits"]["memory"], "memory limit"));
    let request = bytes_of(str_of(&resources["requests"]["memory"], "memory request"));
    assert!(
        limit > bound,
        "memory limit {limit} below 1.25 x max_bytes + 64 MiB = {bound}"
    );
    assert!(
        request >= bound && request <= limit,
        "memory request {request}"
    );

    // The sandbox.
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(pod["securityContext"]["runAsUser"].as_u64().unwrap() > 0);
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    // Service links would add MDPROXY_*_SERVICE_HOST and such, which mdproxy reads as
    // (unknown) config keys.
    assert_eq!(pod["enableServiceLinks"], false);
    assert_eq!(deployment["spec"]["replicas"], 2);

    // Selectors: the Services and the budget select the pods.
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for key in ["Service/mdproxy", "Service/mdproxy-admin"] {
        let selector = object(&all, key)["spec"]["selector"].as_object().unwrap();
        for (k, v) in selector {
            assert_eq!(&labels[k], v, "{key} selects {k}={v}");
        }
    }
    let budget = object(&all, "PodDisruptionBudget/mdproxy");
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let admin_service = object(&all, "Service/mdproxy-admin");
    let annotations = &admin_service["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(
        str_of(&annotations["prometheus.io/port"], "prometheus.io/port"),
        port_named("admin").to_string()
    );
    assert_eq!(annotations["prometheus.io/path"], "/metrics");

    // Cluster mode: [cluster] points at the Redis Service.
    let redis_url = config["cluster"]["redis_url"].as_str().unwrap();
    let redis = object(&all, "Service/mdproxy-redis");
    let redis_port = redis["spec"]["ports"][0]["port"].as_u64().unwrap();
    assert_eq!(redis_url, format!("redis://mdproxy-redis:{redis_port}/0"));

    // The tokens come from the Secret that docs/deployment.md's command creates, and the file
    // passes check-config with the Deployment's environment (each secret a made-up
    // value); env_clear, so only what the pod would have counts.
    let created = readme_secret_keys();
    let mut check = Command::new(env!("CARGO_BIN_EXE_mdproxy"));
    check.env_clear();
    let mut names = BTreeSet::new();
    for var in container["env"].as_array().unwrap() {
        let name = str_of(&var["name"], "env name");
        names.insert(name.to_owned());
        let value = match var["valueFrom"]["secretKeyRef"].as_object() {
            Some(r) => {
                assert_eq!(r["name"], "mdproxy-secrets", "{name}");
                let key = str_of(&r["key"], "secret key");
                assert!(
                    created.contains(key),
                    "docs/deployment.md's `kubectl create secret` makes no key {key} ({name}): {created:?}"
                );
                format!("{key}-5e0c7a91d2")
            }
            None => str_of(&var["value"], name).to_owned(),
        };
        check.env(name, value);
    }
    for required in ["MDPROXY_AUTH_TOKENS", "MDPROXY_UPSTREAM_TOKEN"] {
        assert!(
            names.contains(required),
            "the Deployment does not set {required}"
        );
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-configmap");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mdproxy.toml");
    std::fs::write(&file, &text).unwrap();
    succeeds(check.arg("check-config").arg(&file));
}

/// The keys the deployment page's `kubectl create secret generic mdproxy-secrets`
/// command gives the Secret (`--from-literal=KEY=...`).
fn readme_secret_keys() -> BTreeSet<String> {
    let readme = read(&Path::new(ROOT).join("docs/deployment.md"));
    let start = readme
        .find("kubectl create secret generic mdproxy-secrets")
        .expect("docs/deployment.md shows how to create the Secret");
    let command: String = readme[start..]
        .lines()
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("```"))
        .collect();
    command
        .split("--from-literal=")
        .skip(1)
        .map(|arg| arg.split('=').next().unwrap().to_owned())
        .collect()
}

/// Every HTTP probe of the Deployment asks the admin port for a path the admin
/// listener answers 200 (`/readyz` once the upstream has answered).
#[tokio::test]
async fn probes_ask_what_the_admin_listener_serves() {
    let all = objects();
    let container = mdproxy_container(&all);
    let env = support::start_with(
        |_| {},
        |c| c.admin.listen = "127.0.0.1:0".into(),
        Some(support::saturday()),
    )
    .await;
    let admin = format!("http://{}", env.proxy.admin_addr.unwrap());
    assert_eq!(env.get("/market/indices").await.status(), 200);
    let mut probes = 0;
    for kind in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let probe = &container[kind];
        if probe.is_null() {
            assert_ne!(kind, "livenessProbe", "no liveness probe");
            assert_ne!(kind, "readinessProbe", "no readiness probe");
            continue;
        }
        let get = &probe["httpGet"];
        assert_eq!(get["port"], "admin", "{kind} asks the admin port");
        let path = str_of(&get["path"], "probe path");
        let url = format!("{admin}{path}");
        // Bounded: /readyz may take a moment to see the upstream's first answer.
        let mut last = 0;
        for _ in 0..50 {
            last = env.client.get(&url).send().await.unwrap().status().as_u16();
            if last == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(last, 200, "{kind}: GET {path} on the admin listener");
        probes += 1;
    }
    assert!(probes >= 2);
    assert_eq!(
        str_of(&container["readinessProbe"]["httpGet"]["path"], "path"),
        "/readyz"
    );
    assert_eq!(
        str_of(&container["livenessProbe"]["httpGet"]["path"], "path"),
        "/healthz"
    );
    env.proxy.shutdown().await;
}

// ---------------------------------------------------------------------------------
// Container image

/// The Dockerfile's instructions (continuation lines joined), as (keyword, rest).
fn dockerfile() -> Vec<(String, String)> {
    let text = read(&deploy("Dockerfile"));
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (keyword, rest) = current.split_once(' ').unwrap_or((&current, ""));
        out.push((keyword.to_uppercase(), rest.trim().to_owned()));
        current.clear();
    }
    out
}

/// The image and the README's install step build the `dist` profile, which is the
/// release profile optimised as one program (docs/BENCHMARKS.md, "Build figures").
#[test]
fn the_image_and_the_readme_build_the_dist_profile() {
    let manifest: toml::Table = toml::from_str(&read(&Path::new(ROOT).join("Cargo.toml"))).unwrap();
    let dist = &manifest["profile"]["dist"];
    assert_eq!(dist["inherits"].as_str(), Some("release"));
    assert_eq!(dist["lto"].as_str(), Some("fat"));
    assert_eq!(dist["codegen-units"].as_integer(), Some(1));

    let steps = dockerfile();
    let build = steps
        .iter()
        .find(|(k, rest)| k == "RUN" && rest.contains("cargo build"))
        .map(|(_, rest)| rest.as_str())
        .expect("a RUN step builds the binary");
    assert!(build.contains("--profile dist --locked"), "{build}");
    assert!(build.contains("target/dist/mdproxy"), "{build}");

    let readme = read(&Path::new(ROOT).join("README.md"));
    assert!(
        readme.contains("cargo build --profile dist\n"),
        "README builds dist"
    );
    assert!(readme.contains("install -m 0755 target/dist/mdproxy"));
}

/// The profile-guided build the README offers is the `dist` profile built twice, once
/// instrumented and once with the training's merged profile, and leaves the binary
/// where the README says (docs/BENCHMARKS.md, "Build
/// figures").
#[test]
fn the_profile_guided_build_is_the_dist_profile_trained() {
    let readme = read(&Path::new(ROOT).join("README.md"));
    assert!(readme.contains("`scripts/pgo.sh` builds it profile-guided"));
    assert!(readme.contains("`target/pgo/mdproxy`"));
    let script = read(&Path::new(ROOT).join("scripts/pgo.sh"));
    for part in [
        "cargo build --profile dist --locked --bin mdproxy",
        "-Cprofile-generate=",
        "scripts/pgo-train.py",
        "merge -o \"$work/merged.profdata\" \"$work\"/profiles/serve-*.profraw",
        "-Cprofile-use=$profile",
        "cp \"$work/use/$host/dist/mdproxy\" \"$work/mdproxy\"",
    ] {
        assert!(script.contains(part), "scripts/pgo.sh lacks {part}");
    }
    assert!(script.contains("work=\"$PWD/target/pgo\""));
    let train = read(&Path::new(ROOT).join("scripts/pgo-train.py"));
    assert!(train.contains("\"serve-%p.profraw\""));
}

/// The image's files agree: it exposes the listeners of the config it copies, runs as
/// a numeric non-root user, probes the admin listener's `/healthz`, and starts with
/// the file it copied; hadolint finds nothing; the baked config fails closed without
/// an upstream and tokens and passes with them; `.dockerignore` keeps target/ out.
#[test]
#[ignore = "needs the Python tools (kubernetes-validate, hadolint): scripts/test installs them and runs the ignored tests"]
fn container_image_files_agree() {
    let steps = dockerfile();
    let last_stage = steps.iter().rposition(|(k, _)| k == "FROM").unwrap();
    let runtime = &steps[last_stage..];
    let get = |keyword: &str| -> Vec<&str> {
        runtime
            .iter()
            .filter(|(k, _)| k == keyword)
            .map(|(_, rest)| rest.as_str())
            .collect()
    };

    let copy = get("COPY")
        .into_iter()
        .find(|c| c.starts_with("deploy/container.toml"))
        .expect("the runtime stage copies deploy/container.toml");
    let config_path = copy.split_whitespace().nth(1).unwrap();
    let config: toml::Table = toml::from_str(&read(&deploy("container.toml"))).unwrap();
    let server = port_of(config["server"]["listen"].as_str().unwrap());
    let admin = port_of(config["admin"]["listen"].as_str().unwrap());

    let exposed: BTreeSet<u64> = get("EXPOSE")
        .iter()
        .flat_map(|e| e.split_whitespace())
        .map(|p| p.trim_end_matches("/tcp").parse().unwrap())
        .collect();
    assert_eq!(exposed, BTreeSet::from([server, admin]), "EXPOSE");

    let user = get("USER");
    let uid: u32 = user
        .last()
        .expect("USER")
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric USER");
    assert!(uid > 0, "runs as root");

    let health = get("HEALTHCHECK");
    let health = health.first().expect("HEALTHCHECK");
    assert!(
        health.contains(&format!("http://127.0.0.1:{admin}/healthz")),
        "{health}"
    );

    let cmd = get("CMD").last().unwrap().to_string();
    let cmd: Vec<String> = serde_json::from_str(&cmd).expect("CMD in exec form");
    assert_eq!(cmd, ["serve", "--config", config_path]);

    let ignored = read(&Path::new(ROOT).join(".dockerignore"));
    assert!(
        ignored
            .lines()
            .any(|l| l.trim() == "target/" || l.trim() == "target")
    );

    let bin = support::python_tools();
    succeeds(Command::new(bin.join("hadolint")).arg(deploy("Dockerfile")));

    let check = |env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mdproxy"));
        c.env_clear()
            .arg("check-config")
            .arg(deploy("container.toml"));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let refused = check(&[]);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("upstream.base_url") && err.contains("auth.tokens"),
        "{err}"
    );
    let accepted = check(&[
        (
            "MDPROXY_UPSTREAM_BASE_URL",
            "https://market-data.example.com/api/v1",
        ),
        ("MDPROXY_UPSTREAM_TOKEN", "0c9d4e2a7f1b6358"),
        ("MDPROXY_AUTH_TOKENS", "token-a,token-b"),
    ]);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
}

// ---------------------------------------------------------------------------------
// systemd

/// `systemd-analyze security` rates the unit at most 3.0, and `systemd-analyze
/// verify` accepts it (with ExecStart pointing at the binary under test, which must
/// exist).
#[test]
#[ignore = "needs systemd-analyze: scripts/test installs it and runs the ignored tests"]
fn systemd_unit_is_hardened() {
    let unit = deploy("mdproxy.service");
    let program = support::program("systemd-analyze");
    let analyze = || {
        let mut c = Command::new(&program);
        c.env("SYSTEMD_COLORS", "0").env("SYSTEMD_PAGER", "");
        c
    };
    let report = succeeds(
        analyze()
            .args(["security", "--offline=yes", "--no-pager"])
            .arg(&unit),
    );
    let line = report
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no overall exposure in:\n{report}"));
    let score: f64 = line
        .split(':')
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no score in {line:?}"));
    eprintln!("deploy/mdproxy.service: {}", line.trim());
    assert!(score <= 3.0, "{line}\n{report}");

    let text = read(&unit).replace("/usr/local/bin/mdproxy", env!("CARGO_BIN_EXE_mdproxy"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-unit");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("mdproxy.service");
    std::fs::write(&copy, text).unwrap();
    succeeds(analyze().args(["verify", "--man=no"]).arg(&copy));
}

// ---------------------------------------------------------------------------------
// Grafana

/// Identifiers and string literals of a PromQL expression, in order (numbers,
/// operators and brackets as one-character punctuation).
#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    Str,
    Punct(char),
}

fn tokens(expr: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            let mut escaped = false;
            for d in chars.by_ref() {
                if escaped {
                    escaped = false;
                } else if d == '\\' {
                    escaped = true;
                } else if d == c {
                    break;
                }
            }
            out.push(Token::Str);
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let mut ident = String::from(c);
            while let Some(&d) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' || d == ':' {
                    ident.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(Token::Ident(ident));
        } else if c == '$' {
            // A Grafana variable ($__rate_interval, $instance): not PromQL.
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_alphanumeric() || *d == '_')
            {
                chars.next();
            }
        } else if !c.is_whitespace() {
            out.push(Token::Punct(c));
        }
    }
    out
}

/// The metric names an expression selects (anything named `mdproxy_*` or
/// `process_*`), and the label names it matches on or groups by.
fn metrics_and_labels(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let tokens = tokens(expr);
    let mut metrics = BTreeSet::new();
    let mut labels = BTreeSet::new();
    // Every identifier from `from` up to the token `close`: the label names of a
    // selector or a grouping; returns where it stopped.
    let mut take = |from: usize, close: char| {
        let mut i = from;
        while i < tokens.len() && tokens[i] != Token::Punct(close) {
            if let Token::Ident(label) = &tokens[i] {
                labels.insert(label.clone());
            }
            i += 1;
        }
        i
    };
    let grouping = ["by", "without", "on", "ignoring"];
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(name) if name.starts_with("mdproxy_") || name.starts_with("process_") => {
                metrics.insert(name.clone());
            }
            Token::Ident(word)
                if grouping.contains(&word.as_str())
                    && tokens.get(i + 1) == Some(&Token::Punct('(')) =>
            {
                i = take(i + 2, ')');
            }
            Token::Punct('{') => i = take(i + 1, '}'),
            _ => {}
        }
        i += 1;
    }
    (metrics, labels)
}

/// A family name: a histogram's series without `_bucket`, `_sum` and `_count`.
fn family(sample: &str, histograms: &BTreeSet<String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix)
            && histograms.contains(base)
        {
            return base.to_owned();
        }
    }
    sample.to_owned()
}

/// The sample names of an exposition and the label names each carries.
fn samples(exposition: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            // Up to the closing brace: the value, a timestamp or an exemplar follow.
            for token in tokens(&line[name_end..]) {
                match token {
                    Token::Ident(label) => {
                        labels.insert(label);
                    }
                    Token::Punct('}') => break,
                    _ => {}
                }
            }
        }
    }
    out
}

/// The dashboard is a Grafana dashboard whose queries use only metrics (and labels)
/// that a live `/metrics` has, after requests that create the labelled series: a
/// miss, a hit, a refused token and an unknown path.
#[tokio::test]
async fn dashboard_queries_only_metrics_that_exist() {
    let dashboard: Value = serde_json::from_str(&read(&deploy("grafana/mdproxy.json")))
        .expect("deploy/grafana/mdproxy.json is JSON");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    assert!(!str_of(&dashboard["uid"], "uid").is_empty());
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(
        variables.iter().any(|v| v["type"] == "datasource"
            && v["query"] == "prometheus"
            && v["name"] == "datasource"),
        "a Prometheus data source variable named datasource"
    );

    // Every query of every panel (and of the variables).
    let mut exprs: Vec<(String, String)> = Vec::new();
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = str_of(&panel["title"], "panel title").to_owned();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "panel id twice: {title}"
        );
        assert!(panel["gridPos"]["w"].as_u64().unwrap() <= 24, "{title}");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("{title}: no targets"));
        assert!(!targets.is_empty(), "{title}: no targets");
        for target in targets {
            exprs.push((title.clone(), str_of(&target["expr"], "expr").to_owned()));
        }
    }
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = &variable["query"];
        let text = query["query"].as_str().or(query.as_str()).unwrap();
        exprs.push((format!("variable {}", variable["name"]), text.to_owned()));
    }

    // A proxy with its admin listener, after requests that create the labelled
    // series.
    let env = support::start_with(
        |_| {},
        |c| c.admin.listen = "127.0.0.1:0".into(),
        Some(support::saturday()),
    )
    .await;
    assert_eq!(env.get("/stock/detail/600519").await.status(), 200);
    assert_eq!(env.get("/stock/detail/600519").await.status(), 200);
    let refused = env.fetch(&env.url("/market/indices")).await;
    assert_eq!(refused.status(), 401);
    assert_eq!(env.get("/no/such/endpoint").await.status(), 404);
    let admin = format!("http://{}", env.proxy.admin_addr.unwrap());
    let exposition = env.text(&format!("{admin}/metrics")).await;
    let scraped = samples(&exposition);
    let histograms: BTreeSet<String> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" histogram"))
        .map(str::to_owned)
        .collect();

    let mut families = BTreeSet::new();
    let mut missing = Vec::new();
    for (title, expr) in &exprs {
        let (metrics, labels) = metrics_and_labels(expr);
        assert!(!metrics.is_empty(), "{title}: no mdproxy metric in {expr}");
        for metric in &metrics {
            families.insert(family(metric, &histograms));
            if !scraped.contains_key(metric) {
                missing.push(format!("{title}: {metric}"));
            }
        }
        // Labels the query needs: on the series of one of its metrics (instance
        // and job are Prometheus' own, added at scrape time).
        for label in labels
            .iter()
            .filter(|l| !matches!(l.as_str(), "instance" | "job"))
        {
            let carried = metrics
                .iter()
                .any(|m| scraped.get(m).is_some_and(|labels| labels.contains(label)));
            if !carried && metrics.iter().all(|m| scraped.contains_key(m)) {
                missing.push(format!("{title}: label {label} on {metrics:?}"));
            }
        }
    }
    println!(
        "metric families the dashboard queries ({}):",
        families.len()
    );
    for family in &families {
        println!("  {family}");
    }
    env.proxy.shutdown().await;
    assert!(
        missing.is_empty(),
        "queried but not in /metrics:\n  {}\n\n/metrics:\n{exposition}",
        missing.join("\n  ")
    );
}

/// The PromQL scan itself: names, labels, strings and Grafana variables.
#[test]
fn promql_scan_finds_metrics_and_labels() {
    let (metrics, labels) = metrics_and_labels(
        r#"histogram_quantile(0.99, sum by (le, cache) (rate(mdproxy_request_duration_seconds_bucket{instance=~"$instance", code!="mdproxy_fake"}[$__rate_interval]))) / on(job) process_open_fds"#,
    );
    assert_eq!(
        metrics,
        BTreeSet::from([
            "mdproxy_request_duration_seconds_bucket".to_owned(),
            "process_open_fds".to_owned()
        ])
    );
    assert_eq!(
        labels,
        BTreeSet::from(["cache", "code", "instance", "job", "le"].map(str::to_owned))
    );
    let histograms = BTreeSet::from(["mdproxy_request_duration_seconds".to_owned()]);
    assert_eq!(
        family("mdproxy_request_duration_seconds_count", &histograms),
        "mdproxy_request_duration_seconds"
    );
    assert_eq!(
        family("mdproxy_hub_polls_total", &histograms),
        "mdproxy_hub_polls_total"
    );
    let scraped = samples(
        "# TYPE x counter\nmdproxy_x_total{a=\"1\",b=\"}\"} 3e-05 # {trace_id=\"x\"} 1\nprocess_y 1\n# EOF\n",
    );
    assert_eq!(
        scraped["mdproxy_x_total"],
        BTreeSet::from(["a".to_owned(), "b".to_owned()])
    );
    assert!(scraped["process_y"].is_empty());
}
