//! The manual stays true: its generated tables (endpoints, configuration keys,
//! TTLs) are the ones the code prints, the example config passes `check-config`,
//! and every document named is there.

use std::collections::BTreeMap;

use mdproxy_api::catalog::catalog;
use mdproxy_config::{At, Config};

use crate::support::read_repo;

/// The endpoints page lists exactly the catalogue's endpoints.
#[test]
fn the_endpoint_table_matches_the_catalogue() {
    assert!(
        read_repo("docs/endpoints.md").contains(&catalog().markdown_table()),
        "docs/endpoints.md's table is out of date: regenerate it with `cargo run -- docs`"
    );
}

/// The MCP page's table and README's are the tools' own, and README's cap is
/// the default one.
#[test]
fn the_mcp_tool_table_matches_the_tools() {
    for doc in ["docs/mcp.md", "README.md"] {
        assert!(
            read_repo(doc).contains(&mdproxy_api::tools::markdown_table()),
            "{doc}'s MCP table is out of date: regenerate it with `cargo run -- docs`"
        );
    }
    let cap = mdproxy_config::McpConfig::default().max_result_chars;
    assert_eq!(cap, 60_000);
    assert!(read_repo("README.md").contains("`mcp.max_result_chars` (60,000)"));
}

/// The configuration page lists every key with its default and variable.
#[test]
fn the_configuration_reference_matches_the_code() {
    assert!(
        read_repo("docs/configuration.md").contains(&mdproxy_core::ops::report::config_reference()),
        "docs/configuration.md's table is out of date: regenerate it with `cargo run -- docs`"
    );
}

/// The shipped example configuration is valid with the secrets its header asks for
/// in the environment, and what it sets is what loads (each value checked here
/// differs from the default, so a loader that ignored the file would fail). Without
/// them it is refused, naming exactly the keys the header says are required.
#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/mdproxy.toml");
    let secrets: BTreeMap<String, String> = [
        ("MDPROXY_AUTH_TOKENS", "3f1d8c0b9e2a7c41,77ab90e1c4d2f365"),
        ("MDPROXY_UPSTREAM_TOKEN", "e0c4a18b5d9f2376"),
        ("MDPROXY_ADMIN_TOKEN", "9b2e4f60a1c7d835"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let config = mdproxy_config::load(path.as_ref(), &secrets, &[]).unwrap();
    let default = Config::default();
    assert_eq!(config.auth.tokens.len(), 2);
    assert_eq!(
        config.upstream.base_url,
        "https://market-data.example.com/api/v1"
    );
    assert_ne!(config.upstream.base_url, default.upstream.base_url);
    assert_eq!(
        config.admin.listen, "127.0.0.1:9091",
        "the status page and metrics are on"
    );
    assert_ne!(config.admin.listen, default.admin.listen);
    let job = &config.scheduler.jobs[0];
    assert_eq!(job.name, "watchlist-klines");
    assert_eq!(job.targets.len(), 2);
    assert!(default.scheduler.jobs.iter().all(|j| j.name != job.name));
    assert_eq!(
        config.upstream.endpoint_timeouts_ms["/stock/financial/statements/{code}"],
        30_000
    );

    let refused = mdproxy_config::load(path.as_ref(), &BTreeMap::new(), &[]).unwrap_err();
    let mut keys: Vec<&str> = refused
        .list
        .iter()
        .map(|p| p.key.as_deref().unwrap_or_default())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["auth.tokens", "upstream.token"], "{refused}");
    assert!(
        refused.list.iter().all(|p| matches!(p.at, At::Line(_))),
        "each points to its table in the file: {refused}"
    );
}

/// The freshness page shows the default TTL of every endpoint as `check-config`
/// prints it.
#[test]
fn the_ttl_table_matches_the_defaults() {
    let table = mdproxy_core::ops::report::ttl_table(&Config::default());
    assert!(
        read_repo("docs/freshness.md").contains(&table),
        "docs/freshness.md's TTL table is out of date: regenerate it with `cargo run -- docs`"
    );
}

/// Every Markdown file README or a source comment names is in the repository
/// (README once pointed to a DOMAIN.md that was not).
#[test]
fn every_document_named_exists() {
    let root = std::path::Path::new(crate::support::ROOT);
    let mut texts = vec![std::fs::read_to_string(root.join("README.md")).unwrap()];
    // The crates' code and manifests, and what deploys and builds them.
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|crate_dir| crate_dir.unwrap().path())
        .chain([
            root.join("deploy"),
            root.join("scripts"),
            root.join(".cargo"),
        ])
        .collect();
    texts.push(std::fs::read_to_string(root.join("Cargo.toml")).unwrap());
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() && !matches!(name.as_str(), "tests" | "target" | "node_modules") {
                dirs.push(path);
            } else if [
                ".rs",
                ".toml",
                ".sh",
                ".py",
                ".service",
                ".yaml",
                "Dockerfile",
            ]
            .iter()
            .any(|end| name.ends_with(end))
            {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
    }
    let mut named = std::collections::BTreeSet::new();
    for text in &texts {
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c))) {
            if word.ends_with(".md") && word.len() > 3 {
                // `../../README.md` in a crate's code names the repository's file.
                named.insert(word.trim_start_matches(['.', '/']).to_owned());
            }
        }
    }
    assert!(named.contains("docs/DOMAIN.md"), "{named:?}");
    for name in &named {
        assert!(
            root.join(name).is_file(),
            "{name} is named but not in the repository"
        );
    }
}

/// A heading's anchor as GitHub makes it: lower case, spaces to hyphens, and
/// everything but letters, digits, `-` and `_` left out.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every link of README and the manual that points into the repository reaches a
/// file that is there, and a heading of it when it names one.
#[test]
fn the_manuals_links_resolve() {
    let root = std::path::Path::new(crate::support::ROOT);
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for (page, text) in crate::support::manual() {
        let dir = root.join(&page).parent().unwrap().to_owned();
        for m in link.captures_iter(&text) {
            let target = &m[1];
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                root.join(&page)
            } else {
                dir.join(file)
            };
            if !path.exists() {
                broken.push(format!("{page}: {target} (no such file)"));
                continue;
            }
            if anchor.is_empty() || path.is_dir() {
                continue;
            }
            let headings: Vec<String> = std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| anchor_of(l.trim_start_matches('#')))
                .collect();
            if !headings.iter().any(|h| h == anchor) {
                broken.push(format!("{page}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every page of the manual is listed in README's table of the manual.
#[test]
fn readme_lists_every_page_of_the_manual() {
    let readme = read_repo("README.md");
    for (page, _) in crate::support::manual().into_iter().skip(1) {
        assert!(
            readme.contains(&format!("]({page})")),
            "README's manual table does not list {page}"
        );
    }
}

/// The shell lines of README's fenced `sh` blocks under the heading `section`.
fn shell_lines(section: &str) -> Vec<String> {
    let readme = read_repo("README.md");
    let start = readme
        .find(&format!("\n## {section}\n"))
        .unwrap_or_else(|| panic!("README has no section {section}"));
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in rest[..end].lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
        } else if in_sh && !trimmed.is_empty() {
            lines.push(trimmed.to_owned());
        }
    }
    lines
}

/// README's demo tour starts with the two commands `mdproxy demo` prints, as the
/// default demo prints them.
#[test]
fn the_tour_shows_what_the_demo_prints() {
    let tour = shell_lines("A tour of the demo");
    let printed = mdproxy::cli::demo_commands("demo-token", "http://127.0.0.1:8080/api/v1");
    assert_eq!(
        tour[..2],
        printed,
        "README's tour and the demo's printout differ"
    );
}

/// The minimal configuration README shows is complete with the three secrets in the
/// environment, and the disk tier's and the fleet's blocks are valid beside it.
#[test]
fn readmes_configuration_blocks_are_valid() {
    let readme = read_repo("README.md");
    let blocks: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert_eq!(
        blocks.len(),
        3,
        "the minimal file, the disk tier, the fleet"
    );
    let secrets: BTreeMap<String, String> = [
        ("MDPROXY_UPSTREAM_TOKEN", "the-vendors-key"),
        (
            "MDPROXY_AUTH_TOKENS",
            "token-for-dashboard-a,token-for-dashboard-b",
        ),
        ("MDPROXY_ADMIN_TOKEN", "a-token-for-purges"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let (minimal, extras): (Vec<&str>, Vec<&str>) =
        blocks.iter().partition(|b| b.contains("[upstream]"));
    let [minimal] = minimal[..] else {
        panic!("one minimal file: {minimal:?}")
    };
    let config = mdproxy_config::from_text(minimal, "README", &secrets, &[]).unwrap();
    assert_eq!(config.admin.listen, "127.0.0.1:9091");
    for extra in &extras {
        let text = format!("{minimal}\n{extra}");
        mdproxy_config::from_text(&text, "README", &secrets, &[])
            .unwrap_or_else(|e| panic!("{extra}\n{e}"));
    }
    // The secrets README's recipe puts in the environment file are the ones the
    // minimal file needs, and real variables.
    let recipe = shell_lines("In front of the real upstream").join("\n");
    for name in secrets.keys() {
        assert!(
            recipe.contains(&format!("{name}=")),
            "the recipe sets {name}"
        );
    }
}

/// Every `MDPROXY_*` variable README and the manual name is one a key or the
/// command line reads.
#[test]
fn every_variable_named_is_real() {
    let known: std::collections::BTreeSet<String> = mdproxy_config::env_keys()
        .into_iter()
        .map(|k| k.var)
        .chain(["MDPROXY_LOG".to_owned()])
        .collect();
    let var = regex::Regex::new(r"\bMDPROXY_[A-Z0-9_]*[A-Z0-9]").unwrap();
    let mut unknown = Vec::new();
    for (page, text) in crate::support::manual() {
        for m in var.find_iter(&text) {
            let name = m.as_str();
            // A pattern, a misspelling shown as one, or Kubernetes' service links.
            let example = name.ends_with("_KEY")
                || name.contains("TOKN")
                || name.starts_with("MDPROXY_SERVICE_")
                || name.starts_with("MDPROXY_PORT_");
            if !known.contains(name) && !example {
                unknown.push(format!("{page}: {name}"));
            }
        }
    }
    assert!(unknown.is_empty(), "not variables: {unknown:?}");
}

/// Every command README's table names is one `mdproxy --help` lists.
#[test]
fn the_commands_readme_names_are_listed_by_help() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let readme = read_repo("README.md");
    let named = regex::Regex::new(r"\| `mdproxy ([a-z-]+)").unwrap();
    let commands: Vec<&str> = named
        .captures_iter(&readme)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    assert!(commands.len() >= 6, "{commands:?}");
    for command in commands {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "--help does not list {command}:\n{help}"
        );
    }
}

/// README's demo tour works as printed: each command, run in a shell against a demo
/// (its addresses put in place of the default ones), answers as the tour says.
#[tokio::test]
#[ignore = "needs curl: scripts/test installs it and runs the ignored tests"]
async fn the_tour_works_as_printed() {
    crate::support::program("curl");
    let (mut demo, base, admin) = crate::support::demo_process().await;
    let tour = shell_lines("A tour of the demo");
    let mut outputs = Vec::new();
    for line in &tour {
        let line = line
            .replace("http://127.0.0.1:8080/api/v1", &base)
            .replace("http://127.0.0.1:9091", &format!("http://{admin}"))
            // The stream runs until stopped: three seconds of it here.
            .replace("curl -sN ", "curl -sN --max-time 3 ");
        let out = tokio::process::Command::new("sh")
            .args(["-c", &line])
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        // curl ends a stream cut by --max-time with 28; everything else exits 0.
        let code = out.status.code();
        assert!(
            code == Some(0) || (line.contains("--max-time") && code == Some(28)),
            "{line}: {code:?}\n{stdout}"
        );
        outputs.push(stdout);
    }
    assert!(
        outputs[0].to_ascii_lowercase().contains("x-cache: miss"),
        "{}",
        outputs[0]
    );
    // The K-lines as the upstream shapes them, the first 300 bytes of them.
    assert!(
        outputs[1].starts_with(r#"{"success":true,"data":{"code":"000001""#)
            && outputs[1].len() <= 301,
        "{}",
        outputs[1]
    );
    assert!(outputs[2].contains("event: quote"), "{}", outputs[2]);
    assert!(
        outputs[3].contains("did you mean period?"),
        "{}",
        outputs[3]
    );
    assert!(
        outputs[4].contains("mdproxy_responses_total"),
        "{}",
        outputs[4]
    );
    demo.stop().await;
}

/// The contract's table of error codes lists every code the API has, each with the
/// status it is sent with.
#[test]
fn the_contract_lists_every_error_code_with_its_status() {
    let doc = read_repo("docs/http-contract.md");
    let table = doc
        .split("### Codes and statuses")
        .nth(1)
        .expect("docs/http-contract.md has the table of codes");
    for error in mdproxy_api::error::Error::one_of_each() {
        let code = format!("`{}`", error.code());
        let row = table
            .lines()
            .find(|l| l.starts_with('|') && l.contains(&code))
            .unwrap_or_else(|| panic!("{code} is not in the table of codes"));
        let status = error.status().as_u16().to_string();
        assert!(
            row.trim_end().ends_with(&format!("| {status} |")),
            "{code} is sent with {status}: {row}"
        );
    }
}

/// The contract names the validator of every representation (the quick copies'
/// too), and the compression page the levels the code compresses at.
/// What deployment.md says an entry weighs is what the weigher counts.
#[test]
fn the_deployment_page_gives_an_entrys_bookkeeping() {
    use mdproxy_core::cache::encoding::MIN_BYTES;
    use mdproxy_core::cache::entry::{COPIES_OVERHEAD, ENTRY_OVERHEAD};
    let weighs = format!(
        "and {ENTRY_OVERHEAD} bytes of\n  bookkeeping, and {COPIES_OVERHEAD} more for an answer of {MIN_BYTES} bytes or more"
    );
    let page = read_repo("docs/deployment.md");
    assert!(page.contains(&weighs), "docs/deployment.md says {weighs:?}");
}

#[test]
fn the_compression_pages_name_the_codes_validators_and_levels() {
    use mdproxy_core::cache::encoding::{Coding, QUICK_LEVEL};
    let contract = read_repo("docs/http-contract.md");
    let row = contract
        .lines()
        .find(|l| l.starts_with("| `ETag` |"))
        .expect("the contract has an ETag row");
    for coding in Coding::ALL {
        for suffix in [coding.etag_suffix(), coding.quick_etag_suffix()] {
            let tag = format!("\"<hash>{suffix}\"");
            assert!(row.contains(&tag), "{tag} in {row}");
        }
    }
    let levels = format!(
        "gzip {}, brotli {}, zstd {}; quick copies at level {QUICK_LEVEL} of each.",
        Coding::Gzip.level(),
        Coding::Brotli.level(),
        Coding::Zstd.level()
    );
    let page = read_repo("docs/compression.md");
    assert!(page.contains(&levels), "docs/compression.md says {levels}");
    let weighed = format!(
        "its bytes and\n{} bytes of bookkeeping",
        mdproxy_core::cache::entry::QUICK_OVERHEAD
    );
    assert!(
        page.contains(&weighed),
        "docs/compression.md says {weighed:?}"
    );
}
